"""Where a run writes: one folder per mode, environment and notebook selection.

``build/full`` from ``.venv``, ``build/full-kaggle`` from ``.venv-kaggle`` (``sys.prefix``),
``build/smoke-03-04`` for ``--smoke --only 03 --only 04``: no stack or parallel run overwrites
another's executed notebooks, and ``make`` needs no folder logic.
"""

from __future__ import annotations

import sys
from pathlib import Path

from notebook_files import ROOT


def run_folder(mode: str, only: list[str] | tuple = (), venv: str | None = None) -> Path:
    """The folder of a ``mode`` ("full" or "smoke") run from environment ``venv``."""
    venv = Path(sys.prefix).name if venv is None else venv
    suffix = venv.removeprefix(".venv") if venv.startswith(".venv") else f"-{venv}"
    selection = "".join(f"-{name}" for name in only) if mode == "smoke" else ""
    return ROOT / "build" / f"{mode}{suffix}{selection}"
