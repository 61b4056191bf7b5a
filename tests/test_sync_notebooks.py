"""tools/sync_notebooks.py: the generated preamble, navigation and setup cell of every notebook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import manifest as M  # noqa: E402
import notebook_files  # noqa: E402
import script_parts  # noqa: E402
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
    assert text[3].startswith("## Setup\n") and "CONTRIBUTING.md#how-a-lesson-starts" in text[3]
    assert out["cells"][4]["metadata"]["tags"] == ["parameters"]
    assert text[5].startswith(sync.SETUP_MARKER)
    assert text[5].endswith("lesson.start(RELEASE, SIMULATED_REPLICAS)")
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
    with pytest.raises(SystemExit, match=r"\[notebooks\.new\]: no such entry"):
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
    assert text[5].endswith("lesson.start(RELEASE, backend=None)")
    assert "needs no TensorFlow" in text[3] and text[3].endswith("`SEED` picks the\ndata.")


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
    entry = notebook_files.tomllib.loads(manifest.read_text())["notebooks"][
        "new"
    ]  # keyed by its name
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


def long_cells(notebook: dict, limit: int = 25) -> list[tuple[int, int]]:
    """(index, lines) of the code cells longer than ``limit`` lines, but the generated setup and
    the parts of train_tpu.py (a part is one cell, as long as the script has it)."""
    found = []
    for i, cell in enumerate(notebook["cells"]):
        text = notebook_files.source(cell)
        generated = text.startswith(sync.SETUP_MARKER) or script_parts.tagged(cell)
        if cell["cell_type"] == "code" and not generated:
            if (lines := len(text.strip().splitlines())) > limit:
                found.append((i, lines))
    return found


def test_long_cells_are_listed_but_not_the_generated_setup(adopted):
    nb, manifest = adopted
    nb["cells"][3]["source"] = "\n".join(f"x{i} = {i}" for i in range(26))
    out = sync.sync_notebook(nb, "11_new.ipynb", CFG, manifest, NAMES)
    assert long_cells(out) == [(6, 26)]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_lesson_cell_imports_tensorflow_internals_or_types_navigation(path):
    assert sync.problems(notebook_files.read(path), path.name) == []


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_code_cells_are_at_most_25_lines(path):
    long = long_cells(notebook_files.read(path))
    assert long == [], (
        f"{path.name}: (cell, lines) over 25 lines: {long}; split where a reader pauses"
    )


# --- the setup cell, run for real in a fresh interpreter -----------------------------------


def _setup_code() -> str:
    """The generated setup cell of a lesson without TensorFlow (the checks come before it)."""
    entry = {"title": "T", "promise": "P", "need": "N", "headline": "H", "setup": "helpers-only"}
    return sync.setup_cell(entry, CFG) + "\nprint('setup passed')"


def _run_setup(cwd: Path, python: str = sys.executable, env: dict | None = None):
    # `python -c` puts the working directory first on sys.path, as Jupyter does the notebook's.
    return subprocess.run(
        [python, "-c", _setup_code()],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_setup_accepts_this_projects_helpers_and_says_what_it_found(tmp_path):
    run = _run_setup(tmp_path)
    assert run.returncode == 0, run.stderr
    line, passed = run.stdout.strip().splitlines()
    assert line.startswith(f"helpers {CFG['release'][1:]}; ") and passed == "setup passed"


def test_setup_stops_at_a_foreign_helpers_module_and_says_what_to_do(tmp_path):
    (tmp_path / "helpers.py").write_text("def plot(): pass\n")
    run = _run_setup(tmp_path)
    assert run.returncode != 0 and "setup passed" not in run.stdout
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: cannot import name 'lesson' from 'helpers'")
    assert str(tmp_path / "helpers.py") in message  # where the foreign module is
    assert f"`%pip install -U git+https://github.com/{CFG['github']}@{CFG['release']}`" in message


def test_setup_stops_at_another_release_of_this_package(tmp_path):
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "__init__.py").write_text('__project__ = "tpu-field-guide"\n__version__ = "0.0.1"\n')
    (package / "lesson.py").write_text((ROOT / "helpers" / "lesson.py").read_text())
    run = _run_setup(tmp_path)
    assert run.returncode != 0
    assert "ForeignHelpers: These notebooks need the helpers of tpu-field-guide" in run.stderr
    assert "found version 0.0.1" in run.stderr and f"@{CFG['release']}`" in run.stderr


def _stand_in_remote(tmp_path: Path, tag: str | None) -> Path:
    """A git repository with this checkout's package, tagged ``tag`` (or not at all)."""
    repo = tmp_path / "remote"
    # What pyproject.toml packages: the helpers, the tools, the script and its examples.
    for name in ("helpers", "tpucheck", "examples", "train_tpu.py", "pyproject.toml", "README.md"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, repo / name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "stand-in"], check=True)
    if tag:
        subprocess.run([*git, "tag", tag], check=True)
    return repo


