"""Custom training loops for ``tf.distribute`` strategies (notebook 04_custom_training_loops).

The step and the multi-step loop are the reference script's (``train_tpu.make_train_step``,
``train_tpu.many_steps``); :func:`make_train_steps` calls them. :func:`check_replica_equivalence`
proves a step function right: trained for a few steps on many replicas and on one, the same
model must end with the same weights.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from helpers import tf_internals
from tpucheck.batches import per_replica_batch, positive_int

__all__ = [
    "build_optimizer",
    "check_replica_equivalence",
    "compare_runs",
    "Equivalence",
    "make_train_steps",
    "ReplicaMismatchError",
]


def build_optimizer(strategy, optimizer, model):
    """Create the optimizer's slot variables inside ``strategy.scope()`` now, not lazily.

    Keras 3 optimizers such as Adam create their slots on the first ``apply_gradients``. Inside
    ``strategy.run`` with 2 or more replicas that first call fails (``fn_with_cond``); building
    first avoids it. Returns the optimizer.
    """
    with strategy.scope():
        optimizer.build(model.trainable_variables)
    return optimizer


def _many_steps(strategy, replica_step):
    """Wrap ``replica_step(images, labels) -> loss`` into ``fn(iterator, steps) -> mean loss``,
    the reference script's ``train_tpu.many_steps`` (``steps`` steps in one call)."""
    import tensorflow as tf

    import train_tpu

    run_steps = train_tpu.many_steps(strategy, replica_step)

    def call(iterator, steps):
        # A tensor, not a Python int: one trace serves every number of steps.
        return run_steps(iterator, tf.convert_to_tensor(steps, tf.int32))

    # One run_steps per model, on purpose: not the "retracing" TensorFlow would warn of.
    tf_internals.omit_retracing_warning(run_steps)
    call.function = run_steps  # the tf.function itself, e.g. to count its traces
    return call


def make_train_steps(strategy, model, optimizer, global_batch_size: int):
    """``train_steps(iterator, steps) -> mean loss``: ``train_tpu.make_train_step`` run by
    ``train_tpu.many_steps``; ``steps`` may be a Python int."""
    import train_tpu

    return _many_steps(strategy, train_tpu.make_train_step(model, optimizer, global_batch_size))


class ReplicaMismatchError(AssertionError):
    """Training on many replicas and on one replica ended with different weights."""


@dataclass
class Equivalence:
    """What :func:`check_replica_equivalence` measured: the runs agree when the largest
    difference of their final weights is below ``rtol`` times the largest update of a weight."""

    replicas: int
    reference_replicas: int
    steps: int
    max_weight_diff: float
    max_update: float
    rtol: float
    losses: tuple[float, float]
    per_variable: dict[str, float] = field(default_factory=dict)
    unit: str = "replicas"  # what the two counts count: "devices" for a sharded model (12)

    @property
    def tolerance(self) -> float:
        return self.rtol * self.max_update

    @property
    def ok(self) -> bool:
        return self.max_weight_diff <= self.tolerance

    @property
    def worst_variable(self) -> str:
        return max(self.per_variable, key=self.per_variable.get)

    def check(self) -> Equivalence:
        """Return ``self`` when the runs agree; raise :class:`ReplicaMismatchError` otherwise."""
        if not self.ok:
            raise ReplicaMismatchError(
                f"weights after {self.steps} steps differ between {self.replicas} {self.unit} and "
                f"{self.reference_replicas}: max difference {self.max_weight_diff:.3g} (in "
                f"{self.worst_variable}) > tolerance {self.tolerance:.3g}. Mean losses "
                f"{self.losses[0]:.5g} vs {self.losses[1]:.5g}. Is each replica's loss divided by "
                "the global batch (tf.nn.compute_average_loss) and the regularisation loss "
                "scaled (tf.nn.scale_regularization_loss)?"
            )
        return self

    def __str__(self) -> str:
        verdict = "same weights" if self.ok else "DIFFERENT weights"
        return (
            f"{verdict}: {self.replicas} {self.unit} vs {self.reference_replicas}, "
            f"{self.steps} steps\n"
            f"  max weight difference {self.max_weight_diff:.3g} "
            f"(tolerance {self.tolerance:.3g} = {self.rtol:g} x largest update "
            f"{self.max_update:.3g})\n"
            f"  mean loss {self.losses[0]:.6g} vs {self.losses[1]:.6g}"
        )


def _default_optimizer():
    import keras

    # Plain SGD: the update is proportional to the gradient, so a wrongly scaled loss shows up
    # in the weights. Adam divides the scale away and would hide most of such a bug.
    return keras.optimizers.SGD(learning_rate=0.1)


def _layers(layer):
    for child in getattr(layer, "layers", ()):
        yield child
        yield from _layers(child)


