"""tools/sync_notebooks.py: the generated preamble, navigation and setup cell of every notebook."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import manifest as M  # noqa: E402
import notebook_files  # noqa: E402
import sync_notebooks as sync  # noqa: E402

CFG = notebook_files.settings()
PATHS = notebook_files.notebook_paths()


def _cell(kind, text, tags=None):
    cell = {"cell_type": kind, "metadata": {"tags": tags} if tags else {}, "source": text}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _new_notebook(number="11"):
    """A notebook as someone writes it before its first `make sync`."""
    cells = [
        _cell("markdown", f'# {number} · A new lesson\nLearn one new thing, "quoted" too.'),
        _cell("markdown", "## What you need\nAny machine; about a minute on a CPU."),
        _cell("code", "SMOKE_TEST = False\nSIMULATED_REPLICAS = 8", tags=["parameters"]),
        _cell("code", "print('lesson')"),
        _cell("markdown", "## What to remember\n- one thing\n"),
    ]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


NAMES = ["10_old.ipynb", "11_new.ipynb", "12_newer.ipynb"]


@pytest.fixture
def adopted():
    nb = _new_notebook()
    manifest = {"11_new": M.adopt(nb, "11_new.ipynb"), "10_old": {"title": "Old"}}
    return nb, manifest


def _sources(nb):
    return [notebook_files.source(c) for c in nb["cells"]]


def test_a_new_notebook_is_adopted_and_gets_the_whole_preamble(adopted):
    nb, manifest = adopted
    assert manifest["11_new"] == {
        "title": "A new lesson",
        "headline": "see results/ (no headline written yet)",
        "promise": 'Learn one new thing, "quoted" too.',
        "need": "Any machine; about a minute on a CPU.",
    }
    out = sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES)
    text = _sources(out)
    assert text[0].startswith("# 11 · A new lesson\nLearn one new thing")
    assert text[1].startswith(sync.BADGE_MARKER) and "11_new.ipynb" in text[1]
    assert text[2] == f"## What you need\nAny machine; about a minute on a CPU.\n\n{sync.TPU_FACTS}"
    assert text[3].startswith("## Setup\n") and "`parameters`" in text[3]
    assert out["cells"][4]["metadata"]["tags"] == ["parameters"]
    assert text[5].startswith(sync.SETUP_MARKER) and "runtime.ensure_tensorflow()" in text[5]
    assert text[6:8] == ["print('lesson')", "## What to remember\n- one thing\n"]
    assert text[-1].startswith(sync.NAV_MARKER)
    assert "**Previous:** [10 · Old](10_old.ipynb)" in text[-1]
    assert "**Next:** [12 · newer](12_newer.ipynb)" in text[-1]  # no entry yet: its file name
    # Idempotent: a second run changes nothing.
    again = sync.sync_notebook(json.loads(json.dumps(out)), "11_new.ipynb", CFG, manifest, NAMES)
    assert notebook_files.dumps(again) == notebook_files.dumps(out)


def test_hand_edits_to_the_preamble_are_overwritten_from_the_manifest(adopted):
    nb, manifest = adopted
    out = sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES)
    expected = notebook_files.dumps(out)
    out["cells"][2]["source"] = "## What you need\nedited in the notebook"
    out["cells"][5]["source"] = sync.SETUP_MARKER + "\nimport helpers  # edited by hand"
    out["cells"].insert(-1, _cell("markdown", sync.NAV_MARKER + "\nstale navigation"))
    repaired = sync.sync_notebook(out, "11_new.ipynb", CFG, manifest, NAMES)
    assert notebook_files.dumps(repaired) == expected


def test_cells_get_ids_that_survive_edits_and_a_second_sync(adopted):
    # JupyterLab marks a notebook modified on open when its cells have no ids (nbformat 4.4).
    nb, manifest = adopted
    out = sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES)
    ids = [c["id"] for c in out["cells"]]
    assert out["nbformat_minor"] == sync.NBFORMAT_MINOR == 5
    assert ids[:6] == list(sync.GENERATED_IDS) and ids[-1] == sync.NAV_ID
    assert len(set(ids)) == len(ids) and all(sync.CELL_ID.match(i) for i in ids)
    lesson_id = ids[6]
    out["cells"].insert(6, _cell("code", "print('a new first lesson cell')"))
    out["cells"][7]["source"] = "print('lesson, edited')"
    again = sync.sync_notebook(out, "11_new.ipynb", CFG, manifest, NAMES)
    assert again["cells"][7]["id"] == lesson_id  # a lesson cell keeps its id when edited
    assert again["cells"][6]["id"] not in ids  # the new cell gets a new one
    out["cells"][8]["id"] = lesson_id  # a pasted duplicate gets a new one too
    assert len(
        {c["id"] for c in sync.sync_notebook(out, "11_new.ipynb", CFG, manifest, NAMES)["cells"]}
    ) == len(out["cells"])


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_stored_notebooks_are_nbformat_4_5_with_ids(path):
    nb = notebook_files.read(path)
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5)
    ids = [cell.get("id") for cell in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)


def test_navigation_follows_the_numbered_files_present():
    manifest = {"00_first": {"title": "First"}, "01_last": {"title": "Last"}}
    names = ["00_first.ipynb", "01_last.ipynb"]
    first = sync.navigation("00_first.ipynb", names, manifest)
    last = sync.navigation("01_last.ipynb", names, manifest)
    assert "Previous" not in first and "**Next:** [01 · Last](01_last.ipynb)" in first
    assert "Next" not in last and "**Previous:** [00 · First](00_first.ipynb)" in last
    assert "../README.md" in last


def test_a_missing_or_incomplete_entry_is_named():
    with pytest.raises(SystemExit, match=r"\[notebooks\.11_new\]: no such entry"):
        M.entry_for({}, "11_new.ipynb")
    with pytest.raises(SystemExit, match=r"missing \['need', 'headline'\]"):
        M.entry_for({"11_new": {"title": "T", "promise": "P"}}, "11_new.ipynb")
    full = {"title": "T", "promise": "P", "need": "N", "headline": "H"}
    with pytest.raises(SystemExit, match="unknown keys"):
        M.entry_for({"11_new": {**full, "x": 1}}, "11_new")
    with pytest.raises(SystemExit, match="not parameter names"):
        M.entry_for({"11_new": {**full, "smoke": {"epochs": 3}}}, "11_new")
    with pytest.raises(SystemExit, match="helpers-only"):
        M.entry_for({"11_new": {**full, "setup": "x"}}, "11_new")


def test_a_notebook_chooses_its_setup_variant(adopted):
    nb, manifest = adopted
    manifest["11_new"].update(setup="helpers-only", parameters="`SEED` picks the data.")
    text = _sources(sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES))
    assert "ensure_tensorflow" not in text[5] and "import helpers" in text[5]
    assert "does not use TensorFlow" in text[3] and "`-p NAME value`. `SEED` picks" in text[3]


def test_adopted_entries_round_trip_through_the_manifest_file(tmp_path):
    path = tmp_path / "11_new.ipynb"
    nb = _new_notebook()
    nb["cells"][1]["source"] = (
        "## What you need\nA table\n\n| a | b |\n|---|---|\n| `x` | '''y''' |"
    )
    path.write_text(json.dumps(nb))
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("# comment\n")
    assert M.adopt_missing([path], manifest) == ["11_new.ipynb"]
    assert M.adopt_missing([path], manifest) == []  # already there
    entry = notebook_files.tomllib.loads(manifest.read_text())["notebooks"]["11_new"]
    assert {k: v.strip() for k, v in entry.items()} == M.adopt(nb, "11_new.ipynb")


def test_problems_a_sync_cannot_repair_are_reported():
    nb = _new_notebook()
    nb["cells"][3]["source"] = "from tensorflow.python.distribute import values"
    nb["cells"][4]["source"] = "## What to remember\n\n**Next:** [12](12_x.ipynb)"
    nb["cells"].insert(4, _cell("markdown", "## Setup\nThe next cell is the same everywhere."))
    nb["cells"][2:2] = [_cell("markdown", "x")] * 3  # the setup heading is now after the preamble
    found = sync.problems(nb, "11_new.ipynb")
    assert len(found) == 3, found
    assert "cell 6: imports tensorflow.python" in found[0]
    assert "cell 7: a second '## Setup'" in found[1] and "hand-typed" in found[2]


def test_long_cells_are_listed_but_not_the_generated_setup(adopted):
    nb, manifest = adopted
    nb["cells"][3]["source"] = "\n".join(f"x{i} = {i}" for i in range(26))
    out = sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES)
    assert sync.long_cells(out) == [(6, 26)]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_lesson_cell_imports_tensorflow_internals_or_types_navigation(path):
    assert sync.problems(notebook_files.read(path), path.name) == []


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_code_cells_are_at_most_25_lines(path):
    long = sync.long_cells(notebook_files.read(path))
    assert long == [], (
        f"{path.name}: (cell, lines) over 25 lines: {long}; split where a reader pauses"
    )


# --- the setup cell's check of `helpers`, run for real in a fresh interpreter ---------------


def _setup_code() -> str:
    """The generated setup cell without the TensorFlow part (the check comes before it)."""
    entry = {"title": "T", "promise": "P", "need": "N", "setup": "helpers-only"}
    return sync.setup_cell(entry, CFG) + "\nprint('setup passed')"


def _run_setup(cwd: Path) -> subprocess.CompletedProcess:
    # `python -c` puts the working directory first on sys.path, as Jupyter does the notebook's.
    return subprocess.run(
        [sys.executable, "-c", _setup_code()], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_setup_accepts_this_projects_helpers(tmp_path):
    run = _run_setup(tmp_path)
    assert run.returncode == 0, run.stderr
    assert "setup passed" in run.stdout


def test_setup_stops_at_a_foreign_helpers_module_and_says_where(tmp_path):
    (tmp_path / "helpers.py").write_text("def plot(): pass\n")
    run = _run_setup(tmp_path)
    assert run.returncode != 0 and "setup passed" not in run.stdout
    version = CFG["release"][1:]
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: These notebooks need `helpers` from tpu-field-guide")
    assert f"tpu-field-guide {version}" in message
    assert f"found a module at {tmp_path / 'helpers.py'}" in message
    assert "rename or move it" in message and f"@{CFG['release']}" in message


def test_setup_stops_at_another_release_of_this_package(tmp_path):
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent("""\
            __project__ = "tpu-field-guide"
            __version__ = "0.0.1"
        """)
    )
    run = _run_setup(tmp_path)
    assert run.returncode != 0
    assert f"found tpu-field-guide 0.0.1 at {package / '__init__.py'}" in run.stderr
    assert "%pip install -U git+https://github.com/" in run.stderr


def test_setup_explains_a_failed_install_of_the_helpers(tmp_path):
    # As on Colab or Kaggle without the helpers, when pip cannot fetch them (no network, no tag).
    prelude = textwrap.dedent("""\
        import importlib.util, subprocess
        real_find_spec = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "helpers" else real_find_spec(name, *a)
        subprocess.call = lambda command: print("pip:", " ".join(command[3:])) or 1
    """)
    run = subprocess.run(
        [sys.executable, "-c", prelude + _setup_code()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "setup passed" not in run.stdout
    assert f"pip: install -q git+https://github.com/{CFG['github']}@{CFG['release']}" in run.stdout
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("RuntimeError: pip could not install git+https://github.com/")
    assert "copy the repository's helpers/ folder into the working directory" in message
