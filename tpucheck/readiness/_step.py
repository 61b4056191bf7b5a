"""Trace the training step once (never run it), watch its Python side effects while it traces
(what runs once, while tracing, and never again), and hand its graph to the XLA checks.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import inspect
import re
import sys
import types

from tpucheck import _tf
from tpucheck.readiness._creation import creation_finding, creation_in, distinct, stop_at_creation
from tpucheck.readiness._inputs import components, function_place, kind_of
from tpucheck.readiness._xla import (
    add_constant_seeds,
    add_value_shape_ops,
    check_graph_ops,
    compile_step,
    constant_seed_ops,
    soft_placement_when_traced,
)
from tpucheck.readiness.report import Finding, Report
from tpucheck.tpu_facts import HOST_ONLY_DTYPES

STAND_IN_BATCH = 8  # the batch a step is traced with when its own is unknown: any number will do


# How strategy.run calls the step with a batch: "unpack" is strategy.run(step, args=batch), a
# tuple batch becoming several arguments; "element" is strategy.run(step, args=(batch,)), the
# official examples' way, one argument that the step unpacks.
STEP_ARGS = ("unpack", "element")


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
            dims[0] = STAND_IN_BATCH  # XLA needs a number
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


def _binds(fn, count: int) -> bool:
    """Whether ``fn`` accepts ``count`` positional arguments (True when its signature is unknown)."""
    try:
        inspect.signature(fn).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # a builtin or C function without a signature
        pass
    return True


def _calling_convention(fn, spec, step_args: str | None) -> tuple | str:
    """The argument specs as strategy.run would pass the batch, or why not."""
    unpacked = tuple(spec) if isinstance(spec, tuple) else (spec,)
    conventions = {"unpack": unpacked, "element": (spec,)}
    if step_args is not None:
        return conventions[step_args]
    if len(unpacked) == 1:
        return unpacked
    for name in STEP_ARGS:  # unpacked first: strategy.run(step, args=batch)
        if _binds(fn, len(conventions[name])):
            return conventions[name]
    return (
        f"it takes neither the {len(unpacked)} parts of the dataset element (strategy.run(step, "
        "args=batch)) nor the element as one argument (strategy.run(step, args=(batch,))); "
        "pass step_args='unpack' or 'element' to say how strategy.run calls it"
    )


def _step_inputs(spec, model, step, step_args=None):
    """``(function, args spec, description)`` for the step to trace, or a reason it can't be."""
    import keras

    if step is not None:
        fn = getattr(step, "python_function", step)  # under a tf.function: traced afresh
        return fn, _calling_convention(fn, spec, step_args), f"step {function_place(fn)}"
    base = keras.Model.train_step
    if getattr(type(model), "train_step", base) is not base:  # a model's own, as GANs write
        fn = model.train_step
        return fn, (spec,), f"model '{model.name}'.train_step(), the step fit() runs"
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


# The check only traces the step: nothing differentiates its graph afterwards.
@_tf.forgetting_custom_gradients()
def check_step(spec, model, step, replicas, report, per_replica, strategy_kind, step_args) -> None:
    """Trace the step (or the model's forward and backward pass) with one replica's batch;
    ``step_args``: how strategy.run passes it (:data:`STEP_ARGS`; None tries both)."""
    import keras
    import tensorflow as tf

    fn, args, where = _step_inputs(spec, model, step, step_args)
    if step is not None:
        report.findings.append(_replica_equivalence(where))
    if isinstance(args, str):  # the check's own calling convention failed: never the user's bug
        report.skipped.append(f"tracing {where}: {args}")
        return
    if not _feedable(args):
        report.skipped.append(
            f"tracing {where}: its inputs include non-dense or host-only tensors (see above)"
        )
        return
    split = 1 if per_replica else replicas
    compile_args = _per_replica(args, split, stand_in=True)
    trace_args = compile_args or _per_replica(args, split, stand_in=False)
    # Traced with flat arguments: experimental_get_compiler_ir only takes a flat list of specs.
    flat_specs = tf.nest.flatten(trace_args)
    created: list = []

    def flat_step(*flat):
        with stop_at_creation(created):
            return fn(*tf.nest.pack_sequence_as(trace_args, list(flat)))

    jit = tf.function(flat_step, jit_compile=True)
    soft = soft_placement_when_traced()
    values = step_values(fn)
    before = _fingerprints(values)
    unbuilt = [
        v for v in values.values() if isinstance(v, keras.optimizers.Optimizer) and not v.built
    ]
    failure = None
    with capture_print() as printed, _built_in_their_scopes(unbuilt):
        try:
            concrete = jit.get_concrete_function(*flat_specs)
        except Exception as err:  # any failure here is the user's step failing to trace
            failure = err
        finally:
            for optimizer in unbuilt:
                optimizer.built = False  # built without variables (plain SGD): leave it as it was
    found = creation_in(failure) if failure is not None else None  # it failed creating one
    creations = distinct([c for c in created if c is not None] + [found] * (found is not None))
    if failure is not None and not creations:  # not while creating variables: the step fails
        _add_trace_error(report, where, failure)
        return
    if creations:
        unexplained = failure if found is None else None
        _add_creations(report, creations, model, step, where, replicas, strategy_kind, unexplained)
        return
    report.checked.append("step trace")
    changed = [n for n, fp in _fingerprints(step_values(fn)).items() if before.get(n, fp) != fp]
    add_side_effects(report, where, printed, changed, frozen_random(fn, values))
    graph = concrete.graph.as_graph_def()
    seeded = constant_seed_ops(graph)
    if seeded:
        add_constant_seeds(report, f"{where}; op {', '.join(seeded[:3])}")
    reported, value_shape = check_graph_ops(graph, where, report, soft)
    if compile_args is None:
        report.skipped.append(
            "full XLA compile: the step's inputs have dimensions of unknown size (see above)"
        )
        explained = set()
    else:  # the same specs as the trace: no second trace
        explained = compile_step(jit, flat_specs, where, reported, report, soft)
    if explained is not None:
        add_value_shape_ops(report, where, value_shape, explained)


