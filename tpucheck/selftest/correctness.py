"""The correctness checks of the TPU self-test, each a short, real run, mostly of the reference
script as a user runs it. Each hands its evidence to a ``judge_*`` function, which decides from
that alone; a check's keyword arguments replace the part a test plants a failure in.
"""

from __future__ import annotations

import math

import numpy as np

from tpucheck import _tf, host
from tpucheck.selftest.base import Context, Outcome, judged

SIMULATED_TPU = "simulated TPU"  # train_tpu.connect on a CPU: MirroredStrategy over its devices
BFLOAT16_EPSILON = 2.0**-7  # 8 significant bits
_TPU_FLOAT32_RTOL = 2e-2  # float32 on a TPU agrees with a CPU to about bfloat16 precision
_TPU_FLOAT32_NOTE = (
    "tolerance widened on the TPU: XLA multiplies float32 matrices in bfloat16 passes by "
    "default (unverified on hardware)"
)
KERAS_FIT_ON_TPU = (
    "whether Keras 3's fit trains on a TPU is unverified (no source says it fails); tf-keras "
    "(pip install tf-keras, TF_USE_LEGACY_KERAS=1) is the fallback for the open reports "
    "(Kaggle/docker-python#1370)"
)


def _tolerance(context: Context, on_cpu: float) -> tuple[float, tuple[str, ...]]:
    return (_TPU_FLOAT32_RTOL, (_TPU_FLOAT32_NOTE,)) if context.on_tpu else (on_cpu, ())


def _max_difference(a_list, b_list) -> float:
    pairs = zip(a_list, b_list, strict=True)
    return max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in pairs)


def strategy_kind(strategy) -> str:
    """``"TPU"``, ``"simulated TPU"`` (CPU devices), ``"GPU"`` or the strategy's class name."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "TPU"
    devices = [d.rpartition("/device:")[2].upper() for d in strategy.extended.worker_devices]
    if all(d.startswith("CPU") for d in devices):
        return SIMULATED_TPU
    return "GPU" if all(d.startswith("GPU") for d in devices) else type(strategy).__name__


def _not_learned(run) -> str | None:
    losses = [e["loss"] for e in run.history] + [run.test_loss]
    if not all(math.isfinite(v) for v in losses):
        return f"the loss is not finite: epochs {[round(v, 4) for v in losses[:-1]]}, test {losses[-1]}"
    if not run.test_accuracy > 2 * run.baseline:
        return (
            f"test accuracy {run.test_accuracy:.3f} is not twice the commonest class's share "
            f"({run.baseline:.3f}): it learned nothing"
        )
    return None


def _run_evidence(run, lines) -> dict:
    return {
        "global_batch": run.global_batch,
        "steps": run.done,
        "steps_per_call": run.per_call,
        "epoch_losses": [round(e["loss"], 5) for e in run.history],
        "test_loss": run.test_loss,
        "test_accuracy": run.test_accuracy,
        "commonest_class_share": run.baseline,
        "script_printed": lines[-3:],
        "not_learned": _not_learned(run),
    }


def connect(context: Context) -> Outcome:
    """``train_tpu.connect`` gives the strategy this hardware should have."""
    import train_tpu

    strategy = train_tpu.connect(context.simulated_replicas)  # its time: the check's seconds
    context.strategy, context.kind = strategy, strategy_kind(strategy)
    if context.kind != "TPU":  # the script's runs drop their iterators: no stall for minutes
        _tf.untuned_distributed_input(train_tpu.tf)
    evidence = {
        "strategy": context.kind,
        "replicas": strategy.num_replicas_in_sync,
        "replicas_asked": context.simulated_replicas if context.kind == SIMULATED_TPU else None,
        "tpu_hints": host.tpu_hints(),
    }
    return judge_connect(evidence)


def judge_connect(evidence: dict) -> Outcome:
    kind, replicas, hints = evidence["strategy"], evidence["replicas"], evidence["tpu_hints"]
    asked, problems = evidence["replicas_asked"], []
    if hints and kind != "TPU":
        problems.append(f"TPU hardware present ({', '.join(hints)}) but the strategy is {kind}")
    if kind == SIMULATED_TPU and replicas != asked:
        problems.append(f"asked for {asked} simulated replicas, got {replicas}")
    return judged(problems, f"{kind} with {replicas} replica(s)", evidence)


def variables(context: Context, *, scope=None) -> Outcome:
    """A variable made in ``strategy.scope()`` has a copy on each replica's device, and
    ``strategy.run`` reaches every replica. ``scope`` replaces ``strategy.scope``."""
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
    local, copies = evidence["local_devices"], evidence["copies"]
    devices, ids = evidence["distinct_devices"], evidence["replica_ids_seen"]
    problems = []
    if copies != local:
        problems.append(
            f"{copies} {'copy' if copies == 1 else 'copies'} of the variable for {local} devices "
            f"({evidence['variable_type']}: made outside strategy.scope()?)"
        )
    if devices != local:
        problems.append(f"the copies sit on {devices} distinct device(s), not {local}")
    if not evidence["copies_equal"]:
        problems.append("the copies hold different values")
    if sorted(set(ids)) != list(range(local)):
        problems.append(f"strategy.run reached replicas {ids}, not 0 to {local - 1}")
    success = (
        f"{copies} equal copies on {devices} devices; strategy.run reached all {local} replicas"
    )
    return judged(problems, success, evidence)


def fit(context: Context, *, make_model=None) -> Outcome:
    """``train_tpu.py --fit --no-bf16`` on a sample trains, and the test loss the script computes
    on the replicas (its last batch padded) equals, in float64, one device's on the model it
    saved. ``make_model`` replaces the script's model."""
    import tensorflow as tf

    import train_tpu

    examples = context.size(512, 2048)
    run, lines = context.script("fit", "--fit", "--no-bf16", examples=examples, model=make_model)
    (_, _), (x, y) = context.arrays
    x, y = x[: context.held_out, ..., None].astype(np.float32) / 255, y[: context.held_out]
    with tf.device("/cpu:0"):  # one device, outside any strategy
        saved = train_tpu.keras.models.load_model(context.workdir / "fit" / "model.keras")
        logits = np.asarray(saved(x, training=False), dtype=np.float64)
        loss = float(np.mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y.astype(int), logits)))
    rtol, notes = _tolerance(context, 1e-4)
    version = train_tpu.keras.__version__
    evidence = {
        "keras": f"{'tf-keras' if version < '3' else 'Keras'} {version}",
        **_run_evidence(run, lines),
        "one_device_loss": loss,
        "one_device_accuracy": float((logits.argmax(axis=1) == y).mean()),
        "loss_gap": abs(run.test_loss - loss) / loss,
        "loss_gap_tolerance": rtol,
    }
    return judge_fit(evidence, notes)


