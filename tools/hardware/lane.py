"""What every lane shares: a run's names and folder, the checks before it, and its end.

A lane ends in one of three ways, the exit status of ``python -m tools.hardware``:
0 a record was written and every lesson and the self-test passed; 1 a record was written with
failures; 2 nothing ran, or nothing came back (:class:`Stop`, whose message says why). The last
line printed is the record's path, or why there is none.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kernel, records


class Stop(Exception):
    """Nothing (more) can run: ``detail`` explains, ``reason`` is the last line printed."""

    def __init__(self, detail: str, reason: str):
        super().__init__(detail)
        self.detail, self.reason = detail, reason


@dataclass
class Run:
    """One run of the lane: its id (in the record), commit, options and output folder."""

    platform: str
    smoke: bool = False
    quick: bool = False
    only: list[str] = field(default_factory=list)
    commit: str = ""
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    nonce: str = field(default_factory=lambda: secrets.token_hex(3))
    parent: Path = records.ROOT / "build" / "hardware"

    @property
    def run_id(self) -> str:
        return f"{self.platform}-{self.stamp}-{self.nonce}"

    @property
    def out(self) -> Path:
        return self.parent / self.run_id

    def driver_args(self) -> list[str]:
        """The driver's options besides platform, folder, commit and run id."""
        flags = [*(["--smoke"] if self.smoke else []), *(["--quick"] if self.quick else [])]
        return [*flags, *(f"--only={n}" for n in self.only)]


def checked_commit() -> str:
    """This checkout's commit, once the repository the host fetches from is known to serve it."""
    commit, dirty = kernel.head_commit()
    if dirty:
        print(f"Note: tracked files differ from {commit[:12]}; the host runs the commit only.")
    problem = kernel.fetchable(commit, kernel.repository())
    if problem:
        raise Stop(problem, "the commit is not where the TPU host can fetch it.")
    print(f"Commit {commit[:12]} is on {kernel.repository()}: the host will run exactly it.")
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
    failed = [row["notebook"] for row in record["lessons"] if row["status"] != "passed"]
    selftest = record["selftest"] or {}
    print(
        f"{len(record['lessons']) - len(failed)} of {len(record['lessons'])} lessons passed; "
        f"self-test {'passed' if selftest.get('passed') else 'failed or did not run'}; "
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
    elif records.counts_for_route(record) and selftest.get("passed"):
        print(
            "This quick record verifies the route on a TPU, and no lesson: `make sync` updates "
            "the README's route table; a full run verifies the lessons."
        )
    print(stored)
    steps_failed = any(s["status"] == "failed" for s in record.get("steps", []))
    passed = record["lessons"] and not failed and selftest.get("passed") and not steps_failed
    return 0 if passed else 1
