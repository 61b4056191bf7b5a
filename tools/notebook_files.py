"""Shared by the tools: where the notebooks and their manifest are, reading TOML (pyproject.toml's
repository setting) and notebooks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
MANIFEST = NOTEBOOKS / "manifest.toml"


def notebook_paths() -> list[Path]:
    """The lesson notebooks, in order (``NN_snake_case.ipynb``)."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def settings() -> dict:
    """The ``[tool.tpu-field-guide]`` table of pyproject.toml: github, branch, release."""
    return toml(ROOT / "pyproject.toml")["tool"]["tpu-field-guide"]


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dumps(notebook: dict) -> str:
    """The text JupyterLab saves: nbformat's form (every source a list of lines, indent 1, sorted
    keys, a final newline), so JupyterLab and the tools do not fight over a notebook's bytes.
    Written here, as nbformat's own writer takes seconds to import (its schema checks)."""
    cells = [{**c, "source": source(c).splitlines(keepends=True)} for c in notebook["cells"]]
    text = json.dumps({**notebook, "cells": cells}, indent=1, sort_keys=True, ensure_ascii=False)
    return text + "\n"


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text