def _refuse_randomness(model) -> None:
    import keras

    dropout = [
        layer.name
        for layer in _layers(model)
        if isinstance(layer, keras.layers.Dropout) and layer.rate > 0
    ]
    if dropout:
        raise ValueError(
            f"the model has dropout ({', '.join(dropout)}): each replica draws its own random "
            "mask, so the runs cannot agree. Build the model without dropout for the check."
        )


def _train(strategy, make_model, make_optimizer, make_steps, x, y, batch, steps, weights):
    import tensorflow as tf

    with strategy.scope():
        model = make_model()
        if weights is not None:
            model.set_weights(weights)
        optimizer = make_optimizer()
    _refuse_randomness(model)
    build_optimizer(strategy, optimizer, model)
    start = [w.copy() for w in model.get_weights()]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    train_steps = make_steps(strategy, model, optimizer, batch)
    loss = float(train_steps(iter(strategy.experimental_distribute_dataset(ds)), steps))
    names = [v.path if hasattr(v, "path") else v.name for v in model.weights]
    return start, model.get_weights(), loss, names


def check_replica_equivalence(
    strategy,
    make_model: Callable,
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    steps: int = 3,
    make_steps: Callable = make_train_steps,
    make_step: Callable | None = None,
    rtol: float = 1e-3,
) -> Equivalence:
    """Train the same model on ``strategy`` and on one CPU replica; compare the final weights.

    Both runs start from the same weights and see the first ``steps * global_batch_size`` rows
    of ``x``, ``y`` in order; ``make_model()`` and the optimizer (SGD, learning rate 0.1) are
    built in each strategy's scope. ``make_steps(strategy, model, optimizer, global_batch_size)``
    builds the training function under test (default :func:`make_train_steps`). Or
    ``make_step(model, optimizer)`` returns a per-replica step as the official examples write
    it, ``step(inputs)`` or ``step(images, labels)``, returning its loss or nothing (then the
    losses are NaN); the readiness check (notebook 10_tpu_readiness_check) points here.

    A correct step makes the replica count invisible: the weights agree up to float rounding.
    Returns an :class:`Equivalence`; ``.check()`` raises on a mismatch.
    """
    positive_int("steps", steps)
    if not rtol > 0:
        raise ValueError(f"rtol must be positive, got {rtol!r}")
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        raise ValueError(
            "the strategy has 1 replica, as the reference: nothing to compare. "
            "Pass the multi-replica strategy (e.g. train_tpu.connect(8))."
        )
    per_replica_batch(global_batch_size, replicas)
    needed = steps * global_batch_size
    if len(x) < needed or len(y) < needed:
        raise ValueError(
            f"{steps} steps of {global_batch_size} examples need {needed} rows; got {len(x)}"
        )
    x, y = np.asarray(x[:needed]), np.asarray(y[:needed])
    import tensorflow as tf

    if make_step is not None:

        def make_steps(strategy_, model, optimizer, batch):
            step = make_step(model, optimizer)
            try:  # step(images, labels), or step(inputs) as the official examples write it
                inspect.signature(step).bind(None, None)
                unpack = True
            except (TypeError, ValueError):
                unpack = False

            def replica_step(images, labels):
                loss = step(images, labels) if unpack else step((images, labels))
                return tf.constant(float("nan")) if loss is None else loss

            return _many_steps(strategy_, replica_step)

    # One replica on the first CPU device: it lives beside a simulated TPU or a TPU.
    reference = tf.distribute.OneDeviceStrategy("/cpu:0")
    args = (make_model, _default_optimizer, make_steps, x, y, global_batch_size, steps)
    start, multi, multi_loss, names = _train(strategy, *args, weights=None)
    _, single, single_loss, _ = _train(reference, *args, weights=start)

    return compare_runs(
        (replicas, reference.num_replicas_in_sync),
        steps,
        names,
        start,
        (multi, single),
        (multi_loss, single_loss),
        rtol,
    )


def compare_runs(
    replicas, steps, names, start, finals, losses, rtol, unit="replicas"
) -> Equivalence:
    """The :class:`Equivalence` of two runs from the same ``start`` weights.

    ``replicas`` and ``losses`` are (run, reference) pairs; ``finals`` the two runs' final
    weights, in the order of ``names``. Also used by ``jax_port`` (notebook 12_keras3_on_jax).
    """
    multi, single = finals
    per_variable = {
        name: float(np.max(np.abs(a - b), initial=0.0))
        for name, a, b in zip(names, multi, single, strict=True)
    }
    max_update = max(
        float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(single, start, strict=True)
    )
    if max_update == 0.0:
        raise ValueError(
            f"no weight changed in {steps} steps on one replica, so equal weights would prove "
            "nothing: use a learning rate above 0 and a trainable model"
        )
    return Equivalence(
        replicas=replicas[0],
        reference_replicas=replicas[1],
        steps=steps,
        max_weight_diff=max(per_variable.values()),
        max_update=max_update,
        rtol=rtol,
        losses=tuple(losses),
        per_variable=per_variable,
        unit=unit,
    )