@pytest.fixture
def fresh_python(tmp_path_factory):
    """A new virtual environment without the helpers, whose other packages (numpy...) come from
    this one's site-packages: a hosted runtime before the setup cell installs anything."""
    venv = tmp_path_factory.mktemp("hosted") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "packages-of-the-image.pth").write_text(ours + "\n")  # its .pth files are not run
    return str(venv / "bin" / "python")


# pip builds the package from the stand-in remote; only its own dependencies are left out.
QUIET_PIP = {"PIP_NO_DEPS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.mark.slow
def test_setup_installs_from_the_tag_or_else_from_main_and_says_so(tmp_path, fresh_python):
    remote = _stand_in_remote(tmp_path, tag=None)  # the release tag is not published yet
    env = {**QUIET_PIP, "FIELD_GUIDE_REPO": f"file://{remote}"}
    run = _run_setup(tmp_path, fresh_python, env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Did not find branch or tag" not in run.stderr  # the failed first try stays quiet
    line = run.stdout.strip().splitlines()[0]
    assert (
        "(installed from main @ " in line and f"not from the release tag {CFG['release']})" in line
    )


@pytest.mark.slow
def test_setup_explains_an_install_that_fails_everywhere(tmp_path, fresh_python):
    env = {**QUIET_PIP, "FIELD_GUIDE_REPO": f"file://{tmp_path / 'no-such-repository'}"}
    run = _run_setup(tmp_path, fresh_python, env)
    assert run.returncode != 0 and "setup passed" not in run.stdout
    assert "RuntimeError: pip: " in run.stderr  # pip's own reason, for the main branch
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("No helpers from file://")
    assert "Internet off (Kaggle: Settings)?" in message and "helpers/ folder" in message


def test_the_badges_runtime_survives_nbstripout_as_make_sync_runs_it(tmp_path):
    # Colab opens a TPU runtime from "accelerator" and colab.gpuType; nbstripout must keep them.
    path = tmp_path / PATHS[1].name
    shutil.copy(PATHS[1], path)
    nb = notebook_files.read(path)
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code.update(execution_count=3)  # something for it to strip
    path.write_text(notebook_files.dumps(nb))
    nbstripout = Path(sys.executable).parent / "nbstripout"
    subprocess.run([str(nbstripout), "--keep-id", str(path)], check=True)
    stripped = notebook_files.read(path)["metadata"]
    for key, value in sync.HARDWARE_METADATA["tpu"].items():
        assert stripped[key] == value
    assert stripped["colab"]["gpuType"] == "V5E1" and stripped["kaggle"]["accelerator"] == "tpuV5e8"


def test_an_aside_runs_to_the_next_section_folded_and_a_guard_hides_its_input():
    cells = [
        _cell("markdown", "## 1. A lesson section"),
        _cell("code", "assert x > 0", tags=["guard"]),
        _cell("markdown", "## Aside: the simulated TPU\nWhy a CPU is slow here."),
        _cell("code", "print('timing')"),
        _cell("markdown", "### A subheading stays inside"),
        _cell("markdown", "## What to remember"),
        _cell("code", "print('after')", tags=["aside"]),  # a stale tag is removed
    ]
    sync.mark_asides_and_guards(cells)
    tags = [c["metadata"].get("tags", []) for c in cells]
    assert tags == [[], ["guard", "remove-input"], ["aside"], ["aside"], ["aside"], [], []]
    assert cells[2]["metadata"]["jp-MarkdownHeadingCollapsed"] is True
    assert "jp-MarkdownHeadingCollapsed" not in cells[5]["metadata"]
    # A guard's source is hidden in every client (it still runs), and its first line says why.
    assert cells[1]["metadata"]["jupyter"] == {"source_hidden": True}
    assert cells[1]["metadata"]["cellView"] == "form" and cells[1]["metadata"]["_kg_hide-input"]
    assert "".join(cells[1]["source"]).startswith(sync.GUARD_TITLE)
    assert "jupyter" not in cells[3]["metadata"]


def test_the_setup_text_stays_short_in_every_lesson():
    for path in PATHS:
        text = next(
            "".join(c["source"]) for c in notebook_files.read(path)["cells"]
            if c.get("id") == "setup-text"
        )  # fmt: skip
        assert sync.word_count(text) <= sync.SETUP_WORDS, path.name
    assert sync.word_count("[How it works](https://x.y/z) <!-- a comment -->") == 3


# --- README.md's module map -------------------------------------------------------------------


def test_the_module_map_links_every_lesson_a_first_sentence_names():
    # A name that ended the sentence ("notebook NN_name.") once lost its link.
    numbers = sync.lessons.numbering()
    name, number = next(iter(numbers.items()))
    stem, path = f"{number}_{name}", f"notebooks/{number}_{name}.ipynb"
    for text, linked in [
        (f"Around it, notebook {stem}.", f"Around it, notebook [{number}]({path})."),
        (
            f"Around it (notebook {stem}'s aside).",
            f"Around it (notebook [{number}]({path})'s aside).",
        ),
        (f"As {path} shows.", f"As [{path}]({path}) shows."),
        (f"Code `{stem}` stays.", f"Code `{stem}` stays."),
    ]:
        assert sync.lessons.as_links(text, "notebooks/", numbers) == linked
    with pytest.raises(SystemExit, match=stem):  # a reference it cannot link is named, not lost
        sync.lessons.as_links(f"As ../{path} shows.", "notebooks/", numbers)


def test_the_module_map_shows_the_lessons_the_helpers_and_the_tools(tmp_path):
    for file, doc in [
        ("train_tpu.py", "Train it."),
        ("helpers/results.py", "What it measured."),
        ("tools/lessons.py", "Lessons by name, as notebook 00_tpu_self_test says."),
        ("tools/runner/__init__.py", "The runner."),
    ]:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_text(f'"""{doc}"""\n')
    parts = sync.module_map(tmp_path).split("\n\n")
    assert parts[:2] == [
        "**The lessons and the script**",
        f"{sync.NOTEBOOKS_LINE}\n- `train_tpu.py`: Train it.",
    ]
    assert parts[2:4] == [
        "**The helpers** (`helpers/`)",
        "- `helpers/results.py`: What it measured.",
    ]
    assert parts[4] == "**The tools** (`tools/`)"  # tpucheck/ is not there (yet)
    assert "[00](notebooks/00_tpu_self_test.ipynb) says" in parts[5]
    assert "- `tools/runner/`: The runner." in parts[5]

    (tmp_path / "tpucheck").mkdir()
    (tmp_path / "tpucheck" / "__init__.py").write_text('"""The TPU checks."""\n')
    (tmp_path / "tpucheck" / "facts.py").write_text('"""TPU facts."""\n')
    tools = sync.module_map(tmp_path).split("**The tools**")[1]
    assert (
        tools.startswith(" (`tools/`, `tpucheck/`)")
        and f"- `{Path('tpucheck', 'facts.py').as_posix()}`: TPU facts." in tools
    )


def test_the_readme_module_map_is_the_generated_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{sync.MODULES_START}\n{sync.module_map()}\n{sync.MODULES_END}" in readme


# --- the install block of the reference script's docstring ------------------------------------


def test_the_script_states_each_platforms_install_route_in_at_most_four_lines():
    from tpucheck import routes

    lines = sync.install_lines()
    assert 1 < len(lines) <= 4 and all(line.startswith("    ") for line in lines)
    kaggle = routes.choose_route("kaggle", routes.PLATFORMS["kaggle"].python)
    assert f"{routes.PLATFORMS['kaggle'].label}: {' && '.join(kaggle.commands)}" in lines[1]
    starts = {len(line) - len(line.split(":", 1)[1].lstrip()) for line in lines}
    assert len(starts) == 1  # the commands line up
    assert lines[-1].split() == ["a", "CPU", "or", "GPUs:", "pip", "install", "tensorflow"]


def test_a_stale_install_block_is_rewritten_and_the_script_stays_under_600_lines():
    script = ROOT / CFG["script"]
    text = script.read_text(encoding="utf-8")
    assert sync.sync_script(text, CFG["script"]) == text  # make lint fails otherwise
    assert len(text.splitlines()) <= 600
    stale = text.replace("tensorflow-tpu==", "tensorflow-tpu==0.", 1)
    assert stale != text and sync.sync_script(stale, CFG["script"]) == text
