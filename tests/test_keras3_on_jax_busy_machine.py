"""Notebook 12_keras3_on_jax survives a busy machine: 8 simulated JAX devices beside a CPU-bound process.

On a machine with fewer cores than simulated devices, jaxlib's CPU client deadlocked now and
then in a collective of the data-parallel ``fit`` (XLA ended the kernel after 40 seconds:
"Termination timeout for `all reduce` ... Expected 8 threads to join"), more often the busier
the machine: its thread pools had exactly one thread per device.
``helpers.jax_port.configure`` now sizes them larger (:func:`helpers.jax_port.thread_pool_size`
says why). On jaxlib 0.7.2 (the kaggle and colab stacks) the same runs also caught the sharded
equivalence check of section 4 failing now and then, which
:func:`helpers.jax_port.donation_is_safe` explains. Here the lesson runs headless, as
``make smoke`` runs it, with 8 devices on every stack, while a busy loop per core runs beside
it; the loops end on their own after a bounded time and the test stops them in any case.

Marked slow, so ``make test`` runs it once, on the main stack (jaxlib 0.10.2, where the deadlock
was seen; 40 to 100 s on a busy two-core machine). Ten runs in a row on a stack, the acceptance
check: ``FIELD_GUIDE_BUSY_RUNS=10 .venv-kaggle/bin/python -m pytest
tests/test_keras3_on_jax_busy_machine.py -n 0``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import processes

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("FIELD_GUIDE_BUSY_RUNS", "1"))
SECONDS_PER_RUN = 300  # the busy loops stop on their own after this many seconds per run
DEVICES = 8
BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def _busy_loops(seconds: float) -> list[subprocess.Popen]:
    """One CPU-bound loop per usable core, each ending by itself after ``seconds``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(cores or 1)
    ]


@pytest.mark.slow
@pytest.mark.timeout(SECONDS_PER_RUN * RUNS + 60)
def test_keras3_on_jax_runs_beside_a_busy_process(tmp_path):
    # The pool size must come from the lesson's own setup, not from this test's environment.
    env = processes.child_env({"PJRT_NPROC": None, "NPROC": None, "XLA_FLAGS": None})
    loops = _busy_loops(SECONDS_PER_RUN * RUNS)
    rows = []
    try:
        for run in range(RUNS):
            out = tmp_path / f"run{run}"
            command = [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), "--smoke"]
            command += ["--only", "keras3_on_jax", "--replicas", str(DEVICES), "--out", str(out)]
            began = time.perf_counter()
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=SECONDS_PER_RUN
            )
            row = json.loads((out / "summary.json").read_text())["rows"][0]
            rows.append((row["status"], round(time.perf_counter() - began, 1)))
            assert row["status"] == "passed", (
                f"run {run + 1} of {RUNS}: {row['status']} {row.get('error', '')}\n"
                f"runs so far (status, seconds): {rows}\n{done.stderr[-3000:]}"
            )
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    print(f"notebook 12_keras3_on_jax beside {len(loops)} busy loop(s), {RUNS} run(s): {rows}")
