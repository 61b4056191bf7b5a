"""A stand-in for Kaggle's API, on 127.0.0.1:80, answering the real ``kaggle`` client (2.2.5).

With ``KAGGLE_API_ENVIRONMENT=LOCALHOST`` set before it is imported, the ``kaggle`` package adds
``--local`` to its client's arguments (``KaggleApi.args``) and kagglesdk sends every call to
``http://localhost/api/v1/<service>/<Method>`` (``kaggle_env.py``, ``kaggle_http_client.py``):
a POST of camelCase JSON, with ``Authorization: Bearer <token>`` or HTTP Basic for a legacy key.
Another port cannot be chosen (the ``TEST`` environment's localhost:7777 is kagglesdk's alone;
the package only maps ``LOCALHOST``), so this binds port 80 on loopback only, which needs root.

Fields are those of kagglesdk 0.1.38's types (``kernels/types/kernels_api_service.py``,
``security/types/oauth_service.py``): durations as ``"<seconds>s"``, enums by name. What the
kernel would do is played from a :class:`Scenario`: the statuses in turn, the push's ``error``,
the quota, and the outputs, made when the push arrives from the pushed script's commit and run
id, as the driver on a TPU host would write them. Every request is kept in ``received`` (the
files' GETs too, as ``GET /files/NAME``).

The faults Kaggle's servers really produce are played from ``Scenario.faults``: for a method (or
``"download"``, the GET of an output file), a list consumed one per request, each an HTTP status
to answer with, ``"drop"`` (close the connection without an answer) or ``"hang"`` (wait
``hang_seconds`` or until the stand-in stops, then close the connection unanswered).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["ADDRESS", "KaggleStandIn", "Scenario"]

ADDRESS = ("127.0.0.1", 80)
USER = "fieldguide"


@dataclass
class Scenario:
    """What the stand-in answers; ``outputs(commit, run_id)`` returns ``{file name: bytes}``."""

    token: str = ""
    legacy: tuple[str, str] = ("", "")
    statuses: list[str] = field(default_factory=lambda: ["QUEUED", "RUNNING", "COMPLETE"])
    failure_message: str = ""
    push_error: str = ""
    used_seconds: int = 3 * 3600
    allowed_seconds: int = 20 * 3600
    outputs: object = None
    log: list[dict] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # outputs of a run pushed earlier
    token_refusal: str = "inactive"  # or "401": how IntrospectToken answers a token it refuses
    faults: dict[str, list] = field(default_factory=dict)
    hang_seconds: float = 30.0
    # The newest session's listing still shows the earlier outputs (``files``) to a request that
    # names no version; one asking for the pushed version gets its own.
    lagging_outputs: bool = False
    log_text: str | None = None  # the log as served (default: ``log`` as JSON)


class KaggleStandIn:
    """``with KaggleStandIn(scenario) as kaggle:`` serves until the block ends."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.received: list[dict] = []
        self.files: dict[str, bytes] = dict(scenario.files)
        self.status_calls = 0
        self.deleted: list[str] = []
        self.earlier: dict[str, bytes] = dict(scenario.files)
        self.faults = {k: list(v) for k, v in scenario.faults.items()}
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(ADDRESS, self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def calls(self, method: str) -> list[dict]:
        return [r["body"] for r in self.received if r["path"].endswith("/" + method)]

    def fault(self, method: str):
        """The next fault planned for ``method`` (None: answer normally); waits out a hang."""
        planned = self.faults.get(method)
        fault = planned.pop(0) if planned else None
        if fault == "hang":  # then no answer: the client has given up waiting by now
            self._release.wait(self.scenario.hang_seconds)
            return "drop"
        return fault

    # --- the answers -------------------------------------------------------------------------

    def _authorised(self, header: str) -> bool:
        if self.scenario.token and header == f"Bearer {self.scenario.token}":
            return True
        user, key = self.scenario.legacy
        basic = base64.b64encode(f"{user}:{key}".encode()).decode()
        return bool(user) and header == f"Basic {basic}"

    def answer(self, method: str, body: dict, auth: str) -> tuple[int, dict]:
        if method == "IntrospectToken":
            active = bool(self.scenario.token) and body.get("token") == self.scenario.token
            if not active and self.scenario.token_refusal == "401":
                return 401, {"code": 401, "message": "Unauthenticated"}
            return 200, {"active": active, "username": USER if active else ""}
        if not self._authorised(auth):
            return 401, {"code": 401, "message": "Unauthenticated"}
        if method == "GetAcceleratorQuotaStatistics":
            quota = {
                "timeUsed": f"{self.scenario.used_seconds}s",
                "totalTimeAllowed": f"{self.scenario.allowed_seconds}s",
            }
            return 200, {"quotaRefreshTime": "2026-11-28T00:00:00Z", "tpuQuota": quota}
        if method == "SaveKernel":
            return 200, self._save(body)
        if method == "GetKernelSessionStatus":
            statuses = self.scenario.statuses
            status = statuses[min(self.status_calls, len(statuses) - 1)]
            self.status_calls += 1
            answer = {"status": status}
            if status == "ERROR":
                answer["failureMessage"] = self.scenario.failure_message
            return 200, answer
        if method == "ListKernelSessionOutput":
            lagging = self.scenario.lagging_outputs and not body.get("versionLabel")
            served, where = (self.earlier, "earlier/") if lagging else (self.files, "")
            files = [{"url": f"http://localhost/files/{where}{n}", "fileName": n} for n in served]
            log = self.scenario.log_text
            return 200, {
                "files": files,
                "log": json.dumps(self.scenario.log) if log is None else log,
            }
        if method == "DeleteKernel":
            self.deleted.append(f"{body['userName']}/{body['kernelSlug']}")
            return 200, {}
        return 404, {"code": 404, "message": f"{method} is not served by the stand-in"}

    def _save(self, body: dict) -> dict:
        if self.scenario.push_error:
            return {"error": self.scenario.push_error}
        commit = re.search(r'^COMMIT = "([0-9a-f]{40})"', body["text"], re.M).group(1)
        run_id = re.search(r'"--run-id", \'([\w-]+)\'', body["text"]).group(1)
        if self.scenario.outputs is not None:
            self.files = self.scenario.outputs(commit, run_id)
        slug = body["slug"]
        return {"ref": slug, "url": f"http://localhost/code/{slug}", "versionNumber": 1}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, data: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802 (the http.server API)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                auth = self.headers.get("Authorization", "")
                standin.received.append({"path": self.path, "body": body})
                method = self.path.rsplit("/", 1)[-1]
                if self._faulted(standin.fault(method)):
                    return
                code, answer = standin.answer(method, body, auth)
                self._send(code, json.dumps(answer).encode(), "application/json")

            def _faulted(self, fault) -> bool:
                if fault == "drop":
                    self.close_connection = True
                    return True
                if isinstance(fault, int):
                    answer = {"code": fault, "message": f"stand-in fault {fault}"}
                    self._send(fault, json.dumps(answer).encode(), "application/json")
                    return True
                return False

            def do_GET(self):  # noqa: N802
                standin.received.append({"path": f"GET {self.path}", "body": {}})
                if self._faulted(standin.fault("download")):
                    return
                name = self.path.removeprefix("/files/")
                files = standin.files
                if name.startswith("earlier/"):
                    name, files = name.removeprefix("earlier/"), standin.earlier
                if name in files:
                    self._send(200, files[name], "application/octet-stream")
                else:
                    self._send(404, b"not found", "text/plain")

            def log_message(self, *args):  # keep the test output clean
                pass

        return Handler
