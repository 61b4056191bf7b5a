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
from runner import summary

__all__ = ["kept_files_parameters", "run_one"]


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
    row["results"] = json.loads(results.read_text()) if results.exists() else {}
    row["executed"] = str(executed)
    if executed.exists():
        row.update(summary.inspect(json.loads(executed.read_text(encoding="utf-8"))))
    if row["status"] == "passed" and row.get("stderr"):
        row["status"] = summary.STDERR_STATUS  # ran to the end, but wrote what it should not
    return row
