"""The TPU self-test's report: Markdown for a person, JSON for a machine, with the same sections;
the JSON's ``schema`` names its layout, so that tools reading reports can tell versions apart."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from tpucheck.selftest.base import STATUSES, CheckResult
from tpucheck.selftest.environment import LABELS

SCHEMA = "tpu-field-guide/self-test/1"
_FILE_STEM = "tpu-self-test"


def plain(value):
    """numpy and TensorFlow values -> JSON-ready Python (floats rounded to 6 significant digits)."""
    value = value.numpy() if hasattr(value, "numpy") else value
    value = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float):  # JSON has no NaN or infinity
        return float(f"{value:.6g}") if math.isfinite(value) else str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def _text(value) -> str:
    """One value as Markdown text that fits in a table cell."""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        items = [_text(v) for v in value]
        items = [*items[:2], "...", items[-1]] if len(items) > 4 else items
        return ", ".join(items) if items else "none"
    if value is None:
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


@dataclass
class SelfTestReport:
    """What :func:`tpucheck.selftest.run` found; ``markdown()``, ``to_json()``, ``write(folder)``."""

    environment: dict
    checks: list[CheckResult]
    mode: str
    seconds: float
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    command: str = ""
    notes: list[str] = field(default_factory=list)
    cpu_seconds: float | None = None  # CPU time of the process: wall time above it means waiting

    @property
    def counts(self) -> dict[str, int]:
        return {status: sum(c.status == status for c in self.checks) for status in STATUSES}

    @property
    def passed(self) -> bool:
        """No check failed and at least one passed (a report of ``info`` alone proves nothing)."""
        return self.counts["fail"] == 0 and self.counts["pass"] > 0

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "fail"]

    def check(self, key: str) -> CheckResult:
        for c in self.checks:
            if c.key == key:
                return c
        raise KeyError(f"no check {key!r} in this report; it has {[c.key for c in self.checks]}")

    def to_dict(self) -> dict:
        cpu = None if self.cpu_seconds is None else round(self.cpu_seconds, 1)
        return plain(
            {"schema": SCHEMA, "created": self.created, "mode": self.mode, "command": self.command,
             "seconds": round(self.seconds, 1), "cpu_seconds": cpu, "passed": self.passed,
             "tpu_tested": self.tpu_tested, "scope": self.scope(), "summary": self.counts,
             "environment": self.environment, "checks": [c.to_dict() for c in self.checks],
             "notes": self.notes}
        )  # fmt: skip

    @property
    def tpu_tested(self) -> bool:
        """True only when the checks ran on a TPU (the strategy connected to TPU cores)."""
        return self.environment.get("strategy") == "TPU"

    def scope(self) -> str:
        """What the checks ran on, said before any verdict: which TPU, or that none was tested."""
        env = self.environment
        kind, replicas = env.get("strategy") or "none (not connected)", env.get("replicas")
        if self.tpu_tested:
            cores = f", {replicas} replica(s)" if replicas else ""
            return f"Tested a TPU: {env.get('accelerator_type', 'type unknown')}{cores}"
        if kind == "simulated TPU":
            return (
                f"No TPU was tested: the checks ran on the simulated TPU ({replicas} logical CPU "
                "devices of this machine)"
            )
        if kind.startswith("none"):
            return "No TPU was tested: the self-test stopped before it connected"
        return f"No TPU was tested: the checks ran on {kind}"

    def headline(self) -> str:
        """The scope first (which TPU, or none), then the verdict and its counts."""
        counts = self.counts
        verdict = "PASSED" if self.passed else "FAILED" if self.failed else "NO VERDICT"
        verdict += "" if self.tpu_tested else " there"
        cpu = "" if self.cpu_seconds is None else f" ({self.cpu_seconds:.0f} s of CPU)"
        speed = "" if self.tpu_tested else "; its speed figures (info) say nothing about a TPU"
        return (
            f"**{self.scope()}.** {verdict}: {counts['pass']} passed, {counts['fail']} failed, "
            f"{counts['info']} for information{speed} ({self.mode} mode, {self.seconds:.0f} s"
            f"{cpu}, {self.created})"
        )

    def markdown(self) -> str:
        lines = ["# TPU self-test report", "", "## Summary", "", self.headline()]
        if self.command:
            lines += ["", f"Command: `{self.command}`"]
        lines += ["", "## Environment", "", "| item | value |", "|---|---|"]
        for key, value in self.environment.items():
            lines.append(f"| {LABELS.get(key, key)} | {_text(value)} |")
        lines += [
            "",
            "## Checks",
            "",
            "| # | check | notebook | result | summary | seconds |",
            "|---:|---|---|---|---|---:|",
        ]
        for i, c in enumerate(self.checks, 1):
            result = f"**{c.status.upper()}**" if c.status == "fail" else c.status
            lines.append(
                f"| {i} | {c.title} | {c.notebook} | {result} | {_text(c.summary)} | "
                f"{c.seconds:.1f} |"
            )
        lines += ["", "## Evidence"]
        for i, c in enumerate(self.checks, 1):
            lines += ["", f"### {i}. {c.title} (notebook {c.notebook}): {c.status}", ""]
            if c.error:
                lines.append(f"- error: `{c.error}`")
            lines += [f"- {key}: {_text(value)}" for key, value in c.evidence.items()]
            lines += [f"- note: {note}" for note in c.notes]
        lines += ["", "## About this report", ""]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def _repr_markdown_(self) -> str:  # Jupyter shows the report rendered
        return self.markdown()

    def write(self, folder: str | Path = ".") -> tuple[Path, Path]:
        """Write ``tpu-self-test.md`` and ``tpu-self-test.json`` into ``folder``; return both."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        md, js = folder / f"{_FILE_STEM}.md", folder / f"{_FILE_STEM}.json"
        md.write_text(self.markdown(), encoding="utf-8")
        js.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return md, js


def standard_notes(on_tpu: bool) -> list[str]:
    """The "About this report" lines: the statuses, the speed figures on a TPU, what ran."""
    from tpucheck.selftest.speed import ON_A_TPU

    tested = (
        "The published peaks, the thresholds of the speed checks and the tolerances on the "
        "TPU are unverified on hardware by this project: this report is how they get checked."
        if on_tpu
        else "This run had no TPU, and tested none: its speed figures describe this machine and "
        "say nothing about a TPU, so they are info. The checks ran against the simulated TPU "
        "(a MirroredStrategy over logical CPU devices): they exercise the multi-replica code "
        "paths, not TPUStrategy or a TPU."
    )
    return [
        "Statuses: pass and fail have a criterion on this hardware; info is measured with no "
        "criterion here (e.g. a TPU's peak rate on a CPU).",
        "Each check is a short real run; the notebook column names the lesson that teaches it.",
        f"To share it, attach {_FILE_STEM}.json to an issue opened with the repository's "
        '"TPU self-test report" issue template.',
        *(f"On a TPU, {key} measures {meaning}." for key, meaning in ON_A_TPU.items()),
        tested,
    ]
