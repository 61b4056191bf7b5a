"""tools/release.py, and one version everywhere: pyproject.toml, helpers, notebooks, README."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import notebook_files  # noqa: E402
import release  # noqa: E402
import sync_notebooks  # noqa: E402

import helpers  # noqa: E402


def _tags_in(text: str) -> set[str]:
    """Every release tag quoted as `@vX.Y.Z` (install lines) or `vX.Y.Z` in backticks."""
    return set(re.findall(r"(?:@|`)v(\d+\.\d+\.\d+)", text))


def test_the_version_agrees_everywhere():
    version = release.current_version()
    assert notebook_files.settings()["release"] == f"v{version}"
    assert helpers.__version__ == version and helpers.__project__ == "tpu-field-guide"
    for path in release.INSTALL_LINES:
        assert _tags_in((ROOT / path).read_text(encoding="utf-8")) == {version}, path
    for path in notebook_files.notebook_paths():
        setup = next(
            notebook_files.source(c)
            for c in notebook_files.read(path)["cells"]
            if notebook_files.source(c).startswith(sync_notebooks.SETUP_MARKER)
        )
        assert f'RELEASE = "v{version}"' in setup, path.name
        assert _tags_in(path.read_text(encoding="utf-8")) <= {version}, path.name


def test_set_version_rewrites_every_place(tmp_path):
    for path in ("pyproject.toml", "helpers/__init__.py", "CHANGELOG.md", *release.INSTALL_LINES):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    old = release.set_version("12.3.45", tmp_path)
    assert old == release.current_version()
    assert release.current_version(tmp_path) == "12.3.45"
    assert 'release = "v12.3.45"' in (tmp_path / "pyproject.toml").read_text()
    assert '__version__ = "12.3.45"' in (tmp_path / "helpers/__init__.py").read_text()
    for path in release.INSTALL_LINES:
        assert _tags_in((tmp_path / path).read_text()) == {"12.3.45"}, path
    changelog = (tmp_path / "CHANGELOG.md").read_text()
    assert re.search(r"^## \[Unreleased\]\n\n## \[12\.3\.45\] - \d{4}-\d\d-\d\d\n", changelog, re.M)
    readme = (tmp_path / "README.md").read_text()
    assert "not published yet" in readme  # the release tool never claims a push
    # The notebooks' setup cells follow the setting.
    entry = {"title": "T", "promise": "P", "need": "N"}
    cfg = {**notebook_files.settings(), "release": "v12.3.45"}
    assert 'RELEASE = "v12.3.45"' in sync_notebooks.setup_cell(entry, cfg)


def test_set_version_refuses_a_malformed_version(tmp_path):
    with pytest.raises(SystemExit, match="not a version"):
        release.set_version("1.2", tmp_path)
