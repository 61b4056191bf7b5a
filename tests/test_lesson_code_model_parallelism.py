"""Notebook 07_model_parallelism writes a topology and a device assignment in plain ``tf.tpu.experimental`` calls;
``tpucheck.topology`` builds the same objects for the rest of the lesson.

Each test runs the lesson's cell as stored and compares its result with the helper's.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from test_topology import assignment_table

from tpucheck import topology as T
from tpucheck.tpu_facts import GENERATIONS

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_model_parallelism.ipynb"
TOPOLOGY_CELL = "f0008d9e"  # the v3-8 topology written by hand
ASSIGNMENT_CELL = "8adac811"  # DeviceAssignment.build for 2 logical devices on the v5e-8


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def run_cell(cell_id: str, namespace: dict) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = "".join(next(c for c in cells if c["id"] == cell_id)["source"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(source, namespace)
    return printed.getvalue()


def test_the_lessons_v3_8_topology_is_the_helpers(tf):
    lesson = {"tf": tf, "np": np, "GENERATIONS": GENERATIONS}
    run_cell(TOPOLOGY_CELL, lesson)
    assert T.same_layout(lesson["v3_8"], T.build_topology("v3-8"))


def test_the_lessons_device_assignment_is_the_helpers(tf):
    topology = T.build_topology("v5e-8")
    lesson = {"tf": tf, "topologies": {"v5e-8": topology}}
    printed = run_cell(ASSIGNMENT_CELL, lesson)
    helper = T.build_assignment(topology, 2)
    assert np.array_equal(lesson["pairs"].core_assignment, helper.core_assignment)
    rows = printed.splitlines()[1:]  # after the header: one row per (replica, logical device)
    table = assignment_table(helper)
    assert len(rows) == len(table) == 8
    for row, expected in zip(rows, table, strict=True):
        assert row.split()[:2] == [str(expected["replica"]), str(expected["logical_device"])]
        assert row.endswith(f"TPU:{expected['tpu_device']}")
        assert str(expected["coordinates"]) in row
