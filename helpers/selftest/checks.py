"""The correctness checks of the TPU self-test (notebook 00), one per lesson they come from.

Each is a short, real run of what a notebook teaches, with the evidence that it worked:
connect (01), variables on every replica (02), a few ``fit`` steps (03), a custom loop on N
replicas against one (04), a bfloat16 matmul (05) and a checkpoint restored onto one device (08).
The speed checks are in :mod:`helpers.selftest.speed`.
"""

from __future__ import annotations

import math
import time

import numpy as np

from helpers.selftest.base import Context, Outcome

# On a TPU, XLA's default precision multiplies float32 matrices in bfloat16 passes, so float32
# results there agree with a CPU's only to about bfloat16 precision (unverified on hardware).
TPU_FLOAT32_RTOL = 2e-2
TPU_FLOAT32_NOTE = (
    "tolerance widened on the TPU: XLA multiplies float32 matrices in bfloat16 passes by "
    "default (unverified on hardware)"
)


def _tolerance(context: Context, on_cpu: float) -> tuple[float, tuple[str, ...]]:
    if context.on_tpu:
        return TPU_FLOAT32_RTOL, (TPU_FLOAT32_NOTE,)
    return on_cpu, ()


def _max_difference(a_list, b_list) -> float:
    return max(
        float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(a_list, b_list, strict=True)
    )


def connect(context: Context) -> Outcome:
    """``helpers.connect`` gives the strategy this hardware should have (notebook 01)."""
    import helpers
    from helpers import runtime
    from helpers.strategy import SIMULATED_TPU

    start = time.perf_counter()
    strategy = helpers.connect(context.simulated_replicas)
    seconds = time.perf_counter() - start
    info = helpers.describe(strategy)
    context.strategy, context.kind = strategy, info.kind
    evidence = {
        "strategy": info.kind,
        "replicas": info.replicas,
        "first_device": info.devices[0] if info.devices else None,
        "last_device": info.devices[-1] if info.devices else None,
        "tpu_name": info.tpu,
        "seconds_to_connect": round(seconds, 3),
    }
    hints = runtime.tpu_hints()
    if hints and info.kind != "TPU":
        summary = f"TPU hardware present ({', '.join(hints)}) but the strategy is {info.kind}"
        return Outcome("fail", summary, evidence)
    if info.kind == SIMULATED_TPU and info.replicas != context.simulated_replicas:
        return Outcome(
            "fail",
            f"asked for {context.simulated_replicas} simulated replicas, got {info.replicas}",
            evidence,
        )
    return Outcome("pass", f"{info.kind} with {info.replicas} replica(s)", evidence)


def variables(context: Context) -> Outcome:
    """A variable made in ``strategy.scope()`` has one copy per replica, each on its own device,
    and ``strategy.run`` reaches every replica (notebook 02)."""
    import tensorflow as tf

    strategy = context.need_strategy()
    with strategy.scope():
        variable = tf.Variable(tf.range(4, dtype=tf.float32), name="self_test_variable")
    copies = strategy.experimental_local_results(variable)
    devices = [copy.device for copy in copies]
    values = [copy.numpy() for copy in copies]
    local = len(strategy.extended.worker_devices)

    @tf.function
    def replica_ids():
        return strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)

    ids = sorted(int(i) for i in strategy.experimental_local_results(replica_ids()))
    same = all(np.array_equal(v, values[0]) for v in values)
    evidence = {
        "copies": len(copies),
        "distinct_devices": len(set(devices)),
        "local_devices": local,
        "copies_equal": same,
        "replica_ids_seen": ids,
        "variable_type": type(variable).__name__,
    }
    ok = len(copies) == local and len(set(devices)) == local and same and len(set(ids)) == local
    summary = f"{len(copies)} copies on {len(set(devices))} devices, {len(ids)} replicas ran"
    return Outcome("pass" if ok else "fail", summary, evidence)


