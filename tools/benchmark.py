"""Measure the techniques the guide teaches, each against its baseline, on this machine.

    python tools/benchmark.py            # the full report (about 40 minutes on 2 busy CPU cores)
    python tools/benchmark.py --quick    # the reduced mode CI runs (a few minutes)
    python tools/benchmark.py --no-suites  # full mode without timing the notebooks and tests

Writes ``build/benchmark.md`` and ``build/benchmark.json`` (or under ``--out``). Every number is
a ratio between a candidate and its baseline measured in the same run on the same hardware: the
median of several repetitions, with their spread (lowest to highest). The timers synchronise
(each result is fetched to the host before the clock stops) and warm up first (tracing and
compiling are not counted); see ``helpers/timing.py``.

The measurements live in ``tools/bench/``, one module each (see its ``__init__``); they run in
two child processes of this script (one with a single CPU device, one with the 8-replica
simulated TPU), because TensorFlow fixes its devices when it starts. The parent never imports
TensorFlow; it starts the children, shows their progress, and writes the report. Full mode also
times the headless notebook run (smoke mode) and the unit test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "tools"):  # run from a clone without installing the helpers
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from bench import machine, report, suites, worker  # noqa: E402
from bench.common import FULL, QUICK, Settings, replicas_text  # noqa: E402

__all__ = ["main", "run"]


def run(settings: Settings, quick: bool, out: Path, timeout: float) -> dict:
    start, started = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M")
    load_start = machine.load_average()
    hw = machine.hardware()
    print(
        f"Benchmark ({'quick' if quick else 'full'} mode) on {hw['cpu']}, {hw['cores']} cores, "
        f"{hw['memory_gib']} GiB; load average {load_start}",
        flush=True,
    )
    plan, processes = worker.PLAN, []
    for i, (replicas, tasks) in enumerate(plan, 1):
        print(
            f"[{i}/{len(plan) + 1}] at {time.perf_counter() - start:.0f} s: a process with "
            f"{replicas_text(replicas)}: {', '.join(tasks)}",
            flush=True,
        )
        processes.append(worker.run_process(replicas, tasks, quick, timeout))
    rows = report.collect_rows(processes)
    print(
        f"[{len(plan) + 1}/{len(plan) + 1}] at {time.perf_counter() - start:.0f} s: "
        "notebooks (smoke mode) and unit tests",
        flush=True,
    )
    if not settings.notebooks_and_tests:
        print("  skipped in --quick mode (and with --no-suites)", flush=True)
    rows += [suites.notebooks_row(settings, out), suites.tests_row(settings)]
    for entry in rows:  # a row's own finding first, then what the measurement is
        found, about = entry.get("note", ""), report.note_for(entry["key"])
        entry["note"] = f"{found}; {about}" if found and about else found or about
    versions = {"Python": platform.python_version()}
    versions.update(next((p["versions"] for p in processes if "versions" in p), {}))
    return {
        "quick": quick,
        "started": started,
        "seconds": time.perf_counter() - start,
        "hardware": hw,
        "versions": versions,
        "load_average": {"start": load_start, "end": machine.load_average()},
        "settings": asdict(settings),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the reduced mode CI runs")
    parser.add_argument("--out", type=Path, default=ROOT / "build", help="where to write")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    parser.add_argument(
        "--no-suites", action="store_true", help="do not time the notebooks and the unit tests"
    )
    # Internal: how the parent starts a measuring process.
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.no_suites:
        settings = dataclasses.replace(settings, notebooks_and_tests=False)

    if args.worker is not None:
        worker.run_worker(args.worker, args.tasks.split(","), settings, args.result)
        # Everything is saved. Skip TensorFlow's shutdown: after the failed multi-replica fit
        # it can wait minutes for collective ops that will never finish.
        sys.stdout.flush()
        os._exit(0)

    args.out.mkdir(parents=True, exist_ok=True)
    result = run(settings, args.quick, args.out, args.timeout)
    text = report.markdown(result)
    (args.out / "benchmark.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "benchmark.md").write_text(text)
    print("\n" + text)
    print(f"Written: {args.out / 'benchmark.md'} and {args.out / 'benchmark.json'}")
    failed = [r["title"] for r in result["rows"] if r["status"] == "failed"]
    if failed:
        print("Failed: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
