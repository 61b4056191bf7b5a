"""Where a run writes: one folder per mode, environment and notebook selection.

``build/full`` and ``build/smoke`` for the main environment (``.venv``), ``build/full-kaggle`` for
``.venv-kaggle``, ``build/smoke-03-04`` for a smoke run of notebooks 03_keras_compile_and_fit and 04_custom_training_loops only: a run on one
stack never overwrites another stack's executed notebooks, and parallel runs never clobber.
The environment is the one running the tool (``sys.prefix``), so ``make`` needs no folder logic.
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_files import ROOT


def run_folder(mode: str, only: list[str] | tuple = (), venv: str | None = None) -> Path:
    """The folder of a ``mode`` ("full" or "smoke") run from environment ``venv``."""
    if mode not in ("full", "smoke"):
        raise ValueError(f"mode is 'full' or 'smoke', not {mode!r}")
    venv = Path(sys.prefix).name if venv is None else venv
    suffix = venv.removeprefix(".venv") if venv.startswith(".venv") else f"-{venv}"
    selection = "".join(f"-{name}" for name in only) if mode == "smoke" else ""
    return ROOT / "build" / f"{mode}{suffix}{selection}"
