"""One notebook, executed headless by papermill, with its parameters and kept files."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import papermill

from helpers.results import RESULTS_ENV
from runner import blocks, memory, summary
from tpucheck import runtime


def kept_files_parameters(path: Path, out: Path, kept_files: dict[str, str]) -> dict:
    """``{parameter: out/files/NN_name/<sub-folder>}`` for the kept-files parameters ``path``
    declares, each folder emptied: repeated runs leave nothing behind."""
    declared = papermill.inspect_notebook(str(path))
    folders = {}
    for name, sub in kept_files.items():
        if name in declared:
            folder = out / "files" / path.stem / sub
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            folders[name] = str(folder)
    return folders


def run_one(
    path: Path, out: Path, parameters: dict, cell_timeout: int, kept_files: dict | None = None
) -> dict:
    """Execute ``path`` into ``out/executed/``; return its summary row (never raises for a cell)."""
    results = out / "results" / f"{path.stem}.json"
    executed = out / "executed" / path.name
    for folder in (results.parent, executed.parent):
        folder.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    os.environ[RESULTS_ENV] = str(results)  # for helpers.results.record: the kernel inherits it
    row = {"notebook": path.name, "status": "passed", "error": "", "parameters": parameters}
    start = time.perf_counter()
    with memory.PeakMemory() as peak:  # the kernel and the processes it starts
        try:
            papermill.execute_notebook(
                str(path),
                str(executed),
                parameters={**parameters, **kept_files_parameters(path, out, kept_files or {})},
                cwd=str(path.parent),
                kernel_name="python3",
                execution_timeout=cell_timeout,
                progress_bar=sys.stderr.isatty(),
                log_output=False,
                # The kernel's own log (a warning about TCP on loopback, a "KeyboardInterrupt
                # caught in kernel" at shutdown) is noise: a failing kernel fails a cell anyway.
                extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
            )
        except Exception as err:  # papermill raises on a failing cell; report it and go on
            row["status"] = "FAILED"
            row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["peak_gib"] = peak.gib
    row["results"] = json.loads(results.read_text()) if results.exists() else {}
    row["executed"] = str(executed)
    hardware, problems = blocks.hardware(), []
    if executed.exists():
        notebook = json.loads(executed.read_text(encoding="utf-8"))
        row.update(summary.inspect(notebook))
        replicas = None  # on a TPU or GPUs the hardware decides, and only TensorFlow counts them
        if hardware == "CPU":  # the SIMULATED_REPLICAS passed, else the notebook's own default
            declared = papermill.inspect_notebook(str(path)).get("SIMULATED_REPLICAS", {})
            replicas = int(parameters.get("SIMULATED_REPLICAS", declared.get("default", 1)))
        places = blocks.places_of_run(hardware, replicas, runtime.detect_platform())
        problems = blocks.misplaced(notebook, row["results"], places, row["status"] == "passed")
    # The budget is a CPU's (Binder, a laptop): a TPU host's runtime keeps buffers of its own.
    if peak.gib > memory.BUDGET_GIB and hardware == "CPU":
        problems.append(f"peak memory {peak.gib} GiB, over the {memory.BUDGET_GIB:g} GiB budget")
    if problems:
        row["status"] = "FAILED"
        row["error"] = "; ".join(filter(None, [row["error"], *problems]))
    if row["status"] == "passed" and row.get("stderr"):
        row["status"] = summary.STDERR_STATUS  # ran to the end, but wrote what it should not
    return row
