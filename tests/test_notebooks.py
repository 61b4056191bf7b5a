"""Structure of every notebook, the generated parts, and the tools that run them.

The notebooks themselves are executed once by tools/run_notebooks.py in `make test`;
tests/test_executed_notebooks.py checks the executed copies.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import manifest  # noqa: E402
import notebook_files  # noqa: E402
import sync_notebooks  # noqa: E402

PATHS = notebook_files.notebook_paths()
IDS = [p.stem for p in PATHS]


def test_there_are_notebooks():
    # 00 is the TPU self-test, run before the lessons; the lessons start at 01.
    assert [p.name[:2] for p in PATHS[:2]] == ["00", "01"]


def test_the_files_are_numbered_in_the_manifests_order():
    # The manifest's order numbers the lessons; make sync renames the files (tools/lessons.py).
    assert [p.stem for p in PATHS] == list(manifest.load())


def test_numbers_are_unique_and_names_snake_case():
    numbers = [p.name[:2] for p in PATHS]
    assert len(numbers) == len(set(numbers))
    for path in PATHS:
        assert re.fullmatch(r"\d\d_[a-z0-9]+(_[a-z0-9]+)*\.ipynb", path.name), path.name


@pytest.fixture(params=PATHS, ids=IDS)
def notebook(request):
    path = request.param
    return path, json.loads(path.read_text(encoding="utf-8"))


def _source(cell):
    return notebook_files.source(cell)


def test_metadata_for_papermill_and_nbval(notebook):
    _, nb = notebook
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["language_info"]["name"] == "python"


def test_title_promise_and_closing_section(notebook):
    path, nb = notebook
    first = _source(nb["cells"][0])
    assert first.startswith(f"# {path.name[:2]} · "), first[:60]
    assert len(first.splitlines()) >= 2, "the title needs a one-paragraph promise under it"
    headings = [
        line for c in nb["cells"] if c["cell_type"] == "markdown"
        for line in _source(c).splitlines() if line.startswith("## ")
    ]  # fmt: skip
    assert headings[-2:] == ["## What to remember", "## Exercises"], headings[-2:]


def test_parameters_cell_holds_only_literals(notebook):
    path, nb = notebook
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    for line in _source(tagged[0]).splitlines():  # papermill's parser counts every "="
        assert line.count("=") <= 1, f"{path.name}: papermill cannot parse {line!r}"
    tree = ast.parse(_source(tagged[0]))
    names = {}
    for node in tree.body:
        assert isinstance(node, ast.Assign), f"{path.name}: only assignments in parameters"
        names[node.targets[0].id] = ast.literal_eval(node.value)  # raises if derived
    assert isinstance(names.get("SMOKE_TEST"), bool) and names["SMOKE_TEST"] is False
    assert isinstance(names.get("SIMULATED_REPLICAS"), int) and names["SIMULATED_REPLICAS"] >= 1


def test_badges_match_the_file_path(notebook):
    path, nb = notebook
    badge = _source(nb["cells"][1])
    assert badge.startswith(sync_notebooks.BADGE_MARKER)
    links = re.findall(r"\]\((https://[^)]+)\)", badge)
    targets = [link for link in links if "badge" not in link and "svg" not in link]
    assert len(targets) == 3
    for link in targets:
        assert link.endswith(f"/notebooks/{path.name}"), link
    cfg = notebook_files.settings()
    assert all(cfg["github"] in link for link in targets)


def test_setup_cell_follows_parameters(notebook):
    path, nb = notebook
    cells = nb["cells"]
    index = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    setup = _source(cells[index + 1])
    assert setup.startswith(sync_notebooks.SETUP_MARKER)
    assert notebook_files.settings()["release"] in setup


def test_sync_is_idempotent_and_repairs_a_tampered_badge():
    cfg = notebook_files.settings()
    path = PATHS[0]
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][1]["source"] = [sync_notebooks.BADGE_MARKER + "\n[old](https://example.com)"]
    repaired = sync_notebooks.sync_notebook(nb, path.name, cfg)
    assert notebook_files.dumps(repaired) == path.read_text(encoding="utf-8")


def _parameters(nb: dict) -> dict:
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    tree = ast.parse(_source(cell))
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body}


def test_smoke_values_are_parameters_and_the_lesson_never_branches_on_the_mode(notebook):
    # One rule for the quick version: it is the same lesson with smaller parameters (the smoke
    # table of notebooks/manifest.toml), so a value passed with -p always takes effect.
    path, nb = notebook
    smoke = manifest.load()[path.stem].get("smoke", {})
    params = _parameters(nb)
    assert set(smoke) <= set(params), f"{path.name}: smoke values that are no parameter"
    for name, value in smoke.items():
        assert type(value) is type(params[name]) or params[name] is None, (path.name, name)
    for cell in nb["cells"][1:]:
        if cell["cell_type"] != "code" or "parameters" in cell["metadata"].get("tags", []):
            continue
        for node in ast.walk(ast.parse(_source(cell))):
            if isinstance(node, ast.Name) and node.id == "SMOKE_TEST":
                assert isinstance(node.ctx, ast.Load)
        for node in ast.walk(ast.parse(_source(cell))):
            if isinstance(node, (ast.If, ast.IfExp, ast.BoolOp, ast.Compare)):
                names = {
                    n.id
                    for n in ast.walk(node.test if hasattr(node, "test") else node)
                    if isinstance(n, ast.Name)
                }
                assert "SMOKE_TEST" not in names, (
                    f"{path.name}: a lesson cell branches on SMOKE_TEST"
                )


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names a cell defines (assigned, imported, def, class) and names it reads."""
    defined, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return defined, read


def test_nothing_after_an_aside_needs_its_code(notebook):
    """A reader may skip a folded aside (Shift+Enter passes over it in JupyterLab): a name the
    lesson reads later must not be defined only inside an aside."""
    path, nb = notebook
    outside, only_in_aside, needs = set(), set(), []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        text = "\n".join(
            line for line in _source(cell).splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        defined, read = _names(ast.parse(text))
        if "aside" in cell["metadata"].get("tags", []):
            only_in_aside |= defined - outside
            continue
        needs += sorted((read - defined) & only_in_aside)
        outside |= defined
        only_in_aside -= defined
    assert not needs, f"{path.name}: cells after an aside read {needs}, defined only in the aside"


def test_every_block_that_only_some_runtimes_take_declares_where_it_runs(notebook):
    # An `if` on where the lesson runs (REPLICAS, ON_TPU, ...: tools/runner/blocks.py) opens with
    # runs_on(...), so the runner can fail a run on a place the block is written for where it
    # did not run (tests/test_runner.py plants one).
    from runner import blocks

    path, nb = notebook
    undeclared = [
        f"cell {cell}, line {line}: if {condition}"
        for cell, line, condition, places in blocks.conditional_blocks(nb)
        if places is None
    ]
    assert not undeclared, f"{path.name}: blocks without runs_on(...): {undeclared}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_saving_a_notebook_untouched_in_jupyterlab_changes_no_byte(path, tmp_path):
    """JupyterLab saves through jupyter_server's contents manager, which writes nbformat's
    canonical form: a stored notebook in any other form (a source kept as one string, say)
    would be rewritten by a reader who only opened and saved it."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    contents = FileContentsManager(root_dir=str(tmp_path))
    opened = contents.get(path.name, content=True, type="notebook")
    contents.save({"type": "notebook", "format": "json", "content": opened["content"]}, path.name)
    assert copy.read_bytes() == path.read_bytes()
