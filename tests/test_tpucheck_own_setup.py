"""tpucheck.readiness on a user's own small training setup, written here: no lesson, no helpers.

A fresh process builds what a user of TensorFlow on a TPU writes (arrays, a ``tf.data``
pipeline, a Keras model, a custom step for ``strategy.run``) and checks it with
``readiness.check`` as the package's docstring says, planning for a v5e-8's 8 replicas: a first
draft with two classic mistakes (the check reads the rest of the step once the optimizer is
built), a second with a third, then the setup fixed. The process never imports the lessons'
``helpers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

OWN_SETUP = """
import json
import sys

import keras
import numpy as np
import tensorflow as tf

from tpucheck import readiness

rng = np.random.default_rng(0)
x = rng.random((5000, 32), dtype=np.float32)
y = rng.integers(0, 4, 5000).astype(np.int32)
GLOBAL_BATCH = 1024  # 128 per replica on 8

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, "relu"), keras.layers.Dense(4)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def make_step(optimizer, draft):
    def step(features, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        if draft:
            tf.print("loss", loss)  # every step, on the host
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def built_adam():
    adam = keras.optimizers.Adam()
    adam.build(model.trainable_variables)
    return adam


# The draft: a last, smaller batch each pass and Adam not built; then the same with Adam built,
# which lets the check read the rest of the step: tf.print in it.
draft = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(5000).batch(GLOBAL_BATCH)
report = readiness.check(draft, model, step=make_step(keras.optimizers.Adam(), True), replicas=8)
found = {f.code: f.severity for f in report.findings}
second = readiness.check(draft, model, step=make_step(built_adam(), True), replicas=8)

# Fixed: static batches, prefetched; no print; the optimizer built before training.
fixed = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(5000).repeat()
fixed = fixed.batch(GLOBAL_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
clean = readiness.check(fixed, model, step=make_step(built_adam(), False), replicas=8)
print("RESULT" + json.dumps({
    "draft": found,
    "draft_clean": report.clean,
    "draft_skipped": report.skipped,
    "second": {f.code: f.severity for f in second.findings},
    "clean": clean.clean,
    "clean_complete": clean.complete,
    "clean_codes": sorted(clean.codes),
    "summary": clean.summary(),
    "checked": clean.checked,
    "helpers_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "helpers"),
}))
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OWN_SETUP)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path_factory.mktemp("own"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


def test_the_drafts_get_each_of_their_mistakes_named(result):
    draft = result["draft"]
    assert not result["draft_clean"]
    assert draft["dynamic-batch"] == "warning"  # 5000 examples: a batch of 904 ends each pass
    assert draft["optimizer-not-built"] == "warning"  # fails on 2+ replicas of MirroredStrategy
    assert draft["no-prefetch"] == "note"
    assert any("create or build them first" in s for s in result["draft_skipped"])
    assert result["second"]["print-in-step"] == "warning"
    assert "optimizer-not-built" not in result["second"]


def test_the_fixed_setup_is_clean_with_notes_only(result):
    assert result["clean"] and result["clean_complete"], result["summary"]
    # What a trace cannot settle (the loss scaling) and the padding of its 32 inputs, 4 outputs.
    assert set(result["clean_codes"]) == {"replica-equivalence", "tile-padding"}
    assert {"dataset", "batch split", "step trace", "XLA ops", "XLA compile"} <= set(
        result["checked"]
    )
    assert result["summary"].startswith("TPU readiness: clean, no problems found")


def test_the_check_never_imports_the_lessons_helpers(result):
    assert result["helpers_loaded"] == []
