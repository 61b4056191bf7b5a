"""The measuring child processes: which measurement runs with how many devices, and running them.

TensorFlow fixes its devices when it starts, so each device count is its own process: one with a
single CPU device and one with the 8-replica simulated TPU. A child runs its tasks one after the
other and saves the results after each, so a crash loses only the task it happened in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import fit, loops, overhead, pipeline, precision, recipes
from bench.common import Settings, error_reason, replicas_text, say
from helpers.processes import child_env
from helpers.strategy import SIMULATED_REPLICAS

__all__ = ["run_process", "run_worker"]

_STARTED = time.perf_counter()  # before TensorFlow is imported: its start-up time is shown
ROOT = Path(__file__).resolve().parent.parent.parent
COMMAND = ROOT / "tools" / "benchmark.py"

TASKS = {
    "pipeline": pipeline.task_pipeline,
    "steps_per_call": loops.task_steps_per_call,
    "fit_steps_per_execution": fit.task_fit_steps_per_execution,
    "mixed_bfloat16": precision.task_mixed_bfloat16,
    "overhead": overhead.task_overhead,
    "recipes": recipes.task_recipes,
}
# Which tasks run in which process: (replicas, tasks). The order is the report's order.
PLAN = (
    (1, ("pipeline", "fit_steps_per_execution", "mixed_bfloat16", "recipes")),
    (SIMULATED_REPLICAS, ("overhead", "recipes", "steps_per_call", "fit_steps_per_execution")),
)


def _versions() -> dict:
    import keras
    import numpy
    import tensorflow as tf

    return {"TensorFlow": tf.__version__, "Keras": keras.__version__, "numpy": numpy.__version__}


def run_worker(replicas: int, tasks: list[str], settings: Settings, result_path: Path) -> None:
    """The child process: connect with ``replicas`` devices, run ``tasks``, save after each."""
    import helpers

    strategy = helpers.connect(replicas)  # before any other TensorFlow op
    out = {"versions": _versions(), "replicas": strategy.num_replicas_in_sync, "tasks": {}}
    print(f"  TensorFlow ready in {time.perf_counter() - _STARTED:.0f} s", flush=True)
    for i, name in enumerate(tasks, 1):
        print(f"  [{i}/{len(tasks)}] {name} ({replicas_text(replicas)})", flush=True)
        start = time.perf_counter()
        try:
            result = TASKS[name](strategy, settings)
            status = {"ok": True, "result": result}
        except Exception as err:  # report it in the table and go on with the next task
            import traceback

            traceback.print_exc(file=sys.stdout)
            status = {"ok": False, "error": error_reason(err, limit=400)}
        status["seconds"] = round(time.perf_counter() - start, 1)
        out["tasks"][name] = status
        result_path.write_text(json.dumps(out))
        say(f"done in {status['seconds']} s")


def run_process(replicas: int, tasks: tuple[str, ...], quick: bool, timeout: float) -> dict:
    """Run one worker process; its progress goes straight to this terminal."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        errors = Path(folder) / "stderr.txt"
        command = [sys.executable, str(COMMAND), "--worker", str(replicas)]
        command += ["--tasks", ",".join(tasks), *(["--quick"] if quick else [])]
        command += ["--result", str(result)]
        began = time.perf_counter()
        with open(errors, "w") as stderr:
            try:
                code = subprocess.run(
                    command, stderr=stderr, env=child_env(cpu_only=False), timeout=timeout, cwd=ROOT
                ).returncode
            except subprocess.TimeoutExpired:
                code = f"timeout after {timeout:.0f} s"
        print(f"  the process ended after {time.perf_counter() - began:.0f} s", flush=True)
        out = json.loads(result.read_text()) if result.exists() else {"tasks": {}}
        tail = errors.read_text(errors="replace").strip().splitlines()[-15:]
    if code != 0:
        print(f"  the process exited with {code}; last lines of its stderr:", flush=True)
        print("\n".join("    " + line for line in tail), flush=True)
    for name in tasks:  # a task the process never finished gets its error in the table
        if name not in out["tasks"]:
            last = tail[-1] if tail else f"exit code {code}"
            out["tasks"][name] = {"ok": False, "error": f"process ended: {last}"[:400]}
    return out
