"""tools/lessons.py: a lesson is known by its name, the manifest's order numbers it.

The end-to-end test inserts a lesson between 09 and 10 on a copy of the repository, as
CONTRIBUTING.md says: one manifest entry and the new notebook, then the Makefile's own `sync` and
`lint` recipes and the notebooks' structure tests; nothing may still name the old numbers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import lessons  # noqa: E402
from test_check_references import _  # noqa: E402  ("@" for "/": this file names no such path)

# Typed apart, so that this file names no lesson by number alone.
WORD = "notebook"
NUMBERS = {"first": "00", "second": "01", "third": "02"}


def test_the_manifest_order_numbers_the_lessons():
    numbers = lessons.numbering()
    assert list(numbers.values()) == [f"{i:02d}" for i in range(len(numbers))]
    assert [p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")] and all(
        numbers[lessons.lesson_name(p)] == p.name[:2]
        for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
    )


def test_references_by_name_are_renumbered_from_the_name_beside_them():
    text = (
        f"[{WORD} 01](01_third.ipynb), [01 · Third](..@notebooks@01_third.ipynb)'s cell; "
        f"{WORD} 00_second and notebooks@00_second.ipynb; 05_third_party and 01_thirds stay"
    )
    files = {"README.md": text, "a.py": text}
    renumbered = lessons.renumbered(files, NUMBERS)
    assert renumbered["README.md"] == (
        f"[{WORD} 02](02_third.ipynb), [02 · Third](..@notebooks@02_third.ipynb)'s cell; "
        f"{WORD} 01_second and notebooks@01_second.ipynb; 05_third_party and 01_thirds stay"
    )
    assert lessons.renumbered(renumbered, NUMBERS) == {}


def _notebook(markdown: str, code: str) -> str:
    cells = [
        {"cell_type": "markdown", "id": "m", "metadata": {}, "source": markdown},
        {"cell_type": "code", "id": "c", "metadata": {}, "source": code, "outputs": []},
    ]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_convert_writes_bare_mentions_by_name_once():
    mention, listed = f"{WORD} 01", f"{WORD}s 00 {'and'} 02"
    files = {
        "README.md": f"See {mention}, {listed}; `{mention}` in code stays.",
        _("book@page.md"): f"See {mention}.",
        _("~@x.py"): f'"""Taught in {WORD} 01. As in {listed}."""',
        _("notebooks@00_first.ipynb"): _notebook(f"See {mention}.", f"# {mention}"),
    }
    converted = lessons.convert(files, NUMBERS)
    assert converted["README.md"] == _(
        f"See [{mention}](notebooks@01_second.ipynb), {WORD}s [00](notebooks@00_first.ipynb) "
        f"and [02](notebooks@02_third.ipynb); `{mention}` in code stays."
    )
    assert converted[_("book@page.md")] == f"See [{mention}](01_second.ipynb)."
    assert converted[_("~@x.py")] == (
        f'"""Taught in {WORD} 01. As in {WORD}s 00_first and 02_third."""'  # provenance's
    )
    cells = json.loads(converted[_("notebooks@00_first.ipynb")])["cells"]
    assert ["".join(c["source"]) for c in cells] == [
        f"See [{mention}](01_second.ipynb).",
        f"# {WORD} 01_second",
    ]
    assert lessons.bare_mentions(files, NUMBERS) and not lessons.bare_mentions(converted, NUMBERS)
    assert lessons.convert({**files, **converted}, NUMBERS) == {}  # idempotent


def test_a_manifest_keyed_by_number_is_rekeyed_in_its_order():
    old = "# head\n\n[notebooks.01_b]\nx = 1\n\n[notebooks.00_a]\ny = 2\n\n[notebooks.01_b.smoke]\nZ = 3\n"
    assert lessons.rekeyed_manifest(old) == (
        "# head\n\n[notebooks.a]\ny = 2\n\n[notebooks.b]\nx = 1\n\n[notebooks.b.smoke]\nZ = 3\n"
    )
    assert lessons.rekeyed_manifest(lessons.rekeyed_manifest(old)) == lessons.rekeyed_manifest(old)


@pytest.mark.slow
def test_inserting_a_lesson_is_one_manifest_entry_and_the_notebook(tmp_path):
    from test_one_home import _copy, _recipe

    copy = _copy(tmp_path)
    commit = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]
    subprocess.run(commit, cwd=copy, check=True)
    before = lessons.numbering(copy / "notebooks" / "manifest.toml")
    after = list(before)
    after.insert(after.index("tpu_readiness_check"), "new_lesson")
    # The edit: a new entry where the lesson goes, and the notebook (here 07's lesson, retitled).
    manifest = copy / "notebooks" / "manifest.toml"
    text = manifest.read_text(encoding="utf-8")
    entry = re.search(r"\[notebooks\.model_parallelism\]\n(.*?)\n\n", text, re.DOTALL)[1]
    entry = entry.replace('title = "Model parallelism with logical devices"', 'title = "New"')
    text = text.replace(
        "[notebooks.tpu_readiness_check]\n",
        f"[notebooks.new_lesson]\n{entry}\n\n[notebooks.tpu_readiness_check]\n",
    )
    manifest.write_text(text, encoding="utf-8")
    old_nb = next((copy / "notebooks").glob("*_model_parallelism.ipynb"))
    (copy / "notebooks" / "new_lesson.ipynb").write_text(old_nb.read_text(encoding="utf-8"))

    for command in _recipe("sync") + _recipe("lint"):
        done = subprocess.run(command, shell=True, cwd=copy, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"

    numbers = lessons.numbering(manifest)
    assert list(numbers) == after and numbers["new_lesson"] == before["tpu_readiness_check"]
    assert sorted(p.name for p in (copy / "notebooks").glob("*.ipynb")) == sorted(
        f"{n}_{name}.ipynb" for name, n in numbers.items()
    )
    # Nothing names a moved lesson by its old number; its references say the new one.
    moved = [name for name in before if before[name] != numbers[name]]
    texts = lessons.texts(copy)
    for name in moved:
        old = f"{before[name]}_{name}"
        assert not [file for file, text in texts.items() if old in text], old
    readiness = f"{numbers['tpu_readiness_check']}_tpu_readiness_check"
    linked = re.compile(rf"\[[^\]]*\b{numbers['tpu_readiness_check']}\b[^\]]*\]\({readiness}")
    assert any(linked.search(text) for file, text in texts.items() if file.endswith(".ipynb"))
    readme = texts["README.md"]
    assert (
        f"| {numbers['new_lesson']} | [New](notebooks/{numbers['new_lesson']}_new_lesson" in readme
    )
    nine = json.loads(
        texts[f"notebooks/{numbers['scaling_out_to_pods']}_scaling_out_to_pods.ipynb"]
    )
    assert f"**Next:** [{numbers['new_lesson']} · New]" in "".join(nine["cells"][-1]["source"])
    # The git history follows a renamed lesson.
    status = subprocess.run(["git", "status", "--short"], cwd=copy, capture_output=True, text=True)
    was = f"{before['tpu_readiness_check']}_tpu_readiness_check"
    assert re.search(
        rf"^R. notebooks/{was}.ipynb -> notebooks/{readiness}.ipynb$", status.stdout, re.M
    )

    structure = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
                 "tests/test_notebooks.py", "tests/test_lessons.py", "-m", "not slow"]  # fmt: skip
    done = subprocess.run(structure, cwd=copy, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_comment_made_too_long_moves_above_its_statement_not_into_a_split():
    code = (
        "import train_tpu  # the script" + " " * 80 + f"({WORD} 01)\n"
        "strategy = connect(REPLICAS)  # the script's connect part, as the connection lesson of"
        f" this collection shows ({WORD} 01)\n"
        "x = 1  # short\n"
    )
    converted = lessons.convert({_("~@x.py"): code}, NUMBERS)[_("~@x.py")]
    assert converted.splitlines() == [
        "import train_tpu  # the script" + " " * 80 + f"({WORD} 01_second)",  # ruff leaves it
        "# the script's connect part, as the connection lesson of this collection shows"
        f" ({WORD} 01_second)",
        "strategy = connect(REPLICAS)",
        "x = 1  # short",
    ]


def test_a_pragma_stays_on_its_line_when_the_words_after_it_move_up():
    # Moving "# noqa: F401" away from its import would let ruff's fix delete the import.
    code = (
        "from a import b as c  # noqa: F401  ("
        + WORD
        + " 01 calls it here, see"
        + " x" * 30
        + ")\n"
    )
    converted = lessons.convert({_("~@x.py"): code}, NUMBERS)[_("~@x.py")]
    assert converted.splitlines() == [
        "# (" + WORD + " 01_second calls it here, see" + " x" * 30 + ")",
        "from a import b as c  # noqa: F401",
    ]