@contextlib.contextmanager
def _built_in_their_scopes(optimizers):
    """While the step is traced, each unbuilt optimizer builds inside its own strategy's scope:
    outside it, it would fail before creating anything ('Need to be inside "with
    strategy.scope()"'), ending the trace; in it, its slots reach the check's creator."""
    import tensorflow as tf

    wrapped = []
    for optimizer in optimizers:
        strategy = getattr(optimizer, "_distribution_strategy", None)
        if strategy is None or strategy is tf.distribute.get_strategy():
            continue
        original = optimizer.build

        def build(*args, _original=original, _strategy=strategy, **kwargs):
            with _strategy.scope():
                return _original(*args, **kwargs)

        optimizer.__dict__["build"] = build  # past Keras' attribute tracking
        wrapped.append(optimizer)
    try:
        yield
    finally:
        for optimizer in wrapped:
            optimizer.__dict__.pop("build", None)


def _add_creations(report: Report, creations, model, step, where, replicas, kind, failure):
    """Report each thing the trace would have created (what fit() builds itself is no finding),
    and what of the step that leaves unchecked."""
    fit_builds = False
    for creation in creations:
        fit_builds = step is None and (
            creation.kind == "lazy" or creation.obj is getattr(model, "optimizer", None)
        )
        if fit_builds:  # fit() builds the model, its metrics and model.optimizer, in the scope
            report.skipped.append(
                f"tracing {where}: it would build {creation.owner}, which fit() builds itself; "
                "build the model (call it once or use keras.Input) and its optimizer to have it "
                "traced"
            )
        else:
            report.findings.append(creation_finding(creation, where, replicas, kind))
    last = creations[-1]
    if fit_builds:  # said above
        pass
    elif failure is None and last.kind == "lazy":
        report.skipped.append(
            f"tracing {where} past the point where {last.owner} would build itself"
        )
    elif failure is None:
        owners = ", ".join(dict.fromkeys(c.owner for c in creations))
        report.skipped.append(
            f"side effects, XLA ops and the XLA compile of {where}: it would create variables "
            f"({owners}); create or build them first"
        )
    else:  # the trace went on past them, and then failed
        report.skipped.append(
            f"tracing {where} past the variables it would create: it then failed "
            f"({type(failure).__name__}: {str(failure).strip().splitlines()[-1][:200]})"
        )


def _replica_equivalence(where: str) -> Finding:
    return Finding(
        "replica-equivalence",
        "note",
        "how the step scales its loss is invisible to tracing",
        where,
        "Averaging the loss over the per-replica batch (tf.reduce_mean) and raising the learning "
        "rate to make up for it is the most common custom-loop mistake: it traces, compiles and "
        "trains, with gradients that depend on the replica count. Only a run can show it.",
        "Prove it on real numbers: train the same model from the same weights for a few steps "
        "on these replicas and on one device (tf.distribute.OneDeviceStrategy), on the same "
        "global batches, and compare the weights: they agree to float rounding when each "
        "replica divides its loss by the global batch (tf.nn.compute_average_loss). The "
        "self-test does so for the reference script's step (python -m tpucheck selftest).",
    )


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
            "Python values inside it, so it cannot even be traced; TPUStrategy.run refuses a "
            "step that is not traced (tensorflow/tensorflow#41074)."
        )
        fix = (
            "Keep the value a tensor inside the step (return it, or add it to a Keras metric) "
            "and call .numpy() on the result outside."
        )
    else:
        what = f"the step cannot be traced into a graph ({type(err).__name__})"
        why = (
            "A TPU runs only a traced, compiled step (TPUStrategy.run refuses pure eager "
            f"execution, tensorflow/tensorflow#41074). Tracing failed with {detail}"
        )
        fix = (
            "Make the step work under @tf.function first: tensor ops only, no Python "
            "conversions of tensor values (float(), bool(), .numpy())."
        )
    report.add("step-not-traceable", "error", what, place, why, fix)


