"""Notebook 04's replica-equivalence check, written as plain lines, and the helper that packages it.

The lesson ends with the check a learner pastes into a script (cells ``weights-after`` and
``replica-check``: the same initial weights trained on the same batches on N replicas and on one
device, then compared) and with the classic bug it catches (cell ``9cebb1ff``). This test runs
those cells, as stored, on 8 simulated replicas beside ``loops.check_replica_equivalence`` on
the same model and data: both see the same largest update, both pass the correct step, and both
reject the per-replica mean.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import _run_python

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "04_custom_training_loops.ipynb"
CELL_IDS = ("weights-after", "replica-check", "9cebb1ff")

SCRIPT = """
import json
import types
import keras
import numpy as np
import tensorflow as tf
import helpers
from helpers import data, loops, models

strategy = helpers.connect(8)
images = data.load_images("digits")
GLOBAL_BATCH = 64


def make_model():
    return models.build_classifier(images.image_shape, hidden=128, l2=1e-4, seed=0)


lesson = dict(
    tf=tf, keras=keras, np=np, strategy=strategy, images=images, GLOBAL_BATCH=GLOBAL_BATCH,
    REPLICAS=8, make_model=make_model, results=types.SimpleNamespace(record=lambda **_: None),
    per_example_loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
)
for cell in CELLS:
    exec(cell, lesson)  # defines weights_after and compare, runs the check and the bug

report = loops.check_replica_equivalence(
    strategy, make_model, images.x_train, images.y_train, GLOBAL_BATCH, steps=3
)


def buggy_steps(strategy_, model_, optimizer_, global_batch_size):
    return loops.make_train_steps(
        strategy_, model_, optimizer_, global_batch_size, average_loss=lesson["per_replica_mean"]
    )


buggy = loops.check_replica_equivalence(
    strategy, make_model, images.x_train, images.y_train, GLOBAL_BATCH, steps=3,
    make_steps=buggy_steps,
)
print("RESULT" + json.dumps(dict(
    lesson=[lesson["diff"], lesson["update"]], helper=[report.max_weight_diff, report.max_update],
    helper_ok=report.ok, bug=[lesson["bug_diff"], lesson["bug_update"]], helper_bug_ok=buggy.ok,
)))
"""


def test_notebook_04s_pasteable_check_and_loops_check_replica_equivalence_agree():
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    stored = ["".join(next(c for c in cells if c["id"] == i)["source"]) for i in CELL_IDS]
    assert "OneDeviceStrategy" in stored[1] and "def weights_after" in stored[0]
    out = _run_python(f"CELLS = {stored!r}\n" + SCRIPT).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    diff, update = result["lesson"]
    helper_diff, helper_update = result["helper"]
    assert update > 1e-3  # the steps trained
    assert abs(update - helper_update) <= 1e-4 * helper_update, result  # the same training
    assert diff <= 1e-3 * update and helper_diff <= 1e-3 * helper_update and result["helper_ok"]
    bug_diff, bug_update = result["bug"]
    assert bug_diff > 1e-3 * bug_update and not result["helper_bug_ok"], result