def judge_fit(evidence: dict, notes=()) -> Outcome:
    gap, rtol = evidence["loss_gap"], evidence["loss_gap_tolerance"]
    problems = [evidence["not_learned"]]
    if not gap <= rtol:  # a NaN gap fails too
        problems.append(
            f"the test loss on the replicas ({evidence['test_loss']:.4g}) differs from one "
            f"device's ({evidence['one_device_loss']:.4g}) by {gap:.2g} (tolerance {rtol:g})"
        )
    success = (
        f"fit trained {evidence['steps']} steps ({evidence['steps_per_call']} per call): test "
        f"accuracy {evidence['test_accuracy']:.3f}, its loss on the replicas matches one device "
        f"within {gap:.1g} (tolerance {rtol:g}); {evidence['keras']}"
    )
    return judged(problems, success, evidence, (*notes, f"on a TPU, {KERAS_FIT_ON_TPU}"))


def checkpoint(context: Context, *, restore=None) -> Outcome:
    """The script's custom loop trains a sample for an epoch and saves; the checkpoint, made on
    the replicas, restores on one device the step saved and the weights it exported.
    ``restore`` replaces ``train_tpu.restore`` (same arguments)."""
    import tensorflow as tf

    import train_tpu

    run, lines = context.script("loop", examples=context.size(512, 1024))
    folder = context.workdir / "loop"
    saved = train_tpu.keras.models.load_model(folder / "model.keras").get_weights()
    one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, optimizer = train_tpu.build(one_device, 1e-3, shape=(28, 28, 1), classes=10, seed=1)
    before = _max_difference(model.get_weights(), saved)
    manager, step = train_tpu.checkpointing(str(folder), model, optimizer)
    order = [0, run.global_batch, run.examples]  # seed, global batch, examples: as main saved
    restored_step = (restore or train_tpu.restore)(manager, step, order)
    evidence = {
        **_run_evidence(run, lines),
        "restored_on": "/cpu:0 (OneDeviceStrategy)",
        "restored_step": restored_step,
        "weights_before_restore_max_difference": before,
        "weights_after_restore_max_difference": _max_difference(model.get_weights(), saved),
    }
    return judge_checkpoint(evidence)


def judge_checkpoint(evidence: dict) -> Outcome:
    before = evidence["weights_before_restore_max_difference"]
    after, steps = evidence["weights_after_restore_max_difference"], evidence["steps"]
    problems = [evidence["not_learned"]]
    if not before > 0:
        problems.append("the fresh model already had the saved weights: the restore proves nothing")
    if after != 0 or evidence["restored_step"] != steps:
        problems.append(
            f"after the restore the weights are {after:.2g} apart from the saved ones (were "
            f"{before:.2g}; must be 0) at step {evidence['restored_step']} (saved: {steps}): the "
            "restore did not bring them back"
        )
    success = (
        f"the custom loop trained {steps} steps (test accuracy {evidence['test_accuracy']:.3f}); "
        f"its save restored on one device: step {steps}, weights identical (were {before:.2g} apart)"
    )
    return judged(problems, success, evidence)


