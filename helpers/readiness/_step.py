"""Trace the training step once (never run it) and hand its graph to the XLA checks."""

from __future__ import annotations

import inspect
import re

from helpers.readiness._inputs import components, kind_of
from helpers.readiness._seeds import add_constant_seeds, constant_seed_ops
from helpers.readiness._side_effects import (
    Watch,
    add_side_effects,
    capture_print,
    frozen_random,
    unbuilt_optimizers,
)
from helpers.readiness._xla import add_value_shape_ops, check_graph_ops, compile_step
from helpers.readiness.report import Finding, Report
from helpers.tpu_facts import HOST_ONLY_DTYPES, TILE_ROWS


def _per_replica(spec, replicas: int, stand_in: bool):
    """The element spec as one replica sees it; with ``stand_in``, fully static or None."""
    import tensorflow as tf

    def one(leaf):
        if not isinstance(leaf, tf.TensorSpec) or leaf.shape.rank in (None, 0):
            return leaf
        dims = list(leaf.shape)
        if dims[0] is not None and dims[0] % replicas == 0:
            dims[0] //= replicas
        elif dims[0] is None and stand_in:
            dims[0] = TILE_ROWS  # a stand-in batch: XLA needs a number, any one will do
        return tf.TensorSpec(dims, leaf.dtype, leaf.name)

    converted = tf.nest.map_structure(one, spec)
    if stand_in:
        for _, leaf in components(converted):
            if kind_of(leaf) != "dense" or not leaf.shape.is_fully_defined():
                return None
    return converted


def _feedable(spec) -> bool:
    """True when every leaf is a dense tensor of a type a TPU can hold."""
    return all(
        kind_of(leaf) == "dense" and leaf.dtype.name not in HOST_ONLY_DTYPES
        for _, leaf in components(spec)
    )


def _step_inputs(spec, model, step):
    """``(function, args spec, description)`` for the step to trace, or a reason it can't be."""
    if step is not None:
        args = tuple(spec) if isinstance(spec, tuple) else (spec,)
        return _python_function(step), args, _describe_function(step)
    x = spec[0] if isinstance(spec, tuple) else spec
    if isinstance(x, dict):  # Keras ignores extra keys; leave out what only the host can hold
        x = {k: v for k, v in x.items() if _feedable(v)}
    return _forward_backward(model), (x,), f"the forward and backward pass of model '{model.name}'"


def _forward_backward(model):
    import tensorflow as tf

    def forward_backward(x):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            loss = tf.add_n(
                [tf.reduce_mean(tf.cast(o, tf.float32)) for o in tf.nest.flatten(outputs)]
            )
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, [g for g in grads if g is not None]

    return forward_backward


def _python_function(fn):
    """The plain Python function under a ``tf.function`` (tracing it afresh shows its effects)."""
    return getattr(fn, "python_function", fn)


def _describe_function(fn) -> str:
    fn = inspect.unwrap(_python_function(fn))
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        return f"step {name}() at {inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return f"step {name}()"


def check_step(spec, model, step, replicas: int, report: Report, per_replica: bool = False) -> None:
    """Trace the step (or the model's forward and backward pass) with one replica's batch.

    ``per_replica``: the dataset already yields one replica's batch (a ``dataset_fn``'s).
    """
    import tensorflow as tf

    fn, args, where = _step_inputs(spec, model, step)
    if not _feedable(args):
        report.skipped.append(
            f"tracing {where}: its inputs include non-dense or host-only tensors (see above)"
        )
        return
    unbuilt = unbuilt_optimizers(fn)
    if unbuilt:
        severity = "error" if replicas > 1 else "note"
        report.findings.append(
            Finding(
                "optimizer-not-built",
                severity,
                "the step uses an optimizer whose slot variables do not exist yet",
                f"{where}, optimizer {', '.join(unbuilt)}",
                "Keras 3 optimizers create their slots on the first apply_gradients; inside "
                "strategy.run with 2 or more replicas that fails (seen with MirroredStrategy, "
                "Keras 3.15). The check does not trace the step, so that it does not build the "
                "optimizer for you.",
                "with strategy.scope(): optimizer.build(model.trainable_variables) before "
                "training (helpers.loops.build_optimizer).",
            )
        )
        report.skipped.append(f"tracing {where}: build the optimizer first")
        return
    split = 1 if per_replica else replicas
    compile_args = _per_replica(args, split, stand_in=True)
    trace_args = compile_args or _per_replica(args, split, stand_in=False)
    # Traced with flat arguments: experimental_get_compiler_ir only takes a flat list of specs.
    flat_specs = tf.nest.flatten(trace_args)

    def flat_step(*flat):
        return fn(*tf.nest.pack_sequence_as(trace_args, list(flat)))

    jit = tf.function(flat_step, jit_compile=True)
    watch = Watch(fn)
    with capture_print() as printed:
        try:
            concrete = jit.get_concrete_function(*flat_specs)
        except Exception as err:  # any failure here is the user's step failing to trace
            _add_trace_error(report, where, err)
            return
    report.checked.append("step trace")
    add_side_effects(report, where, printed, watch.changed(), frozen_random(fn))
    seeded = constant_seed_ops(concrete.graph.as_graph_def())
    if seeded:
        add_constant_seeds(report, f"{where}; op {', '.join(seeded[:3])}")
    reported, value_shape = check_graph_ops(concrete, where, report)
    if compile_args is None:
        report.skipped.append(
            "full XLA compile: the step's inputs have dimensions of unknown size (see above)"
        )
        explained = set()
    else:  # the same specs as the trace: no second trace
        explained = compile_step(jit, flat_specs, where, reported, report)
    if explained is not None:
        add_value_shape_ops(report, where, value_shape, explained)


def _add_trace_error(report: Report, where: str, err: Exception) -> None:
    message = str(err)
    located = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', message)
    place = f"{where}; {located[-1][0]}:{located[-1][1]}" if located else where
    last = [line.strip() for line in message.strip().splitlines() if line.strip()]
    detail = f"{type(err).__name__}: {last[-1] if last else ''}"
    if "numpy" in message and isinstance(err, AttributeError):
        what = "the step calls .numpy() on a tensor"
        why = (
            ".numpy() copies a value from the device to Python. A compiled TPU step has no "
            "Python values inside it, so it cannot even be traced."
        )
        fix = (
            "Keep the value a tensor inside the step (return it, or add it to a Keras metric) "
            "and call .numpy() on the result outside."
        )
    else:
        what = f"the step cannot be traced into a graph ({type(err).__name__})"
        why = f"A TPU runs only a traced, compiled step. Tracing failed with {detail}"
        fix = (
            "Make the step work under @tf.function first: tensor ops only, no Python "
            "conversions of tensor values (float(), bool(), .numpy())."
        )
    report.findings.append(Finding("step-not-traceable", "error", what, place, why, fix))
