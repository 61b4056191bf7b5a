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
        _("~@x.py"): f'"""As in {listed}."""',
        _("notebooks@00_first.ipynb"): _notebook(f"See {mention}.", f"# {mention}"),
    }
    converted = lessons.convert(files, NUMBERS)
    assert converted["README.md"] == _(
        f"See [{mention}](notebooks@01_second.ipynb), {WORD}s [00](notebooks@00_first.ipynb) "
        f"and [02](notebooks@02_third.ipynb); `{mention}` in code stays."
    )
    assert converted[_("book@page.md")] == f"See [{mention}](01_second.ipynb)."
    assert converted[_("~@x.py")] == f'"""As in {WORD}s 00_first and 02_third."""'
    cells = json.loads(converted[_("notebooks@00_first.ipynb")])["cells"]
    assert ["".join(c["source"]) for c in cells] == [
        f"See [{mention}](01_second.ipynb).",
        f"# {WORD} 01_second",
    ]
    assert lessons.bare_mentions(files, NUMBERS) and not lessons.bare_mentions(converted, NUMBERS)
    assert lessons.convert({**files, **converted}, NUMBERS) == {}  # idempotent


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


def test_convert_leaves_a_link_to_a_renamed_lesson_whole():
    # A link whose target still bears a lesson's old name is a link, not a bare mention: convert
    # once wrapped its text in a second link ("[[lesson 01](01_old.ipynb)](01_second.ipynb)").
    text = f"See [lesson 01](01_old.ipynb) and [{WORD} 01 · Old](..@notebooks@01_old.ipynb)."
    files = {"README.md": _(text), _("notebooks@00_first.ipynb"): _notebook(_(text), "x = 1")}
    assert lessons.convert(files, NUMBERS) == {}
    assert lessons.bare_mentions(files, NUMBERS) == []


def test_a_lesson_renamed_in_the_manifest_keeps_its_notebook_and_its_references(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("00_first", "01_old", "02_third"):
        (notebooks / f"{name}.ipynb").write_text("{}")
    renamed = {"old": "second"}
    assert lessons.renamed(tmp_path, NUMBERS) == renamed
    assert lessons.renames(tmp_path, NUMBERS, renamed) == [
        (notebooks / "01_old.ipynb", notebooks / "01_second.ipynb")
    ]
    text = f"[{WORD} 01](01_old.ipynb), {WORD} 01_old; 01_older stays"
    assert lessons.renumbered({"a.md": text}, NUMBERS, renamed) == {
        "a.md": f"[{WORD} 01](01_second.ipynb), {WORD} 01_second; 01_older stays"
    }
    # A new notebook beside an entry without one is not a rename: its number is not the entry's.
    (notebooks / "01_old.ipynb").rename(notebooks / "03_new.ipynb")
    assert lessons.renamed(tmp_path, NUMBERS) == {}


@pytest.mark.slow
def test_renaming_a_lesson_is_its_entry_name_and_make_sync(tmp_path):
    from test_one_home import _copy, _recipe

    copy = _copy(tmp_path)
    manifest = copy / "notebooks" / "manifest.toml"
    number = lessons.numbering(manifest)["input_pipelines"]
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace("[notebooks.input_pipelines", "[notebooks.feeding_the_tpu"))
    for command in _recipe("sync"):  # its return code: the lint below, once the lessons pass
        subprocess.run(command, shell=True, cwd=copy, capture_output=True, text=True)

    assert (copy / "notebooks" / f"{number}_feeding_the_tpu.ipynb").exists()
    assert not list((copy / "notebooks").glob("*input_pipelines*"))
    assert "[notebooks.input_pipelines]" not in manifest.read_text(encoding="utf-8")
    texts = lessons.texts(copy)
    assert not [file for file, text in texts.items() if f"{number}_input_pipelines" in text]
    assert any(f"]({number}_feeding_the_tpu.ipynb)" in text for text in texts.values())
    # The lint hint, run after the rename, leaves every link to the lesson as it is.
    linking = {file for file, text in texts.items() if "_feeding_the_tpu.ipynb" in text}
    convert = [sys.executable, "tools/lessons.py", "--convert"]
    subprocess.run(convert, cwd=copy, capture_output=True, text=True, check=True)
    after = lessons.texts(copy)
    assert linking and all(after[file] == texts[file] for file in linking)
