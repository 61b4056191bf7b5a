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
  status is asked for the pushed version, an end state seen before the run was ever queued or
  running is trusted only after a grace period, and the record must carry this run's id;
- ``kernels_output`` (``ListKernelSessionOutput``) downloads what the kernel wrote to
  ``/kaggle/working`` plus ``<slug>.log``, a JSON list of ``{stream_name, time, data}``;
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
import tempfile
import time
from pathlib import Path

from . import kernel
from .lane import Run, Stop, checked_commit, finish, log_tail

__all__ = ["MACHINE_SHAPE", "credentials_source", "main"]

MACHINE_SHAPE = "TpuV5E8"
OUT = "/kaggle/working/hardware-run"
TOKEN_FILES = ("~/.kaggle/access_token", "~/.kaggle/access_token.txt")
KEY_FILES = ("~/.kaggle/kaggle.json", "~/.kaggle/credentials.json")
NO_CREDENTIALS = (
    "No Kaggle credentials found. Set KAGGLE_API_TOKEN to an API token (or save the token in "
    "~/.kaggle/access_token), or set KAGGLE_USERNAME and KAGGLE_KEY (a legacy key, also read from "
    "~/.kaggle/kaggle.json). Create a token at https://www.kaggle.com/settings/api "
    '("Generate New Token" under "API").'
)
ACTIVE = ("QUEUED", "RUNNING", "NEW_SCRIPT")
ENDED = ("COMPLETE", "ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED")


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


def connect(source: str):
    """An authenticated ``KaggleApi`` and the account's user name."""
    quiet = io.StringIO()  # the package authenticates on import and prints help when it cannot
    with contextlib.redirect_stdout(quiet):
        from kaggle.api.kaggle_api_extended import KaggleApi

        api = KaggleApi()
        try:
            api.authenticate()
        except SystemExit:
            raise Stop(
                f"Kaggle did not accept the credentials from {source}. {NO_CREDENTIALS}",
                "the Kaggle credentials were refused.",
            ) from None
    return api, api.config_values["username"]


def check_quota(api) -> None:
    response = api.quota_view()
    quota = response.tpu_quota
    if quota is None:
        print("Kaggle reported no TPU quota; going on.")
        return
    used = quota.time_used.total_seconds() / 3600
    allowed = quota.total_time_allowed.total_seconds() / 3600
    refresh = response.quota_refresh_time
    when = f"; it refreshes {refresh:%Y-%m-%d %H:%M} UTC" if refresh else ""
    if used >= allowed:
        raise Stop(
            f"The TPU quota is spent: {used:.1f} h of {allowed:.1f} h used this week{when}.",
            "no TPU quota left.",
        )
    print(f"TPU quota: {used:.1f} h of {allowed:.1f} h used this week{when}.")


def push(api, user: str, run: Run, limit: float) -> tuple[str, int | None]:
    """Push the run as a private kernel; its ref (``user/slug``) and version number."""
    title = f"TPU Field Guide hw {run.stamp.replace('-', ' ')}"
    slug = title.lower().replace(" ", "-")
    metadata = {
        "id": f"{user}/{slug}",
        "title": title,
        "code_file": "run.py",
        "language": "python",
        "kernel_type": "script",
        "is_private": True,
        "enable_internet": True,
        "machine_shape": MACHINE_SHAPE,
    }
    script = kernel.script(run.commit, run.run_id, "kaggle", OUT, run.driver_args())
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel-metadata.json").write_text(json.dumps(metadata, indent=2))
        (Path(folder) / "run.py").write_text(script)
        response = api.kernels_push(folder, timeout=str(int(limit)), acc=MACHINE_SHAPE)
    if response.error:
        if "session count" in response.error.lower():
            raise Stop(
                f"A TPU session is already running on this Kaggle account, and Kaggle runs one at "
                f'a time ("{response.error}"). Wait for it to end, or stop it on '
                "https://www.kaggle.com/code (or `kaggle kernels delete OWNER/SLUG`).",
                "a TPU session is already running.",
            )
        raise Stop(f'Kaggle refused the push: "{response.error}"', "Kaggle refused the push.")
    print(
        f"Pushed {response.ref or metadata['id']} (version {response.version_number}, private, "
        f"{MACHINE_SHAPE}, internet on): {response.url}"
    )
    return metadata["id"], response.version_number


