"""The TPU readiness check: find on a CPU what would fail or be slow on a TPU.

One call looks at a ``tf.data`` pipeline, a Keras model and, optionally, your own training step,
and returns a :class:`Report`::

    report = readiness.check(dataset, model, strategy=strategy, step=replica_step)
    report                   # a table in a notebook; print(report) anywhere else
    report.assert_clean()    # raises NotReady, listing the problems, unless there are none

Each :class:`Finding` says what is wrong, where, why it matters on a TPU, and the fix, as an
``error``, ``warning`` or ``note``. Nothing runs: the dataset's spec and graph are read, the step
is traced once under a variable creator that records what it would create, and compiled by XLA
for the CPU. tpucheck/README.md lists the findings and what the check cannot see.
"""

from __future__ import annotations

from collections.abc import Callable

from tpucheck.batches import positive_int as _positive_int
from tpucheck.readiness._inputs import check_dataset, check_pipeline
from tpucheck.readiness._model import check_model
from tpucheck.readiness._step import STEP_ARGS, check_step
from tpucheck.readiness.report import SEVERITIES, Finding, NotReady, Report

__all__ = ["SEVERITIES", "STEP_ARGS", "Finding", "NotReady", "Report", "check"]


def check(
    dataset,
    model=None,
    *,
    step: Callable | None = None,
    strategy=None,
    replicas: int | None = None,
    steps_per_execution: int | None = None,
    compile_step: bool = True,
    input_context=None,
    step_args: str | None = None,
    global_batch: int | None = None,
) -> Report:
    """Check a pipeline (and model, and step) for what would fail or be slow on a TPU.

    ``dataset``: what you give ``fit`` or ``experimental_distribute_dataset`` (global batches;
    no data is pulled), or with ``input_context`` (the ``InputContext`` a ``dataset_fn`` of
    ``distribute_datasets_from_function`` built it with) one replica's. ``model``: built; without
    ``step`` its forward and backward pass is traced. ``step``: your per-replica step, called as
    ``strategy.run`` calls it (a tuple element unpacked when the step takes that many arguments,
    else whole; ``step_args="unpack"`` or ``"element"`` says which), traced once, never run.
    ``strategy`` (default: the current one) or ``replicas`` (e.g. 8 for a v5e-8) plan the batch;
    ``steps_per_execution`` defaults to the model's; ``compile_step=False`` only reads the
    dataset and model; ``global_batch``: the size, where the pipeline does not say it.
    """
    import keras
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            "check() needs the tf.data.Dataset you feed to fit() (before "
            f"experimental_distribute_dataset), got {type(dataset).__name__}"
        )
    if model is not None and not isinstance(model, keras.layers.Layer):
        raise TypeError(f"model must be a Keras model, got {type(model).__name__}")
    if step is not None and not callable(step):
        raise TypeError(f"step must be a function, got {type(step).__name__}")
    if step_args is not None and step_args not in STEP_ARGS:
        raise ValueError(f"step_args must be one of {STEP_ARGS}, got {step_args!r}")
    if input_context is not None and not isinstance(input_context, tf.distribute.InputContext):
        raise TypeError(
            f"input_context must be a tf.distribute.InputContext, got {type(input_context).__name__}"
        )
    strategy_given = strategy is not None
    strategy = strategy if strategy_given else tf.distribute.get_strategy()
    replicas = _replica_count(strategy, strategy_given, replicas, input_context)
    per_replica = input_context is not None
    spe = _steps_per_execution(model, steps_per_execution)

    stats = {"replicas": replicas, "strategy": type(strategy).__name__}
    report = Report(stats={**stats, "steps_per_execution": spe})
    spec = dataset.element_spec
    given = _dataset_batch(global_batch, replicas, per_replica)
    check_dataset(dataset, spec, replicas, report, per_replica, given)
    check_pipeline(dataset, report)
    if model is not None:
        check_model(model, strategy if strategy_given else None, report)
    if compile_step and (model is not None or step is not None):
        kind = _strategy_kind(strategy)
        check_step(spec, model, step, replicas, report, per_replica, kind, step_args)
    elif model is not None or step is not None:
        report.skipped.append("step tracing and XLA compile (compile_step=False)")
    if spe is not None:
        _check_steps_per_execution(spe, strategy, replicas, report)
    return report


# --------------------------------------------------------------------------------- arguments