def fit(context: Context) -> Outcome:
    """A few ``fit`` steps on every replica: a finite, falling loss, and the loss ``evaluate``
    reports equals a one-device NumPy evaluation of the same weights (notebook 03)."""
    import keras

    from helpers import data, fitting, models

    strategy = context.need_strategy()
    images = context.images()
    replicas = context.replicas
    global_batch = 16 * replicas
    steps = context.size(6, 30)
    # At least three calls, so that the loss is logged three times (once per call).
    choice = fitting.steps_per_execution_for(strategy, steps // 3)
    with strategy.scope():
        model = models.build_classifier(images.image_shape, seed=11)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=choice.value,
        )
    losses = []  # Keras' running mean of the epoch's loss, after each call
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    train = data.make_dataset(images.x_train, images.y_train, global_batch, replicas=replicas)
    # One epoch: each new epoch costs a new distributed iterator, which is slow on many replicas.
    model.fit(train, epochs=1, steps_per_epoch=steps, callbacks=[record], verbose=0)
    n = len(images.x_test) // global_batch * global_batch
    x, y = images.x_test[:n], images.y_test[:n]
    test = data.make_dataset(x, y, global_batch, replicas=replicas, training=False)
    distributed = float(np.ravel(model.evaluate(test, verbose=0))[0])
    reference = fitting.single_device_evaluation(model, x, y)
    rtol, notes = _tolerance(context, 1e-4)
    gap = abs(distributed - reference.loss) / reference.loss
    evidence = {
        "running_mean_losses": [round(v, 5) for v in losses],
        "steps": steps,
        "global_batch": global_batch,
        "steps_per_execution": choice.value,
        "steps_per_execution_reason": choice.reason,
        "evaluate_loss": round(distributed, 6),
        "one_device_loss": round(reference.loss, 6),
        "loss_gap": gap,
        "loss_gap_tolerance": rtol,
    }
    if not losses or not all(math.isfinite(v) for v in losses):
        return Outcome("fail", f"the loss is not finite: {losses}", evidence, notes)
    if not losses[-1] < losses[0]:
        summary = f"the loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
        return Outcome("fail", summary, evidence, notes)
    if gap > rtol:
        summary = f"evaluate's loss differs from one device by {gap:.2g} (> {rtol:g})"
        return Outcome("fail", summary, evidence, notes)
    summary = (
        f"loss {losses[0]:.3f} at step 1, mean {losses[-1]:.3f} over {steps} steps; evaluate on "
        f"{replicas} replicas matches one device ({gap:.1g})"
    )
    return Outcome("pass", summary, evidence, notes)


def replica_equivalence(context: Context, *, make_steps=None) -> Outcome:
    """A custom ``strategy.run`` loop on every replica ends with the same weights as the same
    loop on one replica (notebook 04). ``make_steps`` replaces the loop under test."""
    from helpers import loops, models

    strategy = context.need_strategy()
    replicas = context.replicas
    if replicas == 1:
        return Outcome(
            "info",
            "one replica (e.g. a v5e-1): there is no second replica count to compare with",
            {"replicas": 1},
        )
    images = context.images()
    rtol, notes = _tolerance(context, 1e-3)
    result = loops.check_replica_equivalence(
        strategy,
        lambda: models.build_classifier(images.image_shape, seed=7),
        images.x_train,
        images.y_train,
        8 * replicas,
        steps=3,
        make_steps=make_steps or loops.make_train_steps,
        rtol=rtol,
    )
    evidence = {
        "replicas": result.replicas,
        "reference_replicas": result.reference_replicas,
        "steps": result.steps,
        "max_weight_difference": result.max_weight_diff,
        "tolerance": result.tolerance,
        "largest_update": result.max_update,
        "worst_variable": result.worst_variable,
        "mean_losses": [round(v, 6) for v in result.losses],
    }
    summary = (  # "same weights: 8 replicas vs 1, 3 steps" or "DIFFERENT weights: ..."
        f"{str(result).splitlines()[0]}; max difference {result.max_weight_diff:.2g} "
        f"(tolerance {result.tolerance:.2g})"
    )
    return Outcome("pass" if result.ok else "fail", summary, evidence, notes)


