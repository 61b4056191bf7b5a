"""helpers.loops: the script's step run many per call, and the replica-equivalence check.

The checks that need a simulated TPU run once, in a fresh process with 8 logical CPU devices
(TensorFlow fixes its devices when it starts), and report what they saw as JSON; each test then
asserts on its part. Argument checks that fail before TensorFlow runs are tested in-process.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import _run_python

from helpers import loops

SCENARIOS = r"""
import json
import numpy as np
import helpers
strategy = helpers.connect(8)
import keras
import tensorflow as tf
from helpers import loops, models

rng = np.random.default_rng(0)
x = rng.random((256, 8, 8, 1), dtype=np.float32)
y = rng.integers(0, 10, 256).astype(np.int32)
GB = 64
out = {}

def model(l2=0.0, dropout=0.0):
    return models.build_classifier((8, 8, 1), hidden=32, l2=l2, dropout=dropout, seed=0)

def report(name, **kw):
    r = loops.check_replica_equivalence(strategy, lambda: model(l2=1e-2), x, y, GB, **kw)
    out[name] = dict(ok=r.ok, diff=r.max_weight_diff, update=r.max_update, tol=r.tolerance,
                     losses=list(r.losses), replicas=[r.replicas, r.reference_replicas],
                     variables=len(r.per_variable))
    try:
        out[name]["check"] = r.check() is r
    except loops.ReplicaMismatchError as err:
        out[name]["check"] = str(err)

report("correct")
per_replica_mean = lambda per_example, batch: tf.reduce_mean(per_example)
def per_replica_mean_step(model_, optimizer):  # each replica divides by its own batch: wrong
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = per_replica_mean(lossf(labels, model_(images, training=True)), None)
        grads = tape.gradient(loss, model_.trainable_variables)
        optimizer.apply_gradients(zip(grads, model_.trainable_variables))
        return loss
    return step

report("per_replica_mean", make_step=per_replica_mean_step)

def unscaled_regularisation(strategy_, model_, optimizer, batch):
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            per_example = lossf(labels, model_(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            loss += tf.add_n(model_.losses)  # not divided by the replica count
        grads = tape.gradient(loss, model_.trainable_variables)
        optimizer.apply_gradients(zip(grads, model_.trainable_variables))
        return loss
    return loops._many_steps(strategy_, replica_step)

report("unscaled_regularisation", make_steps=unscaled_regularisation)

# A step as TensorFlow's TPU guide writes it: step_fn(inputs) unpacks the batch, returns nothing.
def official(average):
    def make_step(model_, optimizer):
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        def step_fn(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                loss = average(lossf(labels, model_(images, training=True)))
                if model_.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model_.losses))
            grads = tape.gradient(loss, model_.trainable_variables)
            optimizer.apply_gradients(list(zip(grads, model_.trainable_variables)))
        return step_fn
    return make_step

report("official_step", make_step=official(tf.nn.compute_average_loss))
report("official_step_mean", make_step=official(tf.reduce_mean))

def error(fn):
    try:
        fn()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None

out["dropout"] = error(lambda: loops.check_replica_equivalence(
    strategy, lambda: model(dropout=0.5), x, y, GB))

# Steps per call: one call of 3 steps == a call of 1 step and a call of 2, on the same data.
def trained(calls):
    with strategy.scope():
        m = model()
        opt = keras.optimizers.Adam(1e-2)
    loops.build_optimizer(strategy, opt, m)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GB, drop_remainder=True)
    it = iter(strategy.experimental_distribute_dataset(ds))
    steps = loops.make_train_steps(strategy, m, opt, GB)
    losses = [float(steps(it, n)) for n in calls]
    return m.get_weights(), losses, steps.function.experimental_get_tracing_count()
w3, (l3,), _ = trained([3])
w12, (l1, l2), traces = trained([1, 2])
out["steps_per_call"] = dict(
    diff=max(float(np.abs(a - b).max()) for a, b in zip(w3, w12)),
    mean_loss=[l3, (l1 + 2 * l2) / 3],
    traces=traces,
)

