"""``python -m tools.hardware kaggle``: the hardware run as a private kernel on Kaggle's TPU v5e-8.

Drives the official ``kaggle`` package (its library API, which the CLI wraps). Platform facts
it relies on, with their sources (read in kaggle 2.2.5 and kagglesdk 0.1.38):

- credentials: ``KAGGLE_API_TOKEN`` or ``~/.kaggle/access_token`` (kagglesdk ``kaggle_env.py``),
  checked with ``security.OAuthService/IntrospectToken``; or ``KAGGLE_USERNAME`` + ``KAGGLE_KEY``
  / ``~/.kaggle/kaggle.json``; or ``kaggle auth login``'s ``~/.kaggle/credentials.json``
  (``KaggleApi.authenticate``, which ends the process when none works: caught here);
- ``kernels_push`` reads ``kernel-metadata.json`` and sends ``SaveKernel`` with ``machineShape``
  (the accelerator; ``TpuV5E8`` is the v5e-8, kaggle-cli PR #1198, sent by push since #907),
  ``isPrivate``, ``enableInternet``, ``dockerImage``, ``sessionTimeoutSeconds``; a refusal comes
  back in the response's ``error`` field with HTTP 200 ("Maximum batch TPU session count of 1
  reached"), and the CLI still exits 0, so the field is read here;
- nothing pins an image: no ``docker_image``, and the kernel is a script, so no notebook metadata
  can carry a ``dockerImageVersionId`` (either put a TPU push on the CPU image, kaggle-cli#1197);
- ``kernels_status`` (``GetKernelSessionStatus``) answers QUEUED, RUNNING, COMPLETE, ERROR,
  CANCEL_REQUESTED, CANCEL_ACKNOWLEDGED (``KernelWorkerStatus``); right after a push it can still
  describe the previous session (kaggle-cli PR #1177): every run has its own kernel slug, its
  status is asked for the pushed version (``versionLabel`` ``v<N>``), ERROR for it ends the wait
  at once, another end state seen before the run was ever queued or running is trusted only
  after a grace period, CANCEL_REQUESTED still runs, and the record must carry this run's id;
- ``kernels_output`` (``ListKernelSessionOutput``, which takes the same ``versionLabel``: asked
  here for the pushed version) downloads what the kernel wrote to ``/kaggle/working`` plus
  ``<slug>.log``, a JSON list of ``{stream_name, time, data}``, read leniently (the record is
  looked for first: a truncated log never loses it);
- no call of the client has a timeout (kagglesdk ``kaggle_http_client.py`` sends without one):
  the lane gives every request one, and retries a 5xx, a 429, a dropped connection or a timeout
  while polling or downloading, with back-off, before it gives up and says how to collect later;
- a refused token: ``IntrospectToken`` answers ``active: false`` (the client then ends the
  process) or HTTP 401 (the client raises); a legacy key is not checked by ``authenticate`` at
  all, so the quota call, the first that needs it, is made before anything is pushed;
- the package imports ``six`` without declaring it (``kaggle/models/upload_file.py``): it is
  pinned beside ``kaggle`` in requirements-tools.txt, and an import failure is a sentence;
- the session timeout has been seen not to stop a run, deleting the kernel did (unsloth's Kaggle
  CI): past the wall-clock limit the kernel is deleted (``DeleteKernel``);
- ``quota_view`` (``GetAcceleratorQuotaStatistics``, ``kaggle quota`` since 2.2.1): TPU hours used
  and allowed this week.

The credentials reach only the client's requests: the pushed script holds the commit, the run id
and the repository, nothing else.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import kernel
from .lane import Run, Stop, checked_commit, finish, log_tail

MACHINE_SHAPE = "TpuV5E8"
OUT = "/kaggle/working/hardware-run"
SETTINGS = "https://www.kaggle.com/settings/api"
TOKEN_FILES = ("~/.kaggle/access_token", "~/.kaggle/access_token.txt")
KEY_FILES = ("~/.kaggle/kaggle.json", "~/.kaggle/credentials.json")
NO_CREDENTIALS = (
    "No Kaggle credentials found. Set KAGGLE_API_TOKEN to an API token (or save the token in "
    "~/.kaggle/access_token), or set KAGGLE_USERNAME and KAGGLE_KEY (a legacy key, also read from "
    f"~/.kaggle/kaggle.json). Create a token at {SETTINGS} "
    '("Generate New Token" under "API").'
)
# CANCEL_REQUESTED: a cancel was asked, the session still runs (and uses quota) until Kaggle
# acknowledges it (CANCEL_ACKNOWLEDGED).
ACTIVE = ("QUEUED", "RUNNING", "NEW_SCRIPT", "CANCEL_REQUESTED")
ENDED = ("COMPLETE", "ERROR", "CANCEL_ACKNOWLEDGED")
MISMATCH_TRIES = 3  # downloads while the outputs still carry another run's id


@dataclass
class Options:
    """How the lane waits: wall-clock limit, first poll, stale grace (s), API timeout and retries."""

    limit: float = 9 * 3600
    poll: float = 30.0
    grace: float = 600.0
    timeout: float = 60.0
    retries: int = 8


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


def kernel_url(ref: str) -> str:
    return f"https://www.kaggle.com/code/{ref}"


def _refused(credential: str, how: str) -> Stop:
    """Kaggle refused ``credential`` (words naming it, never the secret)."""
    return Stop(
        f"Kaggle refused {credential} ({how}): it is wrong, expired or revoked. Nothing was "
        f'pushed. Make a new API token at {SETTINGS} ("Generate New Token" under "API") and set '
        "KAGGLE_API_TOKEN to it (or save it in ~/.kaggle/access_token); a token is tried before "
        "a legacy key.",
        f"Kaggle refused {credential.split(' in ')[0].split(' for ')[0]}.",
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
    if not getattr(send, "field_guide_timeout", None):

        def send_with_timeout(self, request, **kwargs):
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = timeout
            return send(self, request, **kwargs)

        send_with_timeout.field_guide_timeout = timeout
        requests.Session.send = send_with_timeout
    return KaggleApi


def _status_code(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


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
    """The text of the kernel's log ``path``: a JSON list of ``{data}``, else whatever it holds.

    A log cut short (or not JSON at all) gives the ``data`` strings that can still be read, or
    the raw text: never an exception.
    """
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        entries = json.loads(text)
    except ValueError:
        pieces = [_string(p) for p in re.findall(r'"data"\s*:\s*("(?:[^"\\]|\\.)*")', text)]
        return "".join(pieces) if pieces else text
    if not isinstance(entries, list):
        return text
    return "".join(str(e.get("data", "")) for e in entries if isinstance(e, dict))


def _string(literal: str) -> str:
    """A JSON string literal's text (its raw text if it holds an escape JSON does not know)."""
    try:
        return json.loads(literal)
    except ValueError:
        return literal[1:-1]


