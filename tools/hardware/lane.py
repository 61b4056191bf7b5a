"""What the lanes share: a run's names and folder, the script the TPU host runs, the end of a run.

The host fetches the exact commit from the public repository (``FIELD_GUIDE_REPO`` names
another), so that anyone can check a record; :func:`checked_commit` first runs that same fetch.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import records

sys.path.insert(0, str(records.ROOT / "tools"))  # for notebook_files
from notebook_files import settings  # noqa: E402

REPO_ENV = "FIELD_GUIDE_REPO"
RECORD_BEGIN = "----- hardware record -----"
RECORD_END = "----- end of hardware record -----"
SCRIPT = '''\
"""The TPU Field Guide's hardware run of commit {run.commit} (from tools/hardware/lane.py)."""
import os
import subprocess
import sys

COMMIT = "{run.commit}"
REPO = "{repo}"
SRC = "/tmp/tpu-field-guide-{run.run_id}"
OUT = os.path.abspath({out!r})  # relative: under the folder the platform starts the script in
DRIVER = ["--platform", {run.platform!r}, "--out", OUT, "--commit", COMMIT]
DRIVER += ["--run-id", {run.run_id!r}, *{run.driver_args!r}]
MODULE = os.environ.get("FIELD_GUIDE_HARDWARE_DRIVER", "tools.hardware.driver")  # for the tests
for step in (["init", "-q", SRC], ["-C", SRC, "fetch", "-q", "--depth=1", REPO, COMMIT],
             ["-C", SRC, "checkout", "-q", "FETCH_HEAD"]):
    subprocess.run(["git", *step], check=True, env={{**os.environ, "GIT_TERMINAL_PROMPT": "0"}})
code = subprocess.run([sys.executable, "-m", MODULE, *DRIVER], cwd=SRC).returncode
record = os.path.join(OUT, "record.json")
if {echo} and os.path.exists(record):  # the record travels back in the output
    print("{begin}", open(record).read(), "{end}", sep="\\n", flush=True)
sys.exit(0 if os.path.exists(record) else code or 1)  # non-zero: no record was written
'''


class Stop(Exception):
    """No record (exit status 2): ``detail`` explains, ``reason`` is the last line printed."""

    def __init__(self, detail: str, reason: str):
        super().__init__(detail)
        self.detail, self.reason = detail, reason


@dataclass
class Run:
    """One run of the lane: its id (in the record), commit, options and output folder."""

    platform: str
    driver_args: list[str]  # the driver's options besides platform, folder, commit and run id
    parent: Path  # where each run's folder (``out``) goes
    commit: str = ""
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    nonce: str = field(default_factory=lambda: secrets.token_hex(3))

    @property
    def run_id(self) -> str:
        return f"{self.platform}-{self.stamp}-{self.nonce}"

    @property
    def out(self) -> Path:
        return self.parent / self.run_id

    def script(self, out: str, echo: bool = False) -> str:
        """The Python script the host runs: it checks out the commit and runs the driver into
        ``out``; with ``echo`` it prints the record between :data:`RECORD_BEGIN` and ``_END``."""
        return SCRIPT.format(
            run=self, repo=repository(), out=out, echo=echo, begin=RECORD_BEGIN, end=RECORD_END
        )


def repository() -> str:
    """The repository the TPU host fetches the commit from."""
    return os.environ.get(REPO_ENV) or f"https://github.com/{settings()['github']}"


def _git(*args: str, cwd: Path = records.ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


def head_commit() -> str:
    return _git("rev-parse", "HEAD").stdout.strip()


def checked_commit() -> str:
    """This checkout's commit, once the repository the host fetches from is known to serve it."""
    commit, repo = head_commit(), repository()
    if _git("status", "--porcelain", "--untracked-files=no").stdout.strip():
        print(f"Note: tracked files differ from {commit[:12]}; the host runs the commit only.")
    unreachable = "the commit is not where the TPU host can fetch it."
    with tempfile.TemporaryDirectory() as tmp:
        _git("init", "-q", tmp)
        try:
            done = _git("fetch", "-q", "--depth=1", repo, commit, cwd=Path(tmp))
        except subprocess.TimeoutExpired:
            raise Stop(f"{repo} did not answer `git fetch` within 120 s", unreachable) from None
    if done.returncode:
        why = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise Stop(
            f"commit {commit[:12]} is not on {repo} (git fetch: {why}). The TPU host fetches the "
            f"commit from there: push it first, or set {REPO_ENV} to a public fork that has it.",
            unreachable,
        )
    print(f"Commit {commit[:12]} is on {repo}: the host will run exactly it.")
    return commit


def log_tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of ``text``, indented for a message."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(f"    {line}" for line in kept)


def finish(path: Path, folder: Path, run_id: str | None = None) -> int:
    """Check the record at ``path``, store it in ``folder``, say what it holds; the exit status."""
    if not path.exists():
        raise Stop(f"The run wrote no record ({path} is missing).", "no record came back.")
    record = json.loads(path.read_text(encoding="utf-8"))
    if found := records.problems(record):
        raise Stop(f"{path}: {'; '.join(found)}", "the record that came back is not valid.")
    if run_id and record["run_id"] != run_id:
        raise Stop(
            f"The outputs are those of run {record['run_id']}, not of this run ({run_id}): the "
            "platform still reported an earlier session.",
            "the outputs came from another run.",
        )
    stored = records.store(record, folder)
    kind = records.device_kind(record)
    failed = records.failures(record)
    passed = sum(row["status"] == "passed" for row in record["lessons"])
    print(
        f"{passed} of {len(record['lessons'])} lessons passed; self-test "
        f"{'failed or did not run' if 'the self-test' in failed else 'passed'}; "
        f"{len(record['devices'])} {kind} device(s) ({record['accelerator']})."
    )
    for step in record.get("steps", []):
        print(f"  {step['step']}: {step['status']} in {step['seconds']} s. {step['detail']}")
    if failed:
        print("Failed:", ", ".join(failed))
    if kind != "TPU":
        print(f"The devices were {kind}s: a dry run, which verifies nothing.")
    elif records.counts(record):
        print("This record verifies on a TPU: `make sync` updates the README's route table.")
    elif records.verifies_route(record):
        print(
            "This quick record verifies the route on a TPU, and no lesson: `make sync` updates "
            "the README's route table; a full run verifies the lessons."
        )
    print(stored)
    return 1 if failed else 0
