"""Whole-suite times, full mode only: every notebook in smoke mode, and the unit tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Settings, row
from helpers.processes import child_env

__all__ = ["notebooks_row", "tests_row", "time_command"]

ROOT = Path(__file__).resolve().parent.parent.parent
# Start-up chatter of TensorFlow and Jupyter kernels that says nothing about the run.
NOISE = re.compile(r"^[IWE]\d{4} |^WARNING: All log messages|\[IPKernelApp\] WARNING")


def time_command(command: list[str], label: str, timeout: float) -> tuple[float, int, str]:
    """Run ``command`` showing its output; return (seconds, exit code, last output line)."""
    print(f"  $ {' '.join(command)}", flush=True)
    start = time.perf_counter()
    last = ""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(cpu_only=False),
        cwd=ROOT,
    )
    try:
        for line in proc.stdout:
            if not NOISE.search(line):
                print(f"    {label}| {line.rstrip()}", flush=True)
            if line.strip():
                last = line.strip()
            if time.perf_counter() - start > timeout:
                proc.kill()
                last = f"killed after {timeout:.0f} s"
                break
    finally:
        code = proc.wait()
    return time.perf_counter() - start, code, last


def _skipped(out: dict, settings: Settings) -> bool:
    if not settings.notebooks_and_tests:
        out.update(status="skipped", reason="skipped in --quick mode (and with --no-suites)")
        return True
    return False


def notebooks_row(settings: Settings, out: Path) -> dict:
    result = row(
        "notebooks",
        "headless run of every notebook",
        "smoke mode (tools/run_notebooks.py --smoke)",
        "",
        "",
        unit="s",
    )
    if _skipped(result, settings):
        return result
    folder = out / "benchmark-notebooks"  # not build/summary.json: keep the user's own run
    seconds, code, last = time_command(
        [sys.executable, "tools/run_notebooks.py", "--smoke", "--out", str(folder)],
        "notebooks",
        timeout=3 * 3600,
    )
    summary = folder / "summary.json"
    rows = json.loads(summary.read_text())["rows"] if summary.exists() else []
    passed = sum(r["status"] == "passed" for r in rows)
    detail = f"{passed} of {len(rows)} notebooks passed" if rows else last
    result.update(
        status="measured" if code == 0 else "failed",
        value=seconds,
        detail=detail,
        per_item={r["notebook"]: r["seconds"] for r in rows},
    )
    return result


def tests_row(settings: Settings) -> dict:
    result = row("tests", "unit test suite", "python -m pytest tests", "", "", unit="s")
    if _skipped(result, settings):
        return result
    seconds, code, last = time_command(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider"],
        "pytest",
        timeout=3 * 3600,
    )
    detail = last.strip("= ")  # pytest's summary line, e.g. "120 passed in 300.0s"
    result.update(status="measured" if code == 0 else "failed", value=seconds, detail=detail)
    return result