def _replica_count(strategy, strategy_given: bool, replicas, input_context) -> int:
    """The replica count, from whichever of strategy, input context and ``replicas`` was given."""
    said = []
    if strategy_given:
        said.append(("the strategy", strategy.num_replicas_in_sync))
    if input_context is not None:
        count = input_context.num_replicas_in_sync
        said.append((f"input_context (num_replicas_in_sync={count})", count))
    if replicas is not None:
        said.append((f"replicas={replicas}", _positive_int("replicas", replicas)))
    if not said:
        return strategy.num_replicas_in_sync  # the current (default or entered) strategy
    (first, count), *others = said
    for who, other in others:
        if other != count:
            raise ValueError(f"{who} disagrees with {first}, which has {count}; pass one of them")
    return count


def _dataset_batch(global_batch, replicas: int, per_replica: bool) -> int | None:
    """``global_batch`` in the dataset's own units: per replica for a ``dataset_fn``'s dataset."""
    if global_batch is None:
        return None
    global_batch = _positive_int("global_batch", global_batch)
    if not per_replica:
        return global_batch
    if global_batch % replicas:
        raise ValueError(
            f"global_batch={global_batch} does not split over input_context's {replicas} replicas"
        )
    return global_batch // replicas


def _steps_per_execution(model, value) -> int | None:
    if value is not None:
        return _positive_int("steps_per_execution", value)
    if model is not None and getattr(model, "compiled", False):
        return int(getattr(model, "steps_per_execution", 1) or 1)
    return None


# --------------------------------------------------------------------------------- strategy

# The cross-device ops with which Keras 3 runs several steps per call on 2+ replicas; its default,
# collective all-reduce, fails there (reproduced with Keras 3.8 to 3.15, TF 2.19 and 2.21).
_LOOP_SAFE_CROSS_DEVICE_OPS = ("ReductionToOneDevice", "HierarchicalCopyAllReduce")


def _strategy_kind(strategy) -> str:
    """``"tpu"`` (any TPUStrategy), ``"mirrored"`` (MirroredStrategy) or ``"other"``."""
    import tensorflow as tf

    kinds = (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)
    if isinstance(strategy, kinds) or "TPUStrategy" in type(strategy).__name__:
        return "tpu"
    return "mirrored" if isinstance(strategy, tf.distribute.MirroredStrategy) else "other"


def _on_cpu_devices(strategy) -> bool:
    """True for a strategy whose replicas are all CPU devices: the simulated TPU, not GPUs."""
    devices = list(getattr(strategy.extended, "worker_devices", ()))
    return bool(devices) and all("CPU" in d.rpartition("/device:")[2].upper() for d in devices)


def _check_steps_per_execution(spe: int, strategy, replicas: int, report: Report) -> None:
    import keras

    report.checked.append("steps_per_execution")
    kind = _strategy_kind(strategy)
    ops = type(getattr(strategy.extended, "_cross_device_ops", None)).__name__
    if spe > 1 and kind == "mirrored" and replicas > 1 and keras.__version__.startswith("3."):
        if ops in _LOOP_SAFE_CROSS_DEVICE_OPS:
            return
        choose = (
            f"choose the value from the strategy: {spe} on TPUStrategy or one replica, else 1 "
            "(the reference script's fit_steps_per_execution)"
        )
        if _on_cpu_devices(strategy):  # the simulated TPU: judge for the target
            severity = "note"
            what = (
                f"steps_per_execution={spe} is for the TPU; only the simulated TPU you are "
                f"checking with (MirroredStrategy over {replicas} CPU devices) rejects it"
            )
            fix = f"Keep it in your TPU code. To run fit() on the simulated TPU as well, {choose}."
        else:
            severity = "warning"
            what = (
                f"steps_per_execution={spe} fails on the strategy you are checking with "
                f"(MirroredStrategy, {replicas} replicas), not on a TPU"
            )
            fix = (
                f"Keep it for the TPU; where you run fit() on this strategy, {choose}; or "
                "MirroredStrategy(cross_device_ops=ReductionToOneDevice())."
            )
        report.add(
            "spe-unsupported",
            severity,
            what,
            "model.compile(steps_per_execution=...)",
            "With Keras 3, fit() on a multi-replica MirroredStrategy fails with "
            "INVALID_ARGUMENT 'You must feed a value for placeholder tensor' (reproduced "
            "with Keras 3.8 to 3.15 when the gradients are summed by collective all-reduce "
            "ops, MirroredStrategy's default, as on the simulated TPU; closest upstream "
            "report keras-team/keras#19246). On TPUStrategy a value above 1 is what "
            "TensorFlow's TPU guide recommends (unverified on hardware).",
            fix,
        )
    elif spe == 1 and kind == "tpu":
        report.add(
            "spe-one-on-tpu",
            "note",
            "steps_per_execution=1 on a TPU",
            "model.compile(steps_per_execution=...)",
            "Each step returns to the Python host; on a TPU that overhead can exceed the "
            "step itself for small models.",
            "Try steps_per_execution=32 or more and compare the time per epoch.",
        )
