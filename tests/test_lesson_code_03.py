"""Notebook 03 writes its TPU code in plain TensorFlow; the helpers it names run the same code.

The lesson's cells, as stored, are executed in one child process (8 simulated replicas) beside
the helpers later lessons call:

- the static-shape pipeline (``make_dataset`` in the lesson) and ``helpers.data.make_dataset``:
  the same ``element_spec`` and the same batches for a fixed seed, for training and validation;
- the learning-rate arithmetic and ``fitting.scaled_learning_rate(rule="sqrt")``;
- the strategy-aware ``steps_per_execution`` and whole-call epoch, and
  ``fitting.steps_per_execution_for`` / ``fitting.whole_executions``, on 8 replicas, on the
  default strategy and on one device.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import _run_python

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "03_keras_compile_and_fit.ipynb"
PIPELINE, LEARNING_RATE, STEPS = "static-pipeline", "18cb7304", "1f20a0b0"

SCRIPT = """
import json
import types
import numpy as np
import tensorflow as tf
import helpers
from helpers import data, fitting

strategy = helpers.connect(8)
rng = np.random.default_rng(0)
images = types.SimpleNamespace(
    x_train=rng.random((300, 28, 28), dtype=np.float32), y_train=rng.integers(0, 10, 300),
    x_test=rng.random((100, 28, 28), dtype=np.float32), y_test=rng.integers(0, 10, 100),
)
out = {}

lesson = dict(tf=tf, images=images, global_batch=32)
exec(CELLS["pipeline"], lesson)
same = []
for ds, training, x, y in ((lesson["train_ds"], True, images.x_train, images.y_train),
                           (lesson["val_ds"], False, images.x_test, images.y_test)):
    helper = data.make_dataset(x, y, 32, replicas=1, training=training)
    spec_same = ds.element_spec == helper.element_spec
    mine = [b for b in ds.take(12).as_numpy_iterator()]  # 12 > 300 // 32: into the second pass
    theirs = [b for b in helper.take(12).as_numpy_iterator()]
    batches_same = len(mine) == len(theirs) and all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(mine, theirs)
    )
    same.append([spec_same, batches_same, len(mine)])
out["pipeline"] = same

rates = []
for global_batch in (128, 1024, 64):
    lesson = dict(global_batch=global_batch, BASE_BATCH=128, BASE_LEARNING_RATE=2e-3)
    exec(CELLS["learning_rate"], lesson)
    rates.append([lesson["learning_rate"],
                  fitting.scaled_learning_rate(2e-3, global_batch, base_batch=128, rule="sqrt")])
out["rates"] = rates

steps = []
for s in (strategy, tf.distribute.get_strategy(), tf.distribute.OneDeviceStrategy("/cpu:0")):
    for passes in (58, 7, 468):
        lesson = dict(tf=tf, strategy=s, STEPS_PER_EXECUTION=32, batches_per_pass=passes,
                      REPLICAS=s.num_replicas_in_sync)
        exec(CELLS["steps"], lesson)
        wanted = min(32, passes)
        value = fitting.steps_per_execution_for(s, wanted).value
        steps.append([lesson["steps_per_execution"], value, lesson["steps_per_epoch"],
                      fitting.whole_executions(passes, value)])
out["steps"] = steps
print("RESULT" + json.dumps(out))
"""


def _cell(cells: list[dict], cell_id: str) -> str:
    return "".join(next(c for c in cells if c["id"] == cell_id)["source"])


def test_notebook_03s_plain_code_and_the_helpers_agree():
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    stored = {
        "pipeline": _cell(cells, PIPELINE),
        "learning_rate": _cell(cells, LEARNING_RATE),
        "steps": _cell(cells, STEPS),
    }
    assert "drop_remainder=True" in stored["pipeline"] and ".prefetch(" in stored["pipeline"]
    assert "def choose_steps_per_execution" in stored["steps"]
    out = _run_python(f"CELLS = {stored!r}\n" + SCRIPT).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    for spec_same, batches_same, _count in result["pipeline"]:
        assert spec_same and batches_same, result["pipeline"]
    assert [c for *_, c in result["pipeline"]] == [12, 3]  # training repeats, validation ends
    for lesson, helper in result["rates"]:
        assert abs(lesson - helper) <= 1e-12 * helper
    assert [s[0] for s in result["steps"][:3]] == [1, 1, 1]  # 8 replicas, collective all-reduce
    assert [s[0] for s in result["steps"][3:]] == [32, 7, 32] * 2  # one replica: as wanted
    for lesson_value, helper_value, lesson_epoch, helper_epoch in result["steps"]:
        assert (lesson_value, lesson_epoch) == (helper_value, helper_epoch)
