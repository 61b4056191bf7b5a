"""tools/repository.py: what the repository setting and the Python range make, and what they check.

That one edit to pyproject.toml reaches every text is tested on a copy of the repository in
tests/test_one_home.py; these are the pieces.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import repository  # noqa: E402


def _pyproject(root: Path, requires: str, newest: str, python: str = "3.12.1") -> None:
    (root / "pyproject.toml").write_text(
        f'[project]\nrequires-python = "{requires}"\n'
        f'[tool.tpu-field-guide]\nnewest_python = "{newest}"\npython = "{python}"\n'
    )


def test_the_book_is_the_repositorys_pages_site_unless_the_setting_names_another():
    assert repository.book_url({"github": "Some-Org/guide"}) == "https://some-org.github.io/guide/"
    assert repository.book_url({"github": "me/me.github.io"}) == "https://me.github.io/"
    other = {"github": "o/n", "book": "https://guide.example.org"}
    assert repository.book_url(other) == "https://guide.example.org/"


def test_the_python_range_runs_from_requires_python_to_the_newest(tmp_path):
    _pyproject(tmp_path, ">=3.11", "3.14")
    assert repository.supported_pythons(tmp_path) == ("3.11", "3.12", "3.13", "3.14")
    assert repository.python_range(repository.supported_pythons(tmp_path)) == "3.11 to 3.14"
    _pyproject(tmp_path, ">=3.11,<3.15", "3.14")
    with pytest.raises(SystemExit, match="write it as '>=3.N'"):
        repository.supported_pythons(tmp_path)


def test_a_python_chosen_outside_the_range_is_named(tmp_path):
    _pyproject(tmp_path, ">=3.12", "3.13", python="3.11.7")
    (tmp_path / "binder").mkdir()
    (tmp_path / "binder" / "runtime.txt").write_text("python-3.12\n")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text('python-version: "3.9"\n')
    assert repository.unsupported_pythons(tmp_path) == [
        f"{Path('.github', 'workflows', 'ci.yml')}: Python 3.9 is not supported (3.12 to 3.13)",
        "pyproject.toml: Python 3.11 is not supported (3.12 to 3.13)",
    ]


def test_facts_are_rewritten_between_their_markers_and_never_start_a_line():
    values = {"simulated.tpu": "a 4-core TPU", "simulated.replicas": "4"}
    text = "simulates <!-- fact simulated.tpu -->an 8-core\nTPU<!-- end --> over 8 devices"
    assert repository.fill_facts(text, values) == (
        "simulates <!-- fact simulated.tpu -->a 4-core TPU<!-- end --> over 8 devices"
    )
    with pytest.raises(SystemExit, match="starts a line"):
        repository.fill_facts("simulates\n<!-- fact simulated.replicas -->8<!-- end -->", values)
    with pytest.raises(SystemExit, match="unknown fact 'project.colour'"):
        repository.fill_facts("a <!-- fact project.colour -->red<!-- end -->", values)


def test_the_stored_files_agree_with_the_settings():
    cfg = repository.settings()
    for file in repository.derived_files():
        text = (ROOT / file).read_text(encoding="utf-8")
        assert repository.synced(file, text, cfg) == text, f"{file}: run make sync"
    assert repository.unsupported_pythons() == []


def test_the_script_setting_names_the_script_that_is_packaged():
    """pyproject.toml's script setting is where tools and tests find the reference script; pip
    installs it as a top-level module (py-modules), which setuptools takes from the root."""
    import script_parts
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        pyproject = tomllib.load(f)
    script = Path(pyproject["tool"]["tpu-field-guide"]["script"])
    assert script_parts.SCRIPT == ROOT / script and script_parts.SCRIPT.exists()
    assert pyproject["tool"]["setuptools"]["py-modules"] == [script.stem], (
        "packaging installs another module than the script setting names: update py-modules"
    )
    assert script.parent == Path("."), "py-modules takes modules at the root: add a package-dir"