def wait(api, ref: str, version: int | None, limit: float, poll: float, grace: float):
    """Poll with back-off until the run ends; the last status response. Deletes past ``limit``."""
    began = time.monotonic()
    delay, seen_active = poll, False
    asked = f"{ref}/{version}" if version else ref
    while True:
        response = api.kernels_status(asked)
        state, elapsed = response.status.name, time.monotonic() - began
        print(f"  {state} after {elapsed / 60:.1f} min", flush=True)
        if state in ACTIVE:
            seen_active = True
        elif state in ENDED and (seen_active or elapsed >= grace):
            return response
        elif state in ENDED:
            print("  (that may still be the previous session, kaggle-cli PR #1177: waiting)")
        if elapsed >= limit:
            api.kernels_delete(ref, no_confirm=True)
            raise Stop(
                f"The run passed its wall-clock limit of {limit / 3600:.2f} h while {state}; the "
                f"kernel {ref} was deleted, which stops it (a session timeout alone has not).",
                "the wall-clock limit passed; the kernel was deleted.",
            )
        time.sleep(min(delay, max(limit - elapsed, 0.01)))
        delay = min(delay * 1.5, 300)


def _failed_lesson(out: Path, log: str) -> str:
    summary = out / "hardware-run" / "lessons" / "summary.json"
    rows = json.loads(summary.read_text())["rows"] if summary.exists() else []
    bad = [r["notebook"] for r in rows if r["status"] not in ("passed", "cached")]
    started = [line.split()[0] for line in log.splitlines() if line.strip().endswith(".ipynb ...")]
    return ", ".join(bad) or (started[-1] if started else "none recorded (before the lessons)")


def collect(api, ref: str, status, out: Path, folder: Path, run_id: str | None) -> int:
    """Download the run's outputs into ``out``; store its record in ``folder``."""
    api.kernels_output(ref, path=str(out), force=True, quiet=True)
    log_file = out / f"{ref.split('/')[1]}.log"
    entries = json.loads(log_file.read_text()) if log_file.exists() else []
    log = "".join(entry.get("data", "") for entry in entries)
    record = out / "hardware-run" / "record.json"
    if status.status.name != "COMPLETE" and not record.exists():
        raise Stop(
            f"The kernel {ref} ended in {status.status.name} ({status.failure_message or 'no message'}) "
            f"without a record. Failing lesson: {_failed_lesson(out, log)}. Last lines of its "
            f"log ({log_file}):\n{log_tail(log)}",
            f"the kernel ended in {status.status.name}.",
        )
    return finish(record, folder, run_id)


def main(run: Run, folder: Path, limit: float, poll: float, grace: float, ref: str = "") -> int:
    """The lane; ``ref`` collects a kernel pushed earlier instead of pushing a new one."""
    source = credentials_source()
    if source is None:
        raise Stop(NO_CREDENTIALS, "no Kaggle credentials.")
    try:
        return _run(run, folder, limit, poll, grace, ref, source)
    except (OSError, ValueError) as err:  # requests' errors are OSErrors; the client's ValueErrors
        raise Stop(f"Kaggle's API failed: {err}", "Kaggle's API failed.") from None


def _run(run: Run, folder: Path, limit: float, poll: float, grace: float, ref: str, source: str):
    api, user = connect(source)
    version, collecting = None, bool(ref)
    if not collecting:
        check_quota(api)
        run.commit = checked_commit()
        ref, version = push(api, user, run, limit)
    try:
        status = wait(api, ref, version, limit, poll, 0 if collecting else grace)
    except KeyboardInterrupt:
        raise Stop(
            f"\nInterrupted. The kernel {ref} is still running on Kaggle, using TPU quota until it "
            f"ends. Collect its record later with:\n    python -m tools.hardware kaggle --collect "
            f"{ref}\nor stop it with: kaggle kernels delete {ref}",
            "interrupted while the kernel runs.",
        ) from None
    return collect(api, ref, status, run.out, folder, None if collecting else run.run_id)