print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def seen():
    """Run every scenario in one fresh process with an 8-replica simulated TPU."""
    proc = _run_python(SCENARIOS, timeout=600, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"scenarios failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return {**json.loads(lines[-1][len("RESULT") :]), "stderr": proc.stderr}


def test_many_training_steps_built_on_purpose_raise_no_retracing_alarm(seen):
    # The scenarios build a dozen training steps, each traced once. TensorFlow counts traces per
    # source line, not per function, and would warn of "retracing" that never happens.
    assert "triggered tf.function retracing" not in seen["stderr"]


def test_correct_step_gives_the_same_weights_on_8_replicas_and_1(seen):
    r = seen["correct"]
    assert r["replicas"] == [8, 1]
    assert r["update"] > 0
    assert r["diff"] <= r["tol"] and r["ok"]
    assert r["check"] is True
    assert r["losses"][0] == pytest.approx(r["losses"][1], rel=1e-4)
    assert r["variables"] == 4  # two kernels, two biases: every variable was compared


def test_per_replica_mean_is_caught(seen):
    r = seen["per_replica_mean"]
    assert not r["ok"] and r["diff"] > r["tol"]
    assert "compute_average_loss" in r["check"] and "differ between 8 replicas and 1" in r["check"]
    # Each replica divides by its own batch, 8 times smaller, so the summed data loss is 8 times
    # too large (the diverging weights keep it from exactly 8x).
    assert r["losses"][0] > 4 * r["losses"][1]


def test_step_written_as_the_official_examples_write_it_is_proven(seen):
    # One argument unpacked inside, no loss returned (the losses are then NaN), as in the TPU guide.
    right, wrong = seen["official_step"], seen["official_step_mean"]
    assert right["ok"] and right["check"] is True and right["update"] > 0
    assert all(loss != loss for loss in right["losses"])  # NaN: the step returns no loss
    assert not wrong["ok"] and "compute_average_loss" in wrong["check"]


def test_unscaled_regularisation_is_caught(seen):
    r = seen["unscaled_regularisation"]
    assert not r["ok"]
    assert "scale_regularization_loss" in r["check"]


def test_check_refuses_what_cannot_prove_anything(seen):
    assert seen["dropout"].startswith("ValueError") and "dropout" in seen["dropout"]
    with pytest.raises(ValueError, match="nothing to compare"):
        loops.check_replica_equivalence(ONE, None, [0] * 256, [0] * 256, 64)
    unchanged = [np.zeros(2)]  # a run whose weights did not move proves nothing
    with pytest.raises(ValueError, match="no weight changed"):
        loops.compare_runs((8, 1), 3, ["w"], unchanged, (unchanged, unchanged), (0.0, 0.0), 1e-3)


def test_steps_per_call_change_nothing_but_the_calls(seen):
    r = seen["steps_per_call"]
    assert r["diff"] < 1e-5
    assert r["mean_loss"][0] == pytest.approx(r["mean_loss"][1], rel=1e-5)
    assert r["traces"] == 1  # steps=1 then steps=2: the same trace


# Argument checks that run before any TensorFlow code.
EIGHT, ONE = SimpleNamespace(num_replicas_in_sync=8), SimpleNamespace(num_replicas_in_sync=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 0}, "steps must be a positive integer"),
        ({"rtol": 0.0}, "rtol must be positive"),
        ({"global_batch_size": 60}, "does not split over 8 replicas"),
        ({"global_batch_size": 64, "steps": 5}, "need 320 rows; got 256"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = {"global_batch_size": 64, **kwargs}
    with pytest.raises(ValueError, match=message):
        loops.check_replica_equivalence(EIGHT, None, [0] * 256, [0] * 256, **args)


def _equivalence(diff, update=0.5, rtol=1e-3):
    return loops.Equivalence(
        replicas=8,
        reference_replicas=1,
        steps=3,
        max_weight_diff=diff,
        max_update=update,
        rtol=rtol,
        losses=(2.0, 2.0),
        per_variable={"hidden/kernel": diff, "logits/bias": diff / 2},
    )


def test_equivalence_verdict_follows_the_tolerance():
    update, rtol = 0.5, 1e-3
    inside, outside = _equivalence(rtol * update / 2), _equivalence(rtol * update * 2)
    assert inside.ok and inside.check() is inside and "same weights" in str(inside)
    assert not outside.ok and "DIFFERENT" in str(outside)
    with pytest.raises(loops.ReplicaMismatchError, match="in hidden/kernel"):
        outside.check()
