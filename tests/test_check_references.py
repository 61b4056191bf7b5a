"""tools/check_references.py: every repository path and helpers name the text mentions exists."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_references as refs  # noqa: E402


def test_the_repository_mentions_nothing_that_does_not_exist():
    assert refs.stale_references(refs.texts()) == []


def _(text: str) -> str:
    """Planted references are typed with "@" for "/" and "~" for "helpers", so that this file
    itself names nothing stale; the checker reads them spelled out."""
    return text.replace("@", "/").replace("~", "helpers")


def test_a_planted_stale_path_or_name_is_found():
    planted = {
        _("book@page.md"): _("Built by tools@build_book.py, see `~@strategy.py` (exists)."),
        _("~@x.py"): _('"""Uses ~.data.load_imagez and ~.nowhere, not ~.connect."""'),
        _("notebooks@01.ipynb"): _('{"source": "tests@test_gone.py checks it"}'),
    }
    assert refs.stale_references(planted) == [
        _("book@page.md: tools@build_book.py does not exist"),
        _("~@x.py: ~.data.load_imagez: ~@data.py defines no load_imagez"),
        _("~@x.py: ~.nowhere does not exist"),
        _("notebooks@01.ipynb: tests@test_gone.py does not exist"),
    ]


def test_placeholders_outputs_and_other_projects_files_are_not_checked():
    texts = {
        "a.md": "notebooks/NN_name.ipynb, build/full/summary.md, requirements-X.Y.txt",
        "b.py": _("keras-team/keras requirements-tensorflow-tpu.txt and .github@workflows@tpu.yml"),
        "c.py": "a file named helpers.py; helpers.__path__",
    }
    assert refs.stale_references(texts) == []
