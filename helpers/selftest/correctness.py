"""The correctness checks of the TPU self-test (notebook 00_tpu_self_test), one per lesson they come from.

Each is a short, real run of what a notebook teaches, with the evidence that it worked:
connect (01), variables on every replica (02), a few ``fit`` steps (03), a custom loop on N
replicas against one (04), a bfloat16 matmul (05), uint8 pixels into a training step (05, 06) and
a checkpoint restored onto one device (08). The connection, model, data, pipeline, step and
checkpoint are the reference script's parts (``train_tpu``); the checks add the evidence.
The speed checks are in :mod:`helpers.selftest.speed`.

Each check measures, then hands its evidence to a ``judge_*`` function, which decides the status
and writes the summary from that evidence alone: the success sentence only when every condition
held, otherwise each condition that failed, with its numbers. The keyword arguments of a check
replace the part a test plants a failure in (e.g. ``variables(context, scope=...)``).
TensorFlow and Keras are imported inside the checks, so that importing the self-test needs
neither (the command can then say what to install).
"""

from __future__ import annotations

import math
import time

import numpy as np

import helpers
from helpers import fitting, loops, precision, runtime
from helpers.selftest.base import Context, Outcome, judged
from helpers.strategy import SIMULATED_TPU

__all__ = [
    "bfloat16_matmul",
    "checkpoint",
    "connect",
    "fit",
    "judge_bfloat16",
    "judge_checkpoint",
    "judge_connect",
    "judge_fit",
    "judge_replica_equivalence",
    "judge_uint8_input",
    "judge_variables",
    "replica_equivalence",
    "uint8_input",
    "variables",
]

# On a TPU, XLA's default precision multiplies float32 matrices in bfloat16 passes, so float32
# results there agree with a CPU's only to about bfloat16 precision (unverified on hardware).
_TPU_FLOAT32_RTOL = 2e-2
_TPU_FLOAT32_NOTE = (
    "tolerance widened on the TPU: XLA multiplies float32 matrices in bfloat16 passes by "
    "default (unverified on hardware)"
)


# The fit, replica and checkpoint checks build the script's model in float32 (its --no-bf16):
# they compare two computations of the same thing, and bfloat16 rounds each a little differently
# (measured here: 3e-4 of the weights after 3 steps, 6e-3 of the outputs), which would hide the
# errors they look for. The uint8 check trains the script's default, mixed_bfloat16 model.


def _tolerance(context: Context, on_cpu: float) -> tuple[float, tuple[str, ...]]:
    if context.on_tpu:
        return _TPU_FLOAT32_RTOL, (_TPU_FLOAT32_NOTE,)
    return on_cpu, ()


def _max_difference(a_list, b_list) -> float:
    return max(
        float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(a_list, b_list, strict=True)
    )


def connect(context: Context) -> Outcome:
    """``helpers.connect`` gives the strategy this hardware should have (notebook 01_tpu_detection_and_connection).

    Run by the self-test of notebook 00_tpu_self_test.
    """
    start = time.perf_counter()
    strategy = helpers.connect(context.simulated_replicas)
    seconds = time.perf_counter() - start
    info = helpers.describe(strategy)
    context.strategy, context.kind = strategy, info.kind
    evidence = {
        "strategy": info.kind,
        "replicas": info.replicas,
        "replicas_asked": context.simulated_replicas if info.kind == SIMULATED_TPU else None,
        "tpu_hints": runtime.tpu_hints(),
        "first_device": info.devices[0] if info.devices else None,
        "last_device": info.devices[-1] if info.devices else None,
        "tpu_name": info.tpu,
        "seconds_to_connect": round(seconds, 3),
    }
    return judge_connect(evidence)


