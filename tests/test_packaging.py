"""pyproject.toml's package list: every package of the repository installs (pip install git+...)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.tools

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_and_every_listed_one_exists():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {folder: name for name, folder in setuptools.get("package-dir", {}).items()}
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        folder = init.parent.relative_to(ROOT)
        if folder.parts[0] in ("tests", "tools", "build", "book") or ".venv" in str(folder):
            continue
        top = mapped.get(folder.parts[0], folder.parts[0])
        found.add(".".join((top, *folder.parts[1:])))
    assert set(setuptools["packages"]) == found
