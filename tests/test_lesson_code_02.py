"""Notebook 02 builds Adam's slot variables by hand (cell ``8f763da0``:
``optimizer.build(model.trainable_variables)`` inside ``strategy.scope()``) and says that
``helpers.loops.build_optimizer``, which later lessons call, is those two lines.

One fresh interpreter with 8 simulated replicas runs the stored cell, and the helper on a twin
model with the same weights; both optimizers must hold the same distributed slots, and the
lesson's own training step (cell ``77bcd414``) must move both pairs to the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import _run_python

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "02_building_in_strategy_scope.ipynb"
BUILD_CELL, STEP_CELL = "8f763da0", "77bcd414"

SCRIPT = """
import json
import keras
import numpy as np
import tensorflow as tf
import helpers
from helpers import data, loops, models

strategy = helpers.connect(8)
images = data.load_images("digits")
global_batch = 64
lesson = dict(tf=tf, keras=keras, strategy=strategy, models=models, images=images,
              global_batch=global_batch, print=lambda *a, **k: None)
exec(STEP_CELL, lesson)  # per_example_loss, make_step
exec(BUILD_CELL, lesson)  # build_model_and_optimizer(); model, adam
model, adam = lesson["model"], lesson["adam"]

with strategy.scope():
    twin = models.build_classifier(images.image_shape, name="twin")
    twin.set_weights(model.get_weights())
    twin_adam = loops.build_optimizer(strategy, keras.optimizers.Adam(1e-3), twin)


def slots(optimizer):
    return [[v.path.split("/")[-1], list(v.shape), type(v.value).__name__,
             len(strategy.experimental_local_results(v.value))] for v in optimizer.variables]


ds = data.make_dataset(images.x_train, images.y_train, global_batch, replicas=8, training=False)
batch = next(iter(strategy.experimental_distribute_dataset(ds)))
before = model.get_weights()
for pair in ((model, adam), (twin, twin_adam)):
    lesson["make_step"](strategy, *pair)(*batch)
moved = max(float(np.abs(a - b).max()) for a, b in zip(before, model.get_weights()))
apart = max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), twin.get_weights()))
print("RESULT" + json.dumps(dict(lesson=slots(adam), helper=slots(twin_adam), moved=moved,
                                 apart=apart)))
"""


def test_loops_build_optimizer_is_notebook_02s_build():
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    source = {c["id"]: "".join(c["source"]) for c in cells}
    build, step = source[BUILD_CELL], source[STEP_CELL]
    assert "optimizer.build(model.trainable_variables)" in build and "def make_step" in step
    code = f"BUILD_CELL = {build!r}\nSTEP_CELL = {step!r}\n" + SCRIPT
    result = json.loads(_run_python(code).stdout.split("RESULT", 1)[1])
    assert result["lesson"] == result["helper"]
    assert len(result["lesson"]) > 2  # Adam's slots exist before the first step
    assert all(copies == 8 for *_, copies in result["lesson"])
    assert result["moved"] > 1e-4  # the step trained
    assert result["apart"] <= 1e-6, result