# ------------------------------------------------------------------- Python side effects


def step_values(fn) -> dict:
    """The Python values a step can change unnoticed: the closures, globals and attributes of
    ``self`` that its code names."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    names = {name for block in _code_objects(code) for name in block.co_names}
    glob = getattr(fn, "__globals__", {})
    found = {
        name: glob[name]
        for name in names
        if name in glob and not isinstance(glob[name], types.ModuleType)
    }
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            found[name] = cell.cell_contents
    owner = getattr(getattr(fn, "__self__", None), "__dict__", {})
    found.update({f"self.{n}": owner[n] for n in names if not n.startswith("_") and n in owner})
    return found


def _fingerprints(values: dict) -> dict:
    return {name: _fingerprint(value) for name, value in values.items()}


def _code_objects(code) -> list:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _code_objects(const)
    return found


def _fingerprint(value):
    if isinstance(value, (list, dict, set, bytearray)):
        return ("container", id(value), len(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    return ("object", id(value))


@contextlib.contextmanager
def capture_print():
    """Record Python ``print`` calls made by user code while the step is traced."""
    calls: list[str] = []
    real_print = builtins.print

    def recording_print(*args, **kwargs):
        caller = sys._getframe(1)
        module = caller.f_globals.get("__name__", "")
        if module.split(".")[0] in ("tensorflow", "keras", "absl"):
            return real_print(*args, **kwargs)  # the libraries' own messages pass through
        text = kwargs.get("sep", " ").join(str(a) for a in args)
        calls.append(f"{caller.f_code.co_filename}:{caller.f_lineno}: {text[:80]}")

    builtins.print = recording_print
    try:
        yield calls
    finally:
        builtins.print = real_print


def frozen_random(fn, values: dict) -> list[str]:
    """Python or NumPy random generators and clocks the step's own code uses."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    glob = getattr(fn, "__globals__", {})
    hits = set()
    for block in _code_objects(code):
        instructions = list(dis.get_instructions(block))
        for i, ins in enumerate(instructions):
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
                continue
            obj = glob.get(ins.argval)
            module = obj.__name__ if isinstance(obj, types.ModuleType) else ""
            following = instructions[i + 1].argval if i + 1 < len(instructions) else None
            origin = (getattr(obj, "__module__", "") or "").split(".")[0]
            if module in ("random", "time", "datetime", "numpy.random"):
                hits.add(ins.argval)
            elif module == "numpy" and following == "random":  # np.random.<anything>
                hits.add(f"{ins.argval}.random")
            elif callable(obj) and not module and origin in ("random", "time"):
                hits.add(ins.argval)  # from time import time, from random import random
    for name, value in values.items():  # generator objects held by the step
        if type(value).__module__.startswith(("numpy.random", "random")):
            hits.add(name)
    return sorted(hits)


def add_side_effects(report, where, printed, changed, random_names) -> None:
    """Report Python side effects and frozen random numbers found while tracing."""
    if printed or changed:
        effects = [f"print() at {p}" for p in printed[:2]]
        effects += [f"changes Python variable '{name}'" for name in changed]
        report.add(
            "python-side-effect",
            "warning",
            "the step has Python side effects: " + "; ".join(effects),
            where,
            "Python code in a step runs once, while it is traced, not at every step: on a "
            "TPU the compiled step repeats only the TensorFlow ops. A print shows once; a "
            "list gets one symbolic tensor instead of one value per step.",
            "Use tf.print for messages, return values from the step (or update a Keras "
            "metric) instead of appending to Python lists or globals.",
        )
    if random_names:
        report.add(
            "frozen-random",
            "warning",
            f"the step calls Python-side random numbers or clocks: {', '.join(random_names)}",
            where,
            "They are evaluated once, while tracing, and frozen into the compiled step as "
            "constants: every step on the TPU sees the same 'random' value or time.",
            "Use TensorFlow's random ops (tf.random.stateless_uniform with a step-dependent "
            "seed, or a tf.random.Generator) and measure time outside the step.",
        )
