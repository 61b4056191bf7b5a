"""tools/check_references.py: every repository path and helpers name the text mentions exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

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
        _("~@x.py"): _('"""Uses ~.loops.load_imagez and ~.nowhere, not ~.connect."""'),
        _("notebooks@01.ipynb"): _('{"source": "tests@test_gone.py checks it"}'),
    }
    assert refs.stale_references(planted) == [
        _("book@page.md: tools@build_book.py does not exist"),
        _("~@x.py: ~.loops.load_imagez: ~@loops.py defines no load_imagez"),
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


def _notebook(*markdown: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": text} for text in markdown]
    return json.dumps({"cells": [*cells, {"cell_type": "code", "source": "x = '](gone.md)'"}]})


def test_a_planted_broken_relative_link_fails_lint():
    missing = "notebook " + "99"  # typed apart, so that this file mentions no missing lesson
    planted = {
        "README.md": _("[the lessons](notebooks@99_gone.ipynb) and [ok](CONTRIBUTING.md)"),
        "CONTRIBUTING.md": "[a section](README.md#no-such-section), [one](README.md#the-lessons)",
        _("book@page.md"): "[lesson](01_tpu_detection_and_connection.ipynb) [page](nowhere.md)",
        _("notebooks@01_x.ipynb"): _notebook(
            "**Next:** [10 · gone](10_tpu_readyness_check.ipynb)\n```\n[code](not-a-link.md)\n```",
            f"[all lessons](../README.md#the-lessons); see {missing}.",
        ),
    }
    assert refs.stale_references(planted) == [
        "CONTRIBUTING.md: the link README.md#no-such-section: README.md has no section "
        "#no-such-section",
        _("README.md: notebooks@99_gone.ipynb does not exist"),  # a repository path, too
        _("README.md: the link notebooks@99_gone.ipynb: no such file"),
        _("book@page.md: the link nowhere.md: no such file"),
        _(f"notebooks@01_x.ipynb: {missing} does not exist"),
        _("notebooks@01_x.ipynb: the link 10_tpu_readyness_check.ipynb: no such file"),
    ]


def test_a_planted_reference_to_a_missing_lesson_fails_lint():
    # Typed apart, so that this file itself refers to no missing lesson and names none by number.
    word = "notebook"
    planted = {
        _("~@x.py"): f'"""See {word} 98_gone; Lesson {"97"}; {word}s 02 {"to"} 09."""',
        "README.md": f"[{word} 98]({_('notebooks@98_gone')}.ipynb)",
        _("notebooks@x.ipynb"): _notebook(f"[{word} 09](10_tpu_readiness_check.ipynb)"),
    }
    assert refs.stale_references(planted) == [
        f"README.md: {word} 98 does not exist",
        "README.md: " + _("notebooks@98_gone.ipynb does not exist"),
        "README.md: the link " + _("notebooks@98_gone.ipynb: no such file"),
        _(f"~@x.py: '{word}s 02 {'to'} 09': a lesson named by its number alone") + refs.BARE_FIX,
        _(f"~@x.py: {word} 97 does not exist"),
        _(f"~@x.py: {word} 98_gone names no lesson"),
        _(f"notebooks@x.ipynb: the link [{word} 09] to lesson 10_tpu_readiness_check says ")
        + "another number",
    ]


def test_the_check_fails_on_a_copy_of_the_repository_with_a_broken_link(tmp_path):
    from test_one_home import _copy  # a copy of the tracked files, as git lists them

    copy = _copy(tmp_path)
    check = [sys.executable, str(copy / "tools" / "check_references.py")]
    assert subprocess.run(check, cwd=copy, capture_output=True).returncode == 0
    page = copy / "book" / "index.md"
    page.write_text(page.read_text() + "\n[gone](gone.md)\n")
    done = subprocess.run(check, cwd=copy, capture_output=True, text=True)
    assert (
        done.returncode == 1 and _("book@index.md: the link gone.md: no such file") in done.stdout
    )


def test_tpucheck_names_are_checked_like_helpers_names():
    package = "tpucheck"  # typed apart: this file names no such module
    found = refs.stale_references({"a.md": f"{package}.nowhere and {package}/x.py"})
    assert f"a.md: {package}.nowhere does not exist" in found
    assert f"a.md: {package}/x.py does not exist" in found