def _failed_lesson(out: Path, log: str) -> str:
    summary = out / "hardware-run" / "lessons" / "summary.json"
    try:
        rows = json.loads(summary.read_text())["rows"] if summary.exists() else []
    except (ValueError, KeyError):
        rows = []
    bad = [r["notebook"] for r in rows if r.get("status") not in ("passed", "cached")]
    started = [line.split()[0] for line in log.splitlines() if line.strip().endswith(".ipynb ...")]
    return ", ".join(bad) or (started[-1] if started else "none recorded (before the lessons)")


class KaggleRun:
    """One run of the lane: the client, the kernel, and the stage it is in (for Ctrl-C)."""

    def __init__(self, run: Run, folder: Path, options: Options, ref: str, source: str):
        self.run, self.folder, self.options, self.source = run, folder, options, source
        self.ref, self.collecting = ref, bool(ref)
        self.version: int | None = None
        self.stage, self.state = "connect", ""
        self.api = None

    # --- what to say when the lane stops while the kernel exists -----------------------------

    def stopped(self, cause: str, reason: str) -> Stop:
        """The lane stops once the kernel exists: the kernel's state, and what to run next."""
        ref, collect = self.ref, f"python -m tools.hardware kaggle --collect {self.ref}"
        if self.stage == "wait":
            state = (
                f"The kernel {ref} is still running on Kaggle, using TPU quota until it ends: "
                f"{kernel_url(ref)}\nCollect its record later with:\n    {collect}\nor stop it "
                f"with: kaggle kernels delete {ref}"
            )
        else:
            state = (
                f"The kernel {ref} has ended ({self.state}); its outputs stay on Kaggle "
                f"({kernel_url(ref)}). Fetch them again with:\n    {collect}"
            )
        return Stop(f"{cause} {state}", reason)

    def interrupted(self) -> Stop:
        if self.stage == "connect":
            return Stop(
                "\nInterrupted before anything was pushed: nothing runs on Kaggle.",
                "interrupted before the push.",
            )
        if self.stage == "push":
            ref = self.ref
            return Stop(
                f"\nInterrupted during the push: Kaggle may have received it. If "
                f"{kernel_url(ref)} exists, the kernel runs and uses TPU quota: collect it with\n"
                f"    python -m tools.hardware kaggle --collect {ref}\nor stop it with: kaggle "
                f"kernels delete {ref}. If it does not exist, nothing runs.",
                "interrupted during the push.",
            )
        if self.stage == "wait":
            return self.stopped("\nInterrupted.", "interrupted while the kernel runs.")
        return self.stopped(
            "\nInterrupted while downloading the outputs.", "interrupted while downloading."
        )

    def failed(self, how: str) -> Stop:
        """The API failed (``how``) while waiting or downloading: what still runs, what to run."""
        cause = f"Kaggle's API {how} while {self.stage_words()}."
        if self.stage == "wait":
            return self.stopped(cause, "Kaggle's API failed while the kernel runs.")
        return self.stopped(cause, "Kaggle's API failed while downloading the outputs.")

    def stage_words(self) -> str:
        return "asking the kernel's status" if self.stage == "wait" else "downloading its outputs"

    # --- the calls -----------------------------------------------------------------------------

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
                if failures > self.options.retries:
                    raise GaveUp(f"{why}, {failures} tries in a row") from None
                print(
                    f"  Kaggle's API: {why} while {self.stage_words()}; retry {failures} of "
                    f"{self.options.retries} in {delay:.3g} s",
                    flush=True,
                )
                time.sleep(delay)
                delay = min(delay * 2, 300)

    def connect(self) -> None:
        """An authenticated client, checked with a call that needs the credentials."""
        quiet = io.StringIO()  # the package authenticates on import, and prints help when it cannot
        with contextlib.redirect_stdout(quiet):
            self.api = _import_client(self.options.timeout)()
            try:
                self.api.authenticate()
            except SystemExit:  # an inactive token, and nothing else to try
                token = self.source in ("KAGGLE_API_TOKEN", *TOKEN_FILES)
                what = "the API token" if token else "the credentials"
                raise _refused(f"{what} in {self.source}", "inactive") from None
            except OSError as err:
                if _status_code(err) in (401, 403):
                    raise _refused(
                        f"the API token in {self.source}", f"HTTP {_status_code(err)}: {err}"
                    ) from None
                raise
        try:  # a legacy key is first used here: before anything is pushed
            self.check_quota()
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
        if used >= allowed and not self.collecting:
            raise Stop(
                f"The TPU quota is spent: {used:.1f} h of {allowed:.1f} h used this week{when}.",
                "no TPU quota left.",
            )
        print(f"TPU quota: {used:.1f} h of {allowed:.1f} h used this week{when}.")

    def push(self) -> None:
        """Push the run as a private kernel; keeps its ref (``user/slug``) and version."""
        run, limit = self.run, self.options.limit
        title = f"TPU Field Guide hw {run.stamp.replace('-', ' ')}"
        slug = title.lower().replace(" ", "-")
        self.ref = f"{self.api.config_values['username']}/{slug}"
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
        script = kernel.script(run.commit, run.run_id, "kaggle", OUT, run.driver_args())
        self.stage = "push"
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2))
            (Path(folder) / "run.py").write_text(script)
            response = self.api.kernels_push(folder, timeout=str(int(limit)), acc=MACHINE_SHAPE)
        if response.error:
            if "session count" in response.error.lower():
                raise Stop(
                    f"A TPU session is already running on this Kaggle account, and Kaggle runs one "
                    f'at a time ("{response.error}"). Wait for it to end, or stop it on '
                    "https://www.kaggle.com/code (or `kaggle kernels delete OWNER/SLUG`).",
                    "a TPU session is already running.",
                )
            raise Stop(f'Kaggle refused the push: "{response.error}"', "Kaggle refused the push.")
        self.version = response.version_number
        self.stage = "wait"
        print(
            f"Pushed {response.ref or self.ref} (version {self.version}, private, "
            f"{MACHINE_SHAPE}, internet on): {response.url or kernel_url(self.ref)}"
        )

    def versioned(self) -> str:
        return f"{self.ref}/{self.version}" if self.version else self.ref

    def wait(self):
        """Poll with back-off until the run ends; the last status response. Deletes past limit."""
        limit, grace = self.options.limit, 0 if self.collecting else self.options.grace
        self.stage = "wait"
        began = time.monotonic()
        delay, seen_active = self.options.poll, False
        while True:
            response = self.retried(lambda: self.api.kernels_status(self.versioned()))
            state, elapsed = response.status.name, time.monotonic() - began
            self.state = state
            note = " (a cancel was asked: it runs until Kaggle acknowledges it)"
            print(
                f"  {state} after {elapsed / 60:.1f} min"
                f"{note if state == 'CANCEL_REQUESTED' else ''}",
                flush=True,
            )
            if state in ACTIVE:
                seen_active = True
            elif state == "ERROR" and self.version:  # asked for the pushed version: it failed
                return response
            elif state in ENDED and (seen_active or elapsed >= grace):
                return response
            elif state in ENDED:
                print("  (that may still be the previous session, kaggle-cli PR #1177: waiting)")
            if elapsed >= limit:
                self.api.kernels_delete(self.ref, no_confirm=True)
                raise Stop(
                    f"The run passed its wall-clock limit of {limit / 3600:.2f} h while {state}; "
                    f"the kernel {self.ref} was deleted, which stops it (a session timeout alone "
                    "has not).",
                    "the wall-clock limit passed; the kernel was deleted.",
                )
            time.sleep(min(delay, max(limit - elapsed, 0.01)))
            delay = min(delay * 1.5, 300)

    def download(self, out: Path) -> Path:
        """The outputs of the pushed version into ``out``; the record's path there."""
        self.retried(
            lambda: self.api.kernels_output(self.versioned(), path=str(out), force=True, quiet=True)
        )
        return out / "hardware-run" / "record.json"

    def collect(self, status) -> int:
        """Download the run's outputs; store its record in the lane's folder."""
        self.stage = "download"
        out, run_id = self.run.out, None if self.collecting else self.run.run_id
        record = self.download(out)
        delay = self.options.poll
        for attempt in range(1, MISMATCH_TRIES):
            found = _run_id(record)
            if not run_id or found in (None, run_id):
                break
            print(
                f"  The outputs are still those of run {found}, not this run's ({run_id}): "
                f"Kaggle may not have published them yet; fetching again in {delay:.3g} s "
                f"({attempt} of {MISMATCH_TRIES - 1})",
                flush=True,
            )
            time.sleep(delay)
            delay = min(delay * 2, 300)
            record = self.download(out)
        if record.exists():  # the record first: a bad log never loses it
            return finish(record, self.folder, run_id)
        log_file = out / f"{self.ref.split('/')[1]}.log"
        log = read_log(log_file)
        tail = log_tail(log) or "    (empty: the kernel printed nothing)"
        name = status.status.name
        if name == "COMPLETE":
            raise Stop(
                f"The kernel {self.ref} completed without writing a record ({kernel_url(self.ref)}"
                f"). Last lines of its log ({log_file}):\n{tail}",
                "the kernel completed without a record.",
            )
        raise Stop(
            f"The kernel {self.ref} ended in {name} ({status.failure_message or 'no message'}) "
            f"without a record ({kernel_url(self.ref)}). Failing lesson: "
            f"{_failed_lesson(out, log)}. Last lines of its log ({log_file}):\n{tail}",
            f"the kernel ended in {name}.",
        )

    def main(self) -> int:
        self.connect()
        if not self.collecting:
            self.run.commit = checked_commit()
            self.push()
        return self.collect(self.wait())


def _run_id(record: Path) -> str | None:
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


def main(run: Run, folder: Path, options: Options, ref: str = "") -> int:
    """The lane; ``ref`` collects a kernel pushed earlier instead of pushing a new one."""
    source = credentials_source()
    if source is None:
        raise Stop(NO_CREDENTIALS, "no Kaggle credentials.")
    lane = KaggleRun(run, folder, options, ref, source)
    try:
        return lane.main()
    except KeyboardInterrupt:
        raise lane.interrupted() from None
    except GaveUp as failure:
        raise lane.failed(f"kept failing ({failure})") from None
    except (OSError, ValueError) as err:  # requests' errors are OSErrors; the client's ValueErrors
        if lane.stage in ("wait", "download"):
            raise lane.failed(f"failed ({err})") from None
        raise Stop(f"Kaggle's API failed: {err}", "Kaggle's API failed.") from None
