"""Notebook 08's code and the helpers that run it are the same code.

- The restore (cell ``restore-latest``) and the restartable custom loop (cell ``resume-loop``)
  are the functions the killed training program runs (``helpers/_programs/resume_loop.py``):
  each pair must parse to the same syntax tree (comments and formatting may differ, nothing else).
- The ``BackupAndRestore`` callback the lesson builds (cell ``backup-callback``) is the one
  ``checkpoints.fit_backup_callbacks`` gives the ``fit`` program: same folder, same settings.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helpers import checkpoints

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "08_checkpoints_and_preemption.ipynb"


def _cell(cell_id: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return "".join(next(c for c in cells if c.get("id") == cell_id)["source"])


def _function(source: str, name: str) -> str:
    tree = ast.parse(source)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{name} defined {len(found)} times"
    return ast.dump(found[0], include_attributes=False)


def test_the_killed_program_runs_the_lessons_resume_loop():
    program = (ROOT / "helpers" / "_programs" / "resume_loop.py").read_text()
    restore = _cell("restore-latest")
    assert "tf.train.CheckpointManager" in restore and "assert_consumed()" in restore
    for cell_id, name in (("restore-latest", "restore_latest"), ("resume-loop", "train_resumable")):
        assert _function(_cell(cell_id), name) == _function(program, name), (
            f"notebook 08's cell {cell_id} and {name} in helpers/_programs/resume_loop.py "
            "differ: edit both"
        )
    preemptible = (ROOT / "helpers" / "_programs" / "preemptible.py").read_text()
    assert "from helpers._programs.resume_loop import train_resumable" in preemptible


def test_fit_backup_callbacks_give_the_lessons_backup_and_restore(tmp_path):
    keras = pytest.importorskip("keras")
    lesson = {"keras": keras, "WORK": tmp_path}
    exec(_cell("backup-callback"), lesson)  # defines backup_dir and backup, as the lesson does
    shown = lesson["backup"]
    given, check = checkpoints.fit_backup_callbacks(lesson["backup_dir"], steps_per_epoch=4)
    assert type(given) is type(shown) is keras.callbacks.BackupAndRestore
    settings = ("backup_dir", "save_freq", "double_checkpoint", "delete_checkpoint")
    assert {k: getattr(given, k) for k in settings} == {k: getattr(shown, k) for k in settings}
    assert isinstance(check, keras.callbacks.Callback)
