"""Keras ``compile``/``fit`` on a distribution strategy: the choices that depend on it (notebook 03_keras_compile_and_fit).

- the global batch itself: :mod:`tpucheck.batches` (``plan_batch``);
- :func:`steps_per_execution_for`: how many steps ``fit`` may run per call on *this* strategy;
- :func:`whole_executions`: a number of steps rounded down to whole calls (Keras rounds up).

Notebook 03_keras_compile_and_fit writes the learning-rate rule in plain TensorFlow, and takes
the ``steps_per_execution`` choice from ``train_tpu.fit_steps_per_execution`` and the epoch of
whole calls from ``train_tpu.epoch_plan``.
"""

from __future__ import annotations

from typing import NamedTuple

from tpucheck.batches import positive_int

__all__ = [
    "cross_device_ops_name",
    "steps_per_execution_for",
    "StepsChoice",
    "whole_executions",
]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

# Reproduced on this project's machines with TF 2.19.1 and 2.21.0, Keras 3.8 to 3.15: under a
# MirroredStrategy whose cross-device ops are collective all-reduces (its default), Keras' fit
# with steps_per_execution > 1 fails on 2 or more replicas. The collective ops sit inside the
# tf.while_loop / tf.cond that Keras builds for several steps per call. With ReductionToOneDevice
# or HierarchicalCopyAllReduce the same fit runs and gives the same losses as one device.
COLLECTIVE_SPE_FAILURE = (
    "Keras 3 fit() with steps_per_execution > 1 fails when the gradients are summed by collective "
    "all-reduce ops inside its multi-step loop ('You must feed a value for placeholder tensor')"
)
_LOOP_SAFE_CROSS_DEVICE_OPS = ("ReductionToOneDevice", "HierarchicalCopyAllReduce")


class StepsChoice(NamedTuple):
    """``steps_per_execution`` for ``model.compile`` and the reason for it."""

    value: int
    reason: str


def cross_device_ops_name(strategy) -> str | None:
    """The class name of a ``MirroredStrategy``'s cross-device ops, or None for other strategies.

    ``MirroredStrategy()`` without ``cross_device_ops`` uses ``CollectiveAllReduce``.
    TensorFlow has no public accessor for it; this reads the strategy's private attribute and
    returns None when it is not there.
    Taught in notebooks 02, 03.
    """
    ops = getattr(getattr(strategy, "extended", None), "_cross_device_ops", None)
    return type(ops).__name__ if ops is not None else None


def steps_per_execution_for(strategy, wanted: int = 32) -> StepsChoice:
    """Pick ``steps_per_execution`` for ``model.compile`` on ``strategy``; return it and why.

    The rule is the reference script's ``train_tpu.fit_steps_per_execution``:

    - ``TPUStrategy``: ``wanted``. Each call from the host costs more than a small step on the
      TPU, so running many steps per call is the main speed knob (unverified on hardware here).
    - One replica: ``wanted``; fewer Python round trips.
    - ``MirroredStrategy`` with 2+ replicas: 1 with its default collective all-reduce, which
      Keras 3 cannot run inside its multi-step loop; ``wanted`` with ``ReductionToOneDevice`` or
      ``HierarchicalCopyAllReduce``, which this project checked on CPU devices.
    - Anything else with 2+ replicas: 1, because it was not checked.

    Returns a ``(value, reason)`` named tuple.
    Taught in notebook 03.
    """
    import train_tpu

    positive_int("steps_per_execution", wanted)
    replicas = strategy.num_replicas_in_sync
    name = type(strategy).__name__
    # The rule is the reference script's (its part "fit"); the reasons and the cross-device
    # ops with which several steps do run on 2+ replicas are what this adds.
    if train_tpu.fit_steps_per_execution(strategy, wanted) == wanted:
        if replicas == 1:
            return StepsChoice(wanted, f"one replica: {wanted} steps per call save Python overhead")
        return StepsChoice(
            wanted,
            f"{name}: {wanted} steps per host call hide the host round trip "
            "(the main speed knob on a TPU; unverified on hardware here)",
        )
    ops = cross_device_ops_name(strategy)
    if ops in _LOOP_SAFE_CROSS_DEVICE_OPS:
        return StepsChoice(
            wanted,
            f"{name} with {replicas} replicas and {ops}: no collective ops inside Keras' "
            f"multi-step loop, so {wanted} steps per call run",
        )
    if ops == "CollectiveAllReduce":
        return StepsChoice(
            1,
            f"{name} with {replicas} replicas and its default collective all-reduce: "
            f"{COLLECTIVE_SPE_FAILURE}",
        )
    return StepsChoice(
        1,
        f"{name} with {replicas} replicas and cross-device ops {ops}: steps_per_execution > 1 "
        "was not checked with it here, so 1 is the safe choice",
    )


def whole_executions(steps: int, steps_per_execution: int) -> int:
    """``steps`` rounded down to a multiple of ``steps_per_execution``.

    Keras 3 runs whole executions: on a dataset that repeats, ``fit(steps_per_epoch=58)`` with
    ``steps_per_execution=32`` trains 64 steps per epoch, and ``evaluate`` or ``predict`` with
    ``steps=9`` reads 32 batches (its ``EpochIterator`` counts steps in whole executions; seen
    with Keras 3.13 and 3.15). Pass the result as ``steps_per_epoch`` so that an epoch is what
    it says; evaluate and predict on a finite dataset instead, which ends cleanly inside an
    execution. Rounding down drops the rest of a pass (58 steps in calls of 32: 26 dropped);
    for an epoch, ``train_tpu.epoch_plan`` chooses the steps per call that leave under 1% out.
    """
    for label, value in (("steps", steps), ("steps_per_execution", steps_per_execution)):
        positive_int(label, value)
    if steps < steps_per_execution:
        raise ValueError(
            f"{steps} steps are fewer than one execution of {steps_per_execution}: on repeating"
            f" data Keras would run {steps_per_execution}. Choose steps_per_execution <= {steps}."
        )
    return steps // steps_per_execution * steps_per_execution