def bfloat16_matmul(context: Context) -> Outcome:
    """A matmul in bfloat16 on a replica gives bfloat16, as accurate as bfloat16 can be
    (notebook 05): relative error within bfloat16's epsilon, measured against float64."""
    import tensorflow as tf

    from helpers import precision

    strategy = context.need_strategy()
    n = 256
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))

    @tf.function
    def both(a, b):
        def replica(a, b):
            low = tf.matmul(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16))
            return low, tf.matmul(a, b)

        return strategy.run(replica, args=(a, b))

    low, high = (strategy.experimental_local_results(t)[0] for t in both(a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error(x):
        return float(
            np.linalg.norm(np.asarray(tf.cast(x, tf.float64)) - exact) / np.linalg.norm(exact)
        )

    epsilon = precision.FloatFormat("bfloat16", *precision.BITS["bfloat16"]).epsilon
    low_error, high_error = error(low), error(high)
    evidence = {
        "shape": [n, n],
        "output_dtype": low.dtype.name,
        "bfloat16_relative_error": low_error,
        "float32_relative_error": high_error,
        "bfloat16_epsilon": epsilon,
        "device": low.device,
    }
    rounded = low_error > epsilon / 64  # a bfloat16 path that secretly ran in float32 shows ~1e-7
    ok = low.dtype == tf.bfloat16 and low_error <= epsilon and rounded
    summary = (
        f"{low.dtype.name} output, relative error {low_error:.2g} "
        f"({low_error / epsilon:.2f} x bfloat16's epsilon; float32: {high_error:.2g})"
    )
    return Outcome("pass" if ok else "fail", summary, evidence)


def checkpoint(context: Context) -> Outcome:
    """Save a model that lives on the strategy, restore it into a model built with no strategy
    on one device: the same weights and the same outputs (notebook 08)."""
    import keras
    import tensorflow as tf

    from helpers import checkpoints, loops, models

    strategy = context.need_strategy()
    images = context.images()
    global_batch = 8 * context.replicas
    with strategy.scope():
        model = models.build_classifier(images.image_shape, seed=21)
        optimizer = keras.optimizers.Adam(1e-2)
    loops.build_optimizer(strategy, optimizer, model)
    rng = np.random.default_rng(21)
    for variable in model.trainable_variables:  # new values on every replica, as training makes
        variable.assign(variable + rng.normal(0, 0.1, variable.shape).astype(np.float32))
    _, manager = checkpoints.make_checkpoint(
        context.workdir / "checkpoint", model=model, optimizer=optimizer
    )
    path = manager.save()
    saved = model.get_weights()
    with tf.device("/cpu:0"):
        served = models.build_classifier(images.image_shape, seed=22)  # other initial weights
    before = _max_difference(served.get_weights(), saved)
    checkpoints.restore(tf.train.Checkpoint(model=served), path, partial=True)
    after = _max_difference(served.get_weights(), saved)
    x = images.x_test[:global_batch]
    expected = _replica_outputs(strategy, model, x, global_batch)
    with tf.device("/cpu:0"):
        got = np.asarray(served(x, training=False))
    output_gap = float(np.max(np.abs(got - expected)) / max(np.max(np.abs(expected)), 1e-12))
    rtol, notes = _tolerance(context, 1e-5)
    evidence = {
        "checkpoint": path,
        "weights_before_restore_max_difference": before,
        "weights_after_restore_max_difference": after,
        "output_relative_difference": output_gap,
        "output_tolerance": rtol,
        "restored_on": "/cpu:0, no strategy",
    }
    ok = before > 0 and after == 0 and output_gap <= rtol
    summary = (
        f"weights identical after restore on one device (were {before:.2g} apart), outputs "
        f"within {output_gap:.2g}"
    )
    return Outcome("pass" if ok else "fail", summary, evidence, notes)


def _replica_outputs(strategy, model, x, global_batch: int) -> np.ndarray:
    """The model's outputs for one global batch, computed by the replicas, in example order.

    Like ``loops.predict`` but collected on the host (``experimental_local_results``) instead
    of by ``strategy.gather``, whose first all-gather takes seconds on the simulated TPU.
    """
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(x).batch(global_batch, drop_remainder=True)

    @tf.function
    def outputs(batch):
        return strategy.run(lambda images: model(images, training=False), args=(batch,))

    batch = next(iter(strategy.experimental_distribute_dataset(ds)))
    return np.concatenate(
        [np.asarray(t) for t in strategy.experimental_local_results(outputs(batch))]
    )
