"""One notebook, executed headless by papermill, with its parameters and kept files.

The executed copy is saved by papermill after every cell, so an interrupted or failed run keeps
everything up to the cell that stopped it. The numbers a notebook records with
``helpers.results.record`` reach ``results/NN_name.json`` through an environment variable that
the kernel inherits.
"""

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
    """``{parameter: folder}`` for the kept-files parameters that ``path`` declares.

    Each folder is ``out/files/NN_name/<sub-folder>``, emptied for this run: a notebook left to
    itself makes a new temporary folder (right for a reader who opens TensorBoard afterwards);
    a headless run replaces its own folder instead, so repeated runs leave nothing behind.
    """
    declared = papermill.inspect_notebook(str(path))
    folders = {}
    for name, sub in kept_files.items():
        if name in declared:
            folder = out / "files" / path.stem / sub
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            folders[name] = str(folder)
    return folders


def replicas_of(path: Path, parameters: dict) -> int | None:
    """The replicas a run of ``path`` has on a CPU: the ``SIMULATED_REPLICAS`` passed, else the
    notebook's own default; None on a TPU or GPUs (there the hardware decides)."""
    if blocks.hardware() != "CPU":
        return None
    if "SIMULATED_REPLICAS" in parameters:
        return int(parameters["SIMULATED_REPLICAS"])
    declared = papermill.inspect_notebook(str(path)).get("SIMULATED_REPLICAS")
    return int(declared["default"]) if declared else 1


def run_one(
    path: Path, out: Path, parameters: dict, cell_timeout: int, kept_files: dict | None = None
) -> dict:
    """Execute ``path`` into ``out/executed/``; return its summary row (never raises for a cell)."""
    results = out / "results" / f"{path.stem}.json"
    executed = out / "executed" / path.name
    for folder in (results.parent, executed.parent):
        folder.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    os.environ[RESULTS_ENV] = str(results)  # the kernel inherits this environment
    row = {"notebook": path.name, "status": "passed", "error": "", "parameters": parameters}
    start = time.perf_counter()
    peak = memory.PeakMemory()  # the kernel and the processes it starts
    with peak:
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
                # The kernel's own log is not for the reader: its start-up warning (TCP on loopback),
                # and "KeyboardInterrupt caught in kernel", which jupyter_client's shutdown (an
                # interrupt first) sometimes causes after the last cell. A kernel that really fails
                # shows as a failed cell or a dead kernel in the row of its notebook.
                extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
            )
        except Exception as err:  # papermill raises on a failing cell; report it and go on
            row["status"] = "FAILED"
            row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["peak_gib"] = peak.gib
    row["results"] = json.loads(results.read_text()) if results.exists() else {}
    row["executed"] = str(executed)
    problems = []
    if executed.exists():
        notebook = json.loads(executed.read_text(encoding="utf-8"))
        row.update(summary.inspect(notebook))
        places = blocks.places_of_run(
            blocks.hardware(), replicas_of(path, parameters), runtime.detect_platform()
        )
        completed = row["status"] == "passed"
        problems = blocks.misplaced(notebook, row["results"], places, completed)
    # The budget is a CPU's (Binder, a laptop): a TPU host's runtime keeps buffers of its own.
    if peak.gib > memory.BUDGET_GIB and blocks.hardware() == "CPU":
        problems.append(f"peak memory {peak.gib} GiB, over the {memory.BUDGET_GIB:g} GiB budget")
    if problems:
        row["status"] = "FAILED"
        row["error"] = "; ".join(filter(None, [row["error"], *problems]))
    if row["status"] == "passed" and row.get("stderr"):
        row["status"] = summary.STDERR_STATUS  # ran to the end, but wrote what it should not
    return row