def judge_connect(evidence: dict) -> Outcome:
    """Status and summary of :func:`connect` from its evidence."""
    kind, replicas, hints = evidence["strategy"], evidence["replicas"], evidence["tpu_hints"]
    problems = []
    if hints and kind != "TPU":
        problems.append(f"TPU hardware present ({', '.join(hints)}) but the strategy is {kind}")
    asked = evidence.get("replicas_asked")
    if kind == SIMULATED_TPU and asked is not None and replicas != asked:
        problems.append(f"asked for {asked} simulated replicas, got {replicas}")
    return judged(problems, f"{kind} with {replicas} replica(s)", evidence)


def variables(context: Context, *, scope=None) -> Outcome:
    """A variable made in ``strategy.scope()`` has one copy per replica, each on its own device,
    and ``strategy.run`` reaches every replica (notebook 02_building_in_strategy_scope). ``scope`` replaces
    ``strategy.scope``, e.g. ``contextlib.nullcontext`` to make the variable outside it.
    Run by the self-test of notebook 00_tpu_self_test.
    """
    import tensorflow as tf

    strategy = context.need_strategy()
    with (scope or strategy.scope)():
        variable = tf.Variable(tf.range(4, dtype=tf.float32), name="self_test_variable")
    copies = strategy.experimental_local_results(variable)
    devices = [copy.device for copy in copies]
    values = [copy.numpy() for copy in copies]

    @tf.function
    def replica_ids():
        return strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)

    ids = sorted(int(i) for i in strategy.experimental_local_results(replica_ids()))
    evidence = {
        "copies": len(copies),
        "distinct_devices": len(set(devices)),
        "local_devices": len(strategy.extended.worker_devices),
        "copies_equal": all(np.array_equal(v, values[0]) for v in values),
        "replica_ids_seen": ids,
        "variable_type": type(variable).__name__,
    }
    return judge_variables(evidence)


def judge_variables(evidence: dict) -> Outcome:
    """Status and summary of :func:`variables` from its evidence."""
    local, copies = evidence["local_devices"], evidence["copies"]
    devices, ids = evidence["distinct_devices"], evidence["replica_ids_seen"]
    problems = []
    if copies != local:
        problems.append(
            f"{copies} {'copy' if copies == 1 else 'copies'} of the variable for {local} devices "
            f"({evidence['variable_type']}: made outside strategy.scope()?)"
        )
    if devices != local:
        problems.append(
            f"the copies sit on {devices} distinct device{'' if devices == 1 else 's'}, not {local}"
        )
    if not evidence["copies_equal"]:
        problems.append("the copies hold different values")
    if sorted(set(ids)) != list(range(local)):
        problems.append(f"strategy.run reached replicas {ids}, not 0 to {local - 1}")
    success = (
        f"{copies} equal copies on {devices} devices; strategy.run reached all {local} replicas"
    )
    return judged(problems, success, evidence)


