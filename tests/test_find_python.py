"""tools/find_python.py: each stack's interpreter is found, or its absence is said clearly."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import find_python  # noqa: E402
import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only


def test_finds_an_interpreter_of_the_running_version():
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    path = find_python.find_python(version)
    assert path is not None and find_python._reports(path, version)


def test_a_missing_version_is_said_clearly(capsys):
    assert find_python.find_python("3.99") is None
    assert find_python.main(["3.99"]) == 1
    err = capsys.readouterr().err
    assert "Python 3.99 was not found" in err and "pyenv install 3.99" in err


def test_bad_arguments_print_usage(capsys):
    assert find_python.main(["3"]) == 2
    assert "usage" in capsys.readouterr().err


def test_newest_patch_release_is_tried_first(tmp_path, monkeypatch):
    for patch in ("9", "10"):
        binary = tmp_path / "versions" / f"3.13.{patch}" / "bin" / "python3.13"
        binary.parent.mkdir(parents=True)
        binary.touch()
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setattr(find_python.shutil, "which", lambda name: None)
    found = find_python.candidates("3.13")
    assert "3.13.10" in found[0] and "3.13.9" in found[1]
