"""tools/script_parts.py: the parts of train_tpu.py, and the lesson cells make sync writes from them."""

from __future__ import annotations

import ast
import copy
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import notebook_files  # noqa: E402
import script_parts  # noqa: E402
import sync_notebooks as sync  # noqa: E402

PARTS = script_parts.parts()
EXPECTED = (
    "imports", "connect", "data", "records", "pipeline", "model", "step", "evaluation",
    "checkpoint", "fit", "main",
)  # fmt: skip
SCRIPT = """\
import os
# ---- part: first ----
A = 1
# ---- end of part ----

# ---- part: second ----
def f():
    return A
# ---- end of part ----
"""


def _code_cell(text, tags=None):
    return {
        "cell_type": "code",
        "metadata": {"tags": tags} if tags else {},
        "source": text,
        "outputs": [],
        "execution_count": None,
    }


def test_the_script_has_every_part_in_reading_order():
    assert tuple(PARTS) == EXPECTED


@pytest.mark.parametrize("name", [p for p in EXPECTED if p != "imports"])
def test_a_part_only_defines(name):
    """Pasted into a cell, a part defines names and runs nothing (imports set the environment)."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign)
    for node in ast.parse(PARTS[name]).body:
        assert isinstance(node, allowed), (name, ast.unparse(node)[:80])
        if isinstance(node, ast.Assign):  # constants: no call runs at import
            assert not any(isinstance(n, ast.Call) for n in ast.walk(node.value)), name


def test_the_parts_in_order_define_what_main_uses():
    namespace: dict = {}
    exec(compile("\n\n".join(PARTS.values()), "parts", "exec"), namespace)
    script = ast.parse(script_parts.SCRIPT.read_text(encoding="utf-8"))
    main = next(n for n in script.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    called = {
        n.func.id
        for n in ast.walk(main)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    called &= {n.name for n in script.body if isinstance(n, ast.FunctionDef)}
    outside = {"parse_args"}  # the command line, not a lesson's code
    assert called - outside <= set(namespace), called - outside - set(namespace)


def test_parts_are_read_between_their_markers():
    assert script_parts.parts(SCRIPT) == {"first": "A = 1", "second": "def f():\n    return A"}


@pytest.mark.parametrize(
    "text, message",
    [
        (SCRIPT + "# ---- part: first ----\nB = 2\n# ---- end of part ----\n", "marked twice"),
        ("# ---- part: first ----\nA = 1\n", "has no"),
        ("A = 1\n# ---- end of part ----\n", "does not close or open"),
        ("# ---- part: a ----\n# ---- part: b ----\n", "does not close or open"),
    ],
)
def test_broken_markers_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        script_parts.parts(text)


def test_a_tagged_cell_is_written_from_the_script():
    parts = script_parts.parts(SCRIPT)
    notebook = {"cells": [_code_cell("old code", ["script-part:second"]), _code_cell("mine")]}
    script_parts.sync_cells(notebook, parts)
    written = notebook_files.source(notebook["cells"][0])
    assert written == '# From train_tpu.py, part "second" (make sync writes this cell).\n' + (
        "def f():\n    return A"
    )
    assert notebook_files.source(notebook["cells"][1]) == "mine"
    assert script_parts.shown([notebook]) == {"second"}


def test_an_unknown_part_is_reported_and_left_alone():
    notebook = {"cells": [_code_cell("x = 1", ["guard", "script-part:thrid"])]}
    script_parts.sync_cells(notebook, script_parts.parts(SCRIPT))
    assert notebook_files.source(notebook["cells"][0]) == "x = 1"
    (problem,) = script_parts.unknown_tags(notebook, "04_x.ipynb", script_parts.parts(SCRIPT))
    assert "cell 0" in problem and "script-part:thrid" in problem and "first, second" in problem


def test_a_stale_cell_makes_the_lesson_out_of_date():
    """What `make lint` runs: sync_notebook rewrites the cell, so the stored file differs."""
    path = next(p for p in notebook_files.notebook_paths() if p.name.startswith("04_"))
    notebook = notebook_files.read(path)
    notebook["cells"].insert(7, _code_cell("def connect(): ...", ["script-part:connect"]))
    stored = copy.deepcopy(notebook)
    synced = sync.sync_notebook(notebook, path.name, sync.settings(), parts=PARTS)
    cell = next(c for c in synced["cells"] if script_parts.tagged(c) == "connect")
    assert notebook_files.source(cell) == script_parts.cell_source("connect", PARTS["connect"])
    assert notebook_files.dumps(synced) != notebook_files.dumps(stored)


def test_coverage_requires_every_part_not_listed_as_pending():
    parts = script_parts.parts(SCRIPT)
    assert script_parts.coverage(parts, {"first", "second"}, pending=()) == ([], [])
    errors, warnings = script_parts.coverage(parts, {"first"}, pending=())
    assert errors == ["train_tpu.py parts shown in no lesson: second"] and not warnings
    errors, warnings = script_parts.coverage(parts, {"first"}, pending=("second",))
    assert not errors and "second" in warnings[0]


def test_the_pending_list_only_shrinks():
    parts = script_parts.parts(SCRIPT)
    errors, _ = script_parts.coverage(parts, {"first", "second"}, pending=("second",))
    assert errors == [
        "a lesson shows second: remove it from NOT_YET_SHOWN in tools/script_parts.py"
    ]
    errors, _ = script_parts.coverage(parts, {"first", "second"}, pending=("third",))
    assert errors == ["NOT_YET_SHOWN names parts train_tpu.py lacks: third"]


def test_the_lessons_agree_with_the_pending_list():
    notebooks = [notebook_files.read(p) for p in notebook_files.notebook_paths()]
    errors, _ = script_parts.coverage(PARTS, script_parts.shown(notebooks))
    assert errors == []