def fit(context: Context, *, loss=None, evaluate_steps=None) -> Outcome:
    """A few ``fit`` steps on every replica with the reference script's parts (``build``,
    ``compile_for_fit``, ``fit_steps_per_execution``, ``train_dataset``): a finite, falling
    loss, and the loss ``evaluate`` reports equals a one-device NumPy evaluation of the same
    weights (notebook 03_keras_compile_and_fit). ``evaluate`` runs whole calls of
    ``steps_per_execution`` batches: ``steps=4`` with 10 steps per call evaluates 10 batches and
    reports their mean, silently, so the check evaluates a whole number of calls and fails when
    Keras ran another number of batches than it asked for. ``loss`` replaces the compiled loss
    (default: the script's), ``evaluate_steps`` the batches evaluated. Run by the self-test of
    notebook 00_tpu_self_test. The evidence names the Keras that trained: Keras 3, or tf-keras
    when ``TF_USE_LEGACY_KERAS=1`` (the script's fallback).
    """
    import tensorflow as tf

    import train_tpu

    keras = train_tpu.keras  # Keras 3, or tf-keras: the one the script's model is built with
    strategy = context.need_strategy()
    images = context.images()
    replicas = context.replicas
    global_batch = 16 * replicas
    steps = context.size(6, 30)
    # At least three calls, so that the loss is logged three times (once per call).
    choice = fitting.steps_per_execution_for(strategy, steps // 3)
    # At least 4 batches, in whole calls: Keras would otherwise round them up to whole calls.
    eval_steps = evaluate_steps or math.ceil(4 / choice.value) * choice.value
    tests = eval_steps * global_batch  # whole batches: the padding's weight 0 plays no part here
    folder = context.tfrecords(steps * global_batch, tests)
    model, optimizer = train_tpu.build(strategy, 1e-2, **train_tpu.EXACT, seed=11)  # float32
    train_tpu.compile_for_fit(strategy, model, optimizer, choice.value)
    if loss is not None:
        with strategy.scope():
            model.compile(optimizer=optimizer, loss=loss, steps_per_execution=choice.value)
    losses = []  # Keras' running mean of the epoch's loss, after each call
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    one_pipeline = tf.distribute.InputContext(num_replicas_in_sync=1)  # global batches, as --fit
    train = train_tpu.train_dataset(folder, one_pipeline, global_batch, steps, 1)
    # One epoch: each new epoch costs a new distributed iterator, which is slow on many replicas.
    try:
        model.fit(train, epochs=1, steps_per_epoch=steps, callbacks=[record], verbose=0)
    except TypeError as err:  # Keras 3's first-batch average, on a TPU: the way out, in words
        if not (problem := train_tpu.fit_start_error(err, strategy)):
            raise
        raise RuntimeError(f"{train_tpu.KERAS}: {problem}") from None
    test = train_tpu.eval_dataset(folder, one_pipeline, global_batch, eval_steps)
    test = test.map(lambda images, labels, weights: (images, labels))
    ran = []  # Keras' step index at the end of each call: the last one + 1 batches were run
    count = keras.callbacks.LambdaCallback(on_test_batch_end=lambda batch, logs: ran.append(batch))
    scores = model.evaluate(test, steps=eval_steps, callbacks=[count], verbose=0)
    distributed = float(np.ravel(scores)[0])
    x, y = images.x_test[:tests], images.y_test[:tests]
    reference = fitting.single_device_evaluation(model, x, y)
    rtol, notes = _tolerance(context, 1e-4)
    evidence = {
        "keras": train_tpu.KERAS,
        "running_mean_losses": [round(v, 5) for v in losses],
        "steps": steps,
        "replicas": replicas,
        "global_batch": global_batch,
        "steps_per_execution": choice.value,
        "steps_per_execution_reason": choice.reason,
        "evaluate_steps": eval_steps,
        "evaluate_batches_run": ran[-1] + 1 if ran else 0,
        "evaluate_loss": round(distributed, 6),
        "one_device_loss": round(reference.loss, 6),
        "loss_gap": abs(distributed - reference.loss) / reference.loss,
        "loss_gap_tolerance": rtol,
    }
    return judge_fit(evidence, notes)


def judge_fit(evidence: dict, notes=()) -> Outcome:
    """Status and summary of :func:`fit` from its evidence."""
    losses, gap, rtol = (
        evidence["running_mean_losses"],
        evidence["loss_gap"],
        evidence["loss_gap_tolerance"],
    )
    asked, ran = evidence["evaluate_steps"], evidence["evaluate_batches_run"]
    problems = []
    finite = bool(losses) and all(math.isfinite(v) for v in losses)
    if not finite:
        problems.append(f"the loss is not finite: {losses}")
    elif not losses[-1] < losses[0]:
        problems.append(f"the loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}")
    if ran != asked:
        problems.append(
            f"evaluate(steps={asked}) ran {ran} batches: Keras runs whole calls of "
            f"steps_per_execution={evidence['steps_per_execution']}, so the steps must be a "
            "multiple of it"
        )
    if not gap <= rtol:  # a NaN gap fails too
        problems.append(
            f"evaluate's loss ({evidence['evaluate_loss']:.4g}) differs from one device's "
            f"({evidence['one_device_loss']:.4g}) by {gap:.2g} (tolerance {rtol:g})"
        )
    success = (
        f"loss {losses[0]:.3f} at step 1, mean {losses[-1]:.3f} over {evidence['steps']} steps; "
        f"evaluate on {evidence['replicas']} replicas ({ran} batches, {asked} asked) matches "
        f"one device within {gap:.1g} (tolerance {rtol:g}); {evidence.get('keras', 'Keras')}"
        if finite
        else ""
    )
    return judged(problems, success, evidence, notes)


def replica_equivalence(context: Context, *, make_steps=None) -> Outcome:
    """The reference script's step and loop (``make_train_step``, ``many_steps``) on every
    replica end with the same weights as on one replica (notebook 04_custom_training_loops). ``make_steps`` replaces
    the loop under test.
    Run by the self-test of notebook 00_tpu_self_test.
    """
    strategy = context.need_strategy()
    replicas = context.replicas
    if replicas == 1:
        return Outcome(
            "info",
            "one replica (e.g. a v5e-1): there is no second replica count to compare with",
            {"replicas": 1},
        )
    import train_tpu

    images = context.images()
    rtol, notes = _tolerance(context, 1e-3)
    result = loops.check_replica_equivalence(
        strategy,
        lambda: train_tpu.build_model(**train_tpu.EXACT, seed=7),  # in each scope; float32
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
    return judge_replica_equivalence(evidence, notes)


def judge_replica_equivalence(evidence: dict, notes=()) -> Outcome:
    """Status and summary of :func:`replica_equivalence` from its evidence.
    Used in notebook 00_tpu_self_test.
    """
    diff, tol = evidence["max_weight_difference"], evidence["tolerance"]
    runs = (
        f"{evidence['replicas']} replicas and {evidence['reference_replicas']} after "
        f"{evidence['steps']} steps"
    )
    problems = []
    if not diff <= tol:  # a NaN difference fails too
        problems.append(
            f"DIFFERENT weights on {runs}: max difference {diff:.2g} > tolerance {tol:.2g} "
            f"(worst: {evidence['worst_variable']}); is the loss averaged over the global batch?"
        )
    success = f"same weights on {runs}: max difference {diff:.2g} (tolerance {tol:.2g})"
    return judged(problems, success, evidence, notes)


def bfloat16_matmul(context: Context, *, dtype=None) -> Outcome:
    """A matmul in bfloat16 on a replica gives bfloat16, as accurate as bfloat16 can be
    (notebook 05_bfloat16_mixed_precision): relative error within bfloat16's epsilon, measured against float64.
    ``dtype`` replaces the bfloat16 the inputs are cast to. Run by the self-test of notebook 00_tpu_self_test.
    """
    import tensorflow as tf

    strategy = context.need_strategy()
    low_dtype = dtype or tf.bfloat16
    n = 256
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))

    @tf.function
    def both(a, b):
        def replica(a, b):
            low = tf.matmul(tf.cast(a, low_dtype), tf.cast(b, low_dtype))
            return low, tf.matmul(a, b)

        return strategy.run(replica, args=(a, b))

    low, high = (strategy.experimental_local_results(t)[0] for t in both(a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error(x):
        return float(
            np.linalg.norm(np.asarray(tf.cast(x, tf.float64)) - exact) / np.linalg.norm(exact)
        )

    evidence = {
        "shape": [n, n],
        "output_dtype": low.dtype.name,
        "bfloat16_relative_error": error(low),
        "float32_relative_error": error(high),
        "bfloat16_epsilon": precision.FloatFormat("bfloat16", *precision.BITS["bfloat16"]).epsilon,
        "device": low.device,
    }
    return judge_bfloat16(evidence)


def judge_bfloat16(evidence: dict) -> Outcome:
    """Status and summary of :func:`bfloat16_matmul` from its evidence."""
    dtype, low = evidence["output_dtype"], evidence["bfloat16_relative_error"]
    epsilon, high = evidence["bfloat16_epsilon"], evidence["float32_relative_error"]
    problems = []
    if dtype != "bfloat16":
        problems.append(f"the output is {dtype}, not bfloat16")
    if not low <= epsilon:
        problems.append(f"relative error {low:.2g} is above bfloat16's epsilon ({epsilon:.2g})")
    elif low <= epsilon / 64:  # a bfloat16 path that secretly ran in float32 shows ~1e-7
        problems.append(
            f"relative error {low:.2g} is below bfloat16's rounding ({epsilon / 64:.2g}): the "
            "matmul did not round to bfloat16"
        )
    success = (
        f"bfloat16 output, relative error {low:.2g} ({low / epsilon:.2f} x bfloat16's epsilon; "
        f"float32: {high:.2g})"
    )
    return judged(problems, success, evidence)


def uint8_input(context: Context, *, dtype=None) -> Outcome:
    """uint8 pixels from the reference script's pipeline fed into ``fit`` steps of its model,
    scaled on the device by the model's first layer (notebooks 05_bfloat16_mixed_precision and 06_input_pipelines): the step takes them, the loss is
    finite and the weights move. In 2020 TensorFlow's TPU team answered "uint8, which isn't
    supported on TPU. You can cast to uint32" (tensorflow/tensorflow#37426); XLA has supported u8
    on TPU since August 2020 (jax-ml/jax#4011). Whether TPUStrategy takes uint8 today is
    unverified on hardware: a report from a TPU answers it; the fallback is to cast on the host.
    ``dtype`` replaces the uint8 fed to the step. Run by the self-test of notebook 00_tpu_self_test.
    """
    import tensorflow as tf

    import train_tpu

    strategy = context.need_strategy()
    replicas, global_batch = context.replicas, 16 * context.replicas
    steps = context.size(2, 6)
    choice = fitting.steps_per_execution_for(strategy, steps)
    folder = context.tfrecords(steps * global_batch, global_batch)
    model, optimizer = train_tpu.build(strategy, 1e-2, seed=31)  # uint8 in, scaled on the device
    train_tpu.compile_for_fit(strategy, model, optimizer, choice.value)
    before = model.get_weights()
    one_pipeline = tf.distribute.InputContext(num_replicas_in_sync=1)
    train = train_tpu.train_dataset(folder, one_pipeline, global_batch, steps, 1)
    if dtype is not None:
        train = train.map(lambda images, labels: (tf.cast(images, dtype), labels))
    history = model.fit(train, epochs=1, steps_per_epoch=steps, verbose=0)
    evidence = {
        "fed_dtype": train.element_spec[0].dtype.name,
        "model_input_dtype": str(model.inputs[0].dtype),
        "replicas": replicas,
        "steps": steps,
        "steps_per_execution": choice.value,
        "loss": float(history.history["loss"][-1]),
        "largest_update": _max_difference(model.get_weights(), before),
        "fallback": "cast to float32 on the host: train_tpu.py --cast-on-host "
        "(tensorflow/tensorflow#37426)",
    }
    return judge_uint8_input(evidence)


def judge_uint8_input(evidence: dict) -> Outcome:
    """Status and summary of :func:`uint8_input` from its evidence."""
    fed, taken, loss = evidence["fed_dtype"], evidence["model_input_dtype"], evidence["loss"]
    problems = []
    if fed != "uint8" or taken != "uint8":
        problems.append(f"the step was fed {fed} pixels into a {taken} input, not uint8")
    if not math.isfinite(loss):
        problems.append(f"the loss is not finite: {loss}")
    if not evidence["largest_update"] > 0:
        problems.append("the weights did not move: the steps trained nothing")
    success = (
        f"uint8 pixels trained {evidence['steps']} steps on {evidence['replicas']} replica(s) "
        f"(steps_per_execution={evidence['steps_per_execution']}): loss {loss:.3f}, largest "
        f"weight update {evidence['largest_update']:.2g}"
    )
    return judged(problems, success, evidence)


def checkpoint(context: Context, *, restore=None) -> Outcome:
    """Save a model that lives on the strategy with the reference script's ``checkpointing``
    and ``manager.save``, then ``restore`` it into the same model built on one device with
    no strategy: the same weights and the same outputs (notebook 08_checkpoints_and_preemption). ``restore`` replaces
    ``train_tpu.restore`` (same arguments). Run by the self-test of notebook 00_tpu_self_test.
    """
    import tensorflow as tf

    import train_tpu

    strategy = context.need_strategy()
    images = context.images()
    global_batch = 8 * context.replicas
    order = [21, global_batch, 0]  # what the save belongs to: the restore checks it
    model, optimizer = train_tpu.build(strategy, 1e-2, **train_tpu.EXACT, seed=21)  # float32
    rng = np.random.default_rng(21)
    for variable in model.trainable_variables:  # new values on every replica, as training makes
        variable.assign(variable + rng.normal(0, 0.1, variable.shape).astype(np.float32))
    folder = str(context.workdir / "checkpoint")
    manager, step, _ = train_tpu.checkpointing(folder, model, optimizer, order)
    step.assign(1)
    path = manager.save(checkpoint_number=1)
    saved = model.get_weights()
    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    served, served_optimizer = train_tpu.build(one_device, 1e-2, **train_tpu.EXACT, seed=22)
    before = _max_difference(served.get_weights(), saved)
    served_manager, served_step, served_order = train_tpu.checkpointing(
        folder, served, served_optimizer, order
    )
    restored_step = (restore or train_tpu.restore)(served_manager, served_step, served_order)
    after = _max_difference(served.get_weights(), saved)
    x = images.x_test[:global_batch]
    expected = _replica_outputs(strategy, model, x, global_batch)
    with tf.device("/cpu:0"):
        got = np.asarray(served(x, training=False))
    rtol, notes = _tolerance(context, 1e-5)
    evidence = {
        "checkpoint": path,
        "restored_step": restored_step,
        "weights_before_restore_max_difference": before,
        "weights_after_restore_max_difference": after,
        "output_relative_difference": float(
            np.max(np.abs(got - expected)) / max(np.max(np.abs(expected)), 1e-12)
        ),
        "output_tolerance": rtol,
        "restored_on": "/cpu:0 (OneDeviceStrategy)",
    }
    return judge_checkpoint(evidence, notes)


def judge_checkpoint(evidence: dict, notes=()) -> Outcome:
    """Status and summary of :func:`checkpoint` from its evidence."""
    before = evidence["weights_before_restore_max_difference"]
    after = evidence["weights_after_restore_max_difference"]
    gap, rtol = evidence["output_relative_difference"], evidence["output_tolerance"]
    problems = []
    if not before > 0:
        problems.append(
            "the fresh model already had the saved weights, so the restore proves nothing"
        )
    if after != 0:
        problems.append(
            f"after the restore the weights are still {after:.2g} apart from the saved ones "
            f"(were {before:.2g}; must be 0): the restore did not bring them back"
        )
    if not gap <= rtol:
        problems.append(
            f"outputs on one device differ from the replicas' by {gap:.2g} (tolerance {rtol:g})"
        )
    success = (
        f"weights identical after restore on one device (were {before:.2g} apart), outputs "
        f"differ by {gap:.2g} (tolerance {rtol:g})"
    )
    return judged(problems, success, evidence, notes)


def _replica_outputs(strategy, model, x, global_batch: int) -> np.ndarray:
    """The model's outputs for one global batch, computed by the replicas, in example order.

    Collected on the host (``experimental_local_results``) rather than by ``strategy.gather``,
    whose first all-gather takes seconds on the simulated TPU.
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
