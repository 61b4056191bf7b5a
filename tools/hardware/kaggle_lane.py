"""``python -m tools.hardware kaggle``: the hardware run as a private kernel on Kaggle's TPU v5e-8.

Drives the ``kaggle`` package's library API; read in kaggle 2.2.5 and kagglesdk 0.1.38:

- a token is checked by ``IntrospectToken`` (refused: ``active: false`` and the client exits, or
  HTTP 401), a legacy key by nothing: so the quota call comes before anything is pushed;
- ``kernels_push`` sends ``machineShape`` (kaggle-cli PR #1198) and pins no image (#1197); a
  refusal comes back in the response's ``error``, with HTTP 200;
- right after a push the status can still be the previous session's (PR #1177): each run has its
  own slug, status and outputs are asked for the pushed version, and an end state seen before
  the run was active is trusted only after a grace period;
- no request has a timeout (kagglesdk ``kaggle_http_client.py``): the lane gives each one, and
  retries a 5xx, a 429, a dropped connection or a timeout with back-off;
- a session timeout has been seen not to stop a run, deleting the kernel did (unsloth's Kaggle
  CI): past the wall-clock limit the kernel is deleted.

The credentials reach only the client's requests, never the pushed script.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
import time
from pathlib import Path

from .lane import Run, Stop, checked_commit, finish, log_tail
from .records import read_json

MACHINE_SHAPE = "TpuV5E8"
OUT = "/kaggle/working/hardware-run"
SETTINGS = "https://www.kaggle.com/settings/api"
CODE = "https://www.kaggle.com/code"
TOKEN_FILES = ("~/.kaggle/access_token", "~/.kaggle/access_token.txt")
KEY_FILES = ("~/.kaggle/kaggle.json", "~/.kaggle/credentials.json")
NO_CREDENTIALS = (
    "No Kaggle credentials found. Set KAGGLE_API_TOKEN to an API token (or save the token in "
    "~/.kaggle/access_token), or set KAGGLE_USERNAME and KAGGLE_KEY (a legacy key, also read from "
    f'~/.kaggle/kaggle.json). Create a token at {SETTINGS} ("Generate New Token" under "API").'
)
# CANCEL_REQUESTED still runs (and uses quota) until Kaggle acknowledges it.
ACTIVE = ("QUEUED", "RUNNING", "NEW_SCRIPT", "CANCEL_REQUESTED")
ENDED = ("COMPLETE", "ERROR", "CANCEL_ACKNOWLEDGED")
DOING = {"wait": "asking the kernel's status", "download": "downloading its outputs"}
WHEN = {
    "connect": "before anything was pushed",
    "push": "during the push",
    "wait": "while the kernel runs",
    "download": "while downloading the outputs",
}


class GaveUp(Exception):
    """A call kept failing transiently (its last failure in words) for ``retries`` tries."""


def credentials_source() -> str | None:
    """Where the client will find credentials (a name, never the secret), or None."""
    if os.environ.get("KAGGLE_API_TOKEN"):
        return "KAGGLE_API_TOKEN"
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME and KAGGLE_KEY"
    for name in (*TOKEN_FILES, *KEY_FILES):
        path = Path(name).expanduser()
        if path.is_file() and path.read_text(encoding="utf-8").strip():
            return name
    return None


def _refused(credential: str, how: str) -> Stop:
    """Kaggle refused ``credential`` (words naming it, never the secret)."""
    return Stop(
        f"Kaggle refused {credential} ({how}): it is wrong, expired or revoked. Nothing was "
        f'pushed. Make a new API token at {SETTINGS} ("Generate New Token" under "API") and set '
        "KAGGLE_API_TOKEN to it (or save it in ~/.kaggle/access_token); a token is tried before "
        "a legacy key.",
        f"Kaggle refused {credential.split(' in ')[0]}.",
    )


def _credential(api, source: str) -> str:
    """Words for the credential the client authenticated with (its method, where it came from)."""
    method = str(api.config_values.get("auth_method", ""))
    if method == "LEGACY_API_KEY":
        user = api.config_values.get("username", "")
        where = "KAGGLE_KEY" if os.environ.get("KAGGLE_KEY") else "~/.kaggle/kaggle.json"
        return f"the legacy key in {where} for user {user}"
    if method == "OAUTH":
        return "the sign-in of `kaggle auth login` in ~/.kaggle/credentials.json"
    return f"the API token in {source}"


def _import_client(timeout: float):
    """``KaggleApi``, with every request of this process given ``timeout`` seconds."""
    try:
        import requests
        from kaggle.api.kaggle_api_extended import KaggleApi
    except ImportError as err:
        raise Stop(
            f"The kaggle client cannot be imported ({err}). Install the tools' pins, which "
            "include kaggle and the `six` it imports without declaring: `make env`, or `pip "
            "install -r requirements-tools.txt`.",
            "the kaggle client cannot be imported.",
        ) from None
    send = requests.Session.send

    def send_with_timeout(self, request, **kwargs):
        kwargs["timeout"] = kwargs.get("timeout") or timeout
        return send(self, request, **kwargs)

    requests.Session.send = send_with_timeout
    return KaggleApi


def _status_code(err: BaseException) -> int | None:
    return getattr(getattr(err, "response", None), "status_code", None)


def transient(err: BaseException) -> str | None:
    """Words for a failure worth retrying (5xx, 429, a dropped connection, a timeout), or None."""
    import requests

    code = _status_code(err)
    if isinstance(err, requests.HTTPError):
        return f"HTTP {code}" if code is not None and (code == 429 or code >= 500) else None
    if isinstance(err, requests.Timeout):
        return "no answer in time"
    if isinstance(err, (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)):
        return "the connection dropped"
    return None


def read_log(path: Path) -> str:
    """The text of the kernel's log (a JSON list of ``{stream_name, time, data}``): its ``data``
    strings, read even from a log cut short; the raw text when it is not such a list."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    pieces = re.findall(r'"data"\s*:\s*("(?:[^"\\]|\\.)*")', text)
    if not pieces and not text.startswith("["):
        return text
    return "".join(json.loads(piece, strict=False) for piece in pieces)


def _failed_lesson(out: Path, log: str) -> str:
    rows = read_json(out / "hardware-run" / "lessons" / "summary.json").get("rows", [])
    bad = [r["notebook"] for r in rows if r.get("status") != "passed"]
    started = [line.split()[0] for line in log.splitlines() if line.strip().endswith(".ipynb ...")]
    return ", ".join(bad) or (started[-1] if started else "none recorded (before the lessons)")


class KaggleRun:
    """One run of the lane: the client, the kernel, and the stage it is in (for Ctrl-C)."""

    def __init__(self, run: Run, folder: Path, options, source: str):
        """``options``: the limit, poll, stale_grace, api_timeout, api_retries and collect."""
        self.run, self.folder, self.options, self.source = run, folder, options, source
        self.ref, self.collecting = options.collect, bool(options.collect)
        self.version: int | None = None
        self.stage, self.state = "connect", ""
        self.api = None

    def stopped(self, cause: str, reason: str) -> Stop:
        """The lane stops (``cause``): what runs on Kaggle now, and what to run next."""
        ref, url = self.ref, f"{CODE}/{self.ref}"
        collect = f"\n    python -m tools.hardware kaggle --collect {ref}"
        state = {
            "connect": "nothing runs on Kaggle.",
            "push": f"Kaggle may have received it. If {url} exists, the kernel runs and uses TPU "
            f"quota: collect it with{collect}\nor stop it with: kaggle kernels delete {ref}. If "
            "it does not exist, nothing runs.",
            "wait": f"The kernel {ref} is still running on Kaggle, using TPU quota until it ends: "
            f"{url}\nCollect its record later with:{collect}\nor stop it with: kaggle kernels "
            f"delete {ref}",
            "download": f"The kernel {ref} has ended ({self.state}); its outputs stay on Kaggle "
            f"({url}). Fetch them again with:{collect}",
        }[self.stage]
        return Stop(f"{cause} {state}", reason)

    def retried(self, call):
        """``call()``, retried with back-off after transient failures; GaveUp past the limit."""
        delay, failures = self.options.poll, 0
        while True:
            try:
                return call()
            except (OSError, ValueError) as err:
                why = transient(err)
                if why is None:
                    raise
                failures += 1
                if failures > self.options.api_retries:
                    raise GaveUp(f"{why}, {failures} tries in a row") from None
                print(
                    f"  Kaggle's API: {why} while {DOING[self.stage]}; retry {failures} of "
                    f"{self.options.api_retries} in {delay:.3g} s",
                    flush=True,
                )
                time.sleep(delay)
                delay = min(delay * 2, 300)

    def connect(self) -> None:
        """An authenticated client, checked with a call that needs the credentials."""
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its help, when it cannot sign in
                self.api = _import_client(self.options.api_timeout)()
                self.api.authenticate()
            self.check_quota()  # a legacy key is first used here: before anything is pushed
        except SystemExit:  # an inactive token, and nothing else to try
            token = self.source in ("KAGGLE_API_TOKEN", *TOKEN_FILES)
            what = "the API token" if token else "the credentials"
            raise _refused(f"{what} in {self.source}", "inactive") from None
        except OSError as err:
            if _status_code(err) in (401, 403):
                credential = _credential(self.api, self.source)
                raise _refused(credential, f"HTTP {_status_code(err)}: {err}") from None
            raise

    def check_quota(self) -> None:
        response = self.api.quota_view()
        quota = response.tpu_quota
        if quota is None:
            print("Kaggle reported no TPU quota; going on.")
            return
        used = quota.time_used.total_seconds() / 3600
        allowed = quota.total_time_allowed.total_seconds() / 3600
        refresh = response.quota_refresh_time
        when = f"; it refreshes {refresh:%Y-%m-%d %H:%M} UTC" if refresh else ""
        said = f"{used:.1f} h of {allowed:.1f} h used this week{when}."
        if used >= allowed and not self.collecting:
            raise Stop(f"The TPU quota is spent: {said}", "no TPU quota left.")
        print(f"TPU quota: {said}")

    def push(self) -> None:
        """Push the run as a private kernel; keeps its ref (``user/slug``) and version."""
        run = self.run
        title = f"TPU Field Guide hw {run.stamp.replace('-', ' ')}"
        self.ref = f"{self.api.config_values['username']}/{title.lower().replace(' ', '-')}"
        metadata = {
            "id": self.ref,
            "title": title,
            "code_file": "run.py",
            "language": "python",
            "kernel_type": "script",
            "is_private": True,
            "enable_internet": True,
            "machine_shape": MACHINE_SHAPE,
        }
        self.stage = "push"
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2))
            (Path(folder) / "run.py").write_text(run.script(OUT))
            limit = str(int(self.options.limit))
            response = self.api.kernels_push(folder, timeout=limit, acc=MACHINE_SHAPE)
        if response.error and "session count" in response.error.lower():
            raise Stop(
                f"A TPU session is already running on this Kaggle account, and Kaggle runs one "
                f'at a time ("{response.error}"). Wait for it to end, or stop it on '
                f"{CODE} (or `kaggle kernels delete OWNER/SLUG`).",
                "a TPU session is already running.",
            )
        if response.error:
            raise Stop(f'Kaggle refused the push: "{response.error}"', "Kaggle refused the push.")
        self.version = response.version_number
        self.stage = "wait"
        print(
            f"Pushed {response.ref or self.ref} (version {self.version}, private, "
            f"{MACHINE_SHAPE}, internet on): {response.url or f'{CODE}/{self.ref}'}"
        )

    def versioned(self) -> str:
        return f"{self.ref}/{self.version}" if self.version else self.ref

    def wait(self):
        """Poll with back-off until the run ends; the last status response. Deletes past limit."""
        limit, grace = self.options.limit, 0 if self.collecting else self.options.stale_grace
        self.stage = "wait"
        began = time.monotonic()
        delay, seen_active = self.options.poll, False
        while True:
            response = self.retried(lambda: self.api.kernels_status(self.versioned()))
            self.state, elapsed = response.status.name, time.monotonic() - began
            print(f"  {self.state} after {elapsed / 60:.1f} min", flush=True)
            seen_active = seen_active or self.state in ACTIVE
            pushed_failed = self.state == "ERROR" and self.version  # not a stale status
            if self.state in ENDED and (seen_active or elapsed >= grace or pushed_failed):
                return response
            if self.state in ENDED:
                print("  (that may still be the previous session, kaggle-cli PR #1177: waiting)")
            if elapsed >= limit:
                self.api.kernels_delete(self.ref, no_confirm=True)
                raise Stop(
                    f"The run passed its wall-clock limit of {limit / 3600:.2f} h while "
                    f"{self.state}; the kernel {self.ref} was deleted, which stops it (a session "
                    "timeout alone has not).",
                    "the wall-clock limit passed; the kernel was deleted.",
                )
            time.sleep(min(delay, max(limit - elapsed, 0.01)))
            delay = min(delay * 1.5, 300)

    def collect(self, status) -> int:
        """Download the pushed version's outputs; store its record in the lane's folder."""
        self.stage = "download"
        out, run_id = self.run.out, None if self.collecting else self.run.run_id
        self.retried(
            lambda: self.api.kernels_output(self.versioned(), path=str(out), force=True, quiet=True)
        )
        record = out / "hardware-run" / "record.json"
        if record.exists():  # the record first: a bad log never loses it
            return finish(record, self.folder, run_id)
        log_file = out / f"{self.ref.split('/')[1]}.log"
        log = read_log(log_file)
        tail = log_tail(log) or "    (empty: the kernel printed nothing)"
        name, url = status.status.name, f"{CODE}/{self.ref}"
        if name == "COMPLETE":
            raise Stop(
                f"The kernel {self.ref} completed without writing a record ({url}). Last lines "
                f"of its log ({log_file}):\n{tail}",
                "the kernel completed without a record.",
            )
        raise Stop(
            f"The kernel {self.ref} ended in {name} ({status.failure_message or 'no message'}) "
            f"without a record ({url}). Failing lesson: {_failed_lesson(out, log)}. Last lines "
            f"of its log ({log_file}):\n{tail}",
            f"the kernel ended in {name}.",
        )


def main(run: Run, folder: Path, options) -> int:
    """The lane; ``options.collect`` names a kernel pushed earlier to collect instead of a push."""
    source = credentials_source()
    if source is None:
        raise Stop(NO_CREDENTIALS, "no Kaggle credentials.")
    lane = KaggleRun(run, folder, options, source)
    try:
        lane.connect()
        if not lane.collecting:
            run.commit = checked_commit()
            lane.push()
        return lane.collect(lane.wait())
    except KeyboardInterrupt:
        when = WHEN[lane.stage]
        raise lane.stopped(f"\nInterrupted {when}:", f"interrupted {when}.") from None
    except (GaveUp, OSError, ValueError) as err:  # requests' errors are OSErrors
        if lane.stage not in DOING:
            raise Stop(f"Kaggle's API failed: {err}", "Kaggle's API failed.") from None
        how = f"kept failing ({err})" if isinstance(err, GaveUp) else f"failed ({err})"
        cause = f"Kaggle's API {how} while {DOING[lane.stage]}."
        raise lane.stopped(cause, f"Kaggle's API failed {WHEN[lane.stage]}.") from None