def uint8_input(context: Context, *, make_model=None) -> Outcome:
    """``train_tpu.py --uint8`` on a sample: pixels go to the device as bytes and the model's
    first layer scales them. Whether a TPU takes uint8 is unverified (``train_tpu.parse`` cites
    both sides): a report from a TPU answers it. ``make_model`` replaces the script's model."""
    import train_tpu

    examples = context.size(512, 1024)
    run, lines = context.script("uint8", "--uint8", examples=examples, model=make_model)
    saved = train_tpu.keras.models.load_model(context.workdir / "uint8" / "model.keras")
    evidence = {
        "model_input_dtype": str(saved.inputs[0].dtype).rpartition(".")[2],
        **_run_evidence(run, lines),
        "fallback": "the script's default: pixels scaled to float32 on the host (no --uint8)",
    }
    return judge_uint8_input(evidence)


def judge_uint8_input(evidence: dict) -> Outcome:
    taken = evidence["model_input_dtype"]
    problems = [evidence["not_learned"]]
    if taken != "uint8":
        problems.append(f"the step was fed uint8 pixels into a {taken} input, not uint8")
    success = (
        f"uint8 pixels trained {evidence['steps']} steps: test accuracy "
        f"{evidence['test_accuracy']:.3f} (the commonest class: "
        f"{evidence['commonest_class_share']:.3f})"
    )
    return judged(problems, success, evidence)


def replica_equivalence(context: Context, *, make_step=None) -> Outcome:
    """The script's step and loop on every replica end with the same weights as on one device.
    ``make_step`` replaces ``train_tpu.make_train_step``."""
    import tensorflow as tf

    import train_tpu

    strategy = context.need_strategy()
    if context.replicas == 1:
        info = "one replica (e.g. a v5e-1): there is no second replica count to compare with"
        return Outcome("info", info, {"replicas": 1})
    batch, steps = 8 * context.replicas, 3
    (x, y), _ = context.arrays
    x, y = x[: steps * batch, ..., None].astype(np.float32) / 255, y[: steps * batch]
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    runs, start = [], None
    for where in (strategy, tf.distribute.OneDeviceStrategy("/cpu:0")):
        model, optimizer = train_tpu.build(where, 1e-2, shape=(28, 28, 1), classes=10, bf16=False)
        start = start or model.get_weights()
        model.set_weights(start)
        step = (make_step or train_tpu.make_train_step)(model, optimizer, batch)
        train = train_tpu.many_steps(where, step)
        train(iter(where.experimental_distribute_dataset(batches)), tf.constant(steps))
        runs.append(model.get_weights())
    rtol, notes = _tolerance(context, 1e-3)
    update = _max_difference(runs[1], start)
    names = [v.path for v in model.weights]
    gaps = [float(np.max(np.abs(a - b))) for a, b in zip(*runs, strict=True)]
    evidence = {
        "replicas": context.replicas,
        "reference": "one device (OneDeviceStrategy)",
        "steps": steps,
        "max_weight_difference": max(gaps),
        "tolerance": rtol * update,
        "largest_update": update,
        "worst_variable": names[int(np.argmax(gaps))],
    }
    return judge_replica_equivalence(evidence, notes)


def judge_replica_equivalence(evidence: dict, notes=()) -> Outcome:
    diff, tol = evidence["max_weight_difference"], evidence["tolerance"]
    runs = f"{evidence['replicas']} replicas and one device after {evidence['steps']} steps"
    problems = []
    if not diff <= tol:  # a NaN difference fails too
        problems.append(
            f"DIFFERENT weights on {runs}: max difference {diff:.2g} > tolerance {tol:.2g} "
            f"(worst: {evidence['worst_variable']}); is the loss averaged over the global batch?"
        )
    success = f"same weights on {runs}: max difference {diff:.2g} (tolerance {tol:.2g})"
    return judged(problems, success, evidence, notes)


def bfloat16_matmul(context: Context, *, dtype=None) -> Outcome:
    """A bfloat16 matmul on a replica gives bfloat16 within bfloat16's epsilon of float64.
    ``dtype`` replaces the bfloat16 the inputs are cast to."""
    import tensorflow as tf

    strategy = context.need_strategy()
    low_dtype, n = dtype or tf.bfloat16, 256
    a, b = np.random.default_rng(5).standard_normal((2, n, n), dtype=np.float32)

    @tf.function
    def both(a, b):
        def replica(a, b):
            return tf.matmul(tf.cast(a, low_dtype), tf.cast(b, low_dtype)), tf.matmul(a, b)

        return strategy.run(replica, args=(a, b))

    low, high = (strategy.experimental_local_results(t)[0] for t in both(a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error(x):
        x = np.asarray(tf.cast(x, tf.float64))
        return float(np.linalg.norm(x - exact) / np.linalg.norm(exact))

    evidence = {
        "shape": [n, n],
        "output_dtype": low.dtype.name,
        "bfloat16_relative_error": error(low),
        "float32_relative_error": error(high),
        "bfloat16_epsilon": BFLOAT16_EPSILON,
        "device": low.device,
    }
    return judge_bfloat16(evidence)


def judge_bfloat16(evidence: dict) -> Outcome:
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
