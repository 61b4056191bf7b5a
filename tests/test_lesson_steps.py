"""A step a lesson writes by hand and the helper that packages it are the same computation.

Notebook 04 writes its training step line by line (cell ``9f548b33``), then trains with
``helpers.loops.make_train_steps``, saying it is "the step we just wrote, packaged". This test
runs the lesson's own cell, as stored, and the helper from the same weights on the same batches
on 8 replicas, and requires the same weights and the same metric afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import _run_python

ROOT = Path(__file__).resolve().parent.parent
LESSON_STEP = ("04_custom_training_loops.ipynb", "9f548b33")

SCRIPT = """
import json
import keras
import numpy as np
import tensorflow as tf
import helpers
from helpers import data, loops, models

strategy = helpers.connect(8)
images = data.load_images("digits")
GLOBAL_BATCH = 64
ds = data.make_dataset(images.x_train, images.y_train, GLOBAL_BATCH, replicas=8, training=False)

def fresh():
    with strategy.scope():
        model = models.build_classifier(images.image_shape, hidden=128, l2=1e-4, seed=0)
        optimizer = keras.optimizers.Adam(3e-3)
        accuracy = keras.metrics.SparseCategoricalAccuracy()
    loops.build_optimizer(strategy, optimizer, model)
    return model, optimizer, accuracy

model, optimizer, train_accuracy = fresh()
lesson = dict(tf=tf, keras=keras, strategy=strategy, GLOBAL_BATCH=GLOBAL_BATCH, model=model,
              optimizer=optimizer, train_accuracy=train_accuracy)
exec(CELL, lesson)  # defines replica_step and train_step, as the lesson does
batches = iter(strategy.experimental_distribute_dataset(ds))
for _ in range(STEPS):
    lesson["train_step"](next(batches))

packaged, packaged_optimizer, packaged_accuracy = fresh()
train_steps = loops.make_train_steps(
    strategy, packaged, packaged_optimizer, GLOBAL_BATCH, metrics=[packaged_accuracy]
)
train_steps(iter(strategy.experimental_distribute_dataset(ds)), STEPS)
moved = max(float(np.abs(a - b).max()) for a, b in zip(fresh()[0].get_weights(), model.get_weights()))
apart = max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), packaged.get_weights()))
print("RESULT" + json.dumps(dict(moved=moved, apart=apart,
      accuracy=[float(train_accuracy.result()), float(packaged_accuracy.result())])))
"""


def test_notebook_04s_step_and_loops_make_train_steps_train_alike():
    name, cell_id = LESSON_STEP
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    cell = "".join(next(c for c in cells if c["id"] == cell_id)["source"])
    assert "def replica_step" in cell and "def train_step" in cell
    code = f"CELL = {cell!r}\nSTEPS = 3\n" + SCRIPT
    out = _run_python(code).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["moved"] > 1e-3  # the steps trained
    assert result["apart"] <= 1e-6 * result["moved"] + 1e-7, result
    first, second = result["accuracy"]
    assert abs(first - second) < 1e-6
