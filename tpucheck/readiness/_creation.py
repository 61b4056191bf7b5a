"""What a step would create while it is traced: optimizer slots, metric variables, layer weights.

A variable creator records each, named from the Python stack, and goes on past slots and
variables made in the step with stand-ins it takes back afterwards, so nothing of the user's is
built. A layer or metric building itself stops the trace: going on would build the user's model.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from dataclasses import dataclass, field

from tpucheck.readiness.report import Finding

# Frames of these packages are the machinery, not the user's code that asked for the variable.
_LIBRARIES = ("tensorflow", "keras", "tf_keras", "absl", "contextlib", "tpucheck")
# The check's own module, which traces the step: frames of it and beyond are never the user's.
_STEP_MODULE = "tpucheck.readiness._step"


class _Stopped(Exception):
    """Raised by the creator: the trace stops before any variable exists."""


@dataclass(frozen=True)
class Creation:
    """A variable a traced step would create, its owner and where it was asked for. ``kind``:
    ``optimizer`` (slots), ``lazy`` (a layer or metric building itself on its first call) or
    ``every-call`` (a variable, metric or layer made inside the step, anew at each trace)."""

    kind: str
    variable: str
    owner: str
    line: str | None
    obj: object = field(default=None, compare=False, repr=False)  # the owner itself


# Keras' methods that create variables: a failure inside one of them is a failure to create
# variables (e.g. an optimizer made in a strategy's scope, built outside it: "Need to be inside
# ..."). A failure elsewhere in a build() (a wrong shape) stays the step's own error.
_CREATING = frozenset(
    {"add_variable", "add_variable_from_reference", "add_optimizer_variables", "add_weight"}
)


def _owner(frames) -> tuple[object | None, bool]:
    """The innermost Keras optimizer, metric or layer creating variables in ``frames`` (innermost
    first), and whether it was being constructed (its ``__init__`` is on the stack)."""
    import keras

    kinds = (keras.optimizers.Optimizer, keras.metrics.Metric, keras.layers.Layer)
    for frame in frames:
        obj = frame.f_locals.get("self")
        if isinstance(obj, kinds) and frame.f_code.co_name in _CREATING:
            constructing = any(
                f.f_code.co_name == "__init__" and f.f_locals.get("self") is obj for f in frames
            )
            return obj, constructing
    return None, False


def _in_step(frames):
    """``(frame, whether it is the user's code)`` for ``frames`` (innermost first) up to the
    check's own code, which traces the step."""
    for frame in frames:
        module = frame.f_globals.get("__name__", "")
        if module == _STEP_MODULE:
            return
        yield frame, module.split(".")[0] not in _LIBRARIES


def _user_line(frames) -> str | None:
    """The innermost line of the user's own code, within the traced step (not its caller)."""
    for frame, user in _in_step(frames):
        if user and "__autograph_generated" not in frame.f_code.co_filename:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return None


def _classify(frames, variable: str, bare_variable: bool) -> Creation | None:
    """What is being created in ``frames`` (innermost first); None when nothing Keras-made is."""
    import keras

    owner, constructing = _owner(frames)
    line = _user_line(frames)
    if owner is None:
        return Creation("every-call", variable, "a tf.Variable", line) if bare_variable else None
    role = next(
        word
        for kind, word in (
            (keras.optimizers.Optimizer, "optimizer"),
            (keras.metrics.Metric, "metric"),
            (keras.Model, "model"),
            (keras.layers.Layer, "layer"),
        )
        if isinstance(owner, kind)
    )
    label = f"{role} {type(owner).__name__} '{getattr(owner, 'name', '?')}'"
    if constructing:
        return Creation("every-call", variable, label, line)
    if isinstance(owner, keras.optimizers.Optimizer):
        owner.built = False  # its build() set this before creating the slots it never got
        return Creation("optimizer", variable, label, line, owner)
    return Creation("lazy", variable, label, line, owner)


def creation_in(err: BaseException) -> Creation | None:
    """The variable creation a trace failed in (read from the tracebacks), or None."""
    frames, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain = [frame for frame, _ in traceback.walk_tb(err.__traceback__)]
        frames += reversed(chain)  # innermost first
        err = err.__cause__ or err.__context__
    return _classify(frames, "", bare_variable=False)


def _holders(frames, creation: Creation) -> list:
    """The objects a stand-in may be stored in: the optimizer whose slot it is, and the
    ``self`` of the user's own methods that asked for it (not Keras layers or models)."""
    import keras

    found = [creation.obj] if creation.kind == "optimizer" else []
    for frame, user in _in_step(frames):
        obj = frame.f_locals.get("self")
        if user and hasattr(obj, "__dict__") and not isinstance(obj, keras.layers.Layer):
            found.append(obj)
    trackers = [getattr(obj, "_tracker", None) for obj in found]  # Keras' ids of what it holds
    return found + [t for t in trackers if t is not None and hasattr(t, "__dict__")]


def _copy(value, depth: int = 2):
    """A copy of a list or set, or of a dict with copies of its containers, ``depth`` dicts deep
    (an object's attributes, and one level into a dict among them); else None."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, set):
        return set(value)
    if isinstance(value, dict) and depth:
        return {k: (v, _copy(v, depth - 1)) for k, v in value.items()}
    return None


def _put_back(value, copy) -> None:
    """Give a container its copied contents back, in place (others may hold it), by the base
    classes' methods: Keras' tracked lists would inspect what goes in."""
    if isinstance(value, list):
        list.clear(value)
        list.extend(value, copy)
    elif isinstance(value, set):
        set.clear(value)
        set.update(value, copy)
    elif isinstance(value, dict):
        dict.clear(value)
        for key, (item, inner) in copy.items():
            dict.__setitem__(value, key, item)
            if inner is not None:
                _put_back(item, inner)


def _stand_in(kwargs, next_creator):
    """A variable of the check's own, of the shape asked for, made outside the trace (eagerly)
    and not lifted into the traced function."""
    import tensorflow as tf

    value = kwargs.get("initial_value")
    value = value() if callable(value) else value
    value = tf.convert_to_tensor(value, dtype=kwargs.get("dtype"))
    shape = [1 if d is None else d for d in value.shape] if value.shape.rank is not None else []
    with tf.init_scope():
        return next_creator(
            initial_value=tf.zeros(shape, value.dtype),
            trainable=False,
            name="readiness_stand_in",
            experimental_enable_variable_lifting=False,
        )


@contextlib.contextmanager
def stop_at_creation(created: list):
    """Record a :class:`Creation` for each variable the traced step would create, with stand-ins
    past slots and variables made in the step; stop where a layer or metric builds itself. On
    leaving, each object that may hold a stand-in gets its attributes back."""
    import tensorflow as tf

    saved: dict[int, tuple] = {}
    local = threading.local()

    def creator(next_creator, **kwargs):
        if getattr(local, "busy", False):  # e.g. an initializer's own state: not the step's
            return _stand_in(kwargs, next_creator)
        frames = [frame for frame, _ in traceback.walk_stack(sys._getframe(1))]
        name = str(kwargs.get("name") or "a variable")
        creation = _classify(frames, name, bare_variable=True)
        created.append(creation)
        if creation.kind == "lazy":
            raise _Stopped(f"the step would build {creation.owner}")
        for obj in _holders(frames, creation):
            saved.setdefault(id(obj), (obj, _copy(vars(obj))))
        local.busy = True
        try:
            return _stand_in(kwargs, next_creator)
        finally:
            local.busy = False

    try:
        with tf.variable_creator_scope(creator):
            yield
    finally:
        for obj, snapshot in saved.values():
            _put_back(vars(obj), snapshot)  # attributes added since are removed
        for creation in created:
            if creation is not None and creation.kind == "optimizer":
                creation.obj.built = False  # as it was: its build() never happened for real


def distinct(creations: list) -> list:
    """One :class:`Creation` per owner and line: what a report names."""
    found = {}
    for c in creations:
        found.setdefault((c.kind, id(c.obj) if c.obj is not None else c.owner, c.line), c)
    return list(found.values())


def creation_finding(creation: Creation, where: str, replicas: int, kind: str) -> Finding:
    """The finding for what the trace would have created, with the fix that fits it."""
    place = f"{where}; {creation.line}" if creation.line else where
    place += f"; {creation.owner}" + (
        f", variable '{creation.variable}'" if creation.variable else ""
    )
    if creation.kind == "optimizer":
        return optimizer_not_built(place, creation.owner, replicas, kind)
    if creation.kind == "lazy":
        return Finding(
            "builds-in-step",
            "note",
            f"{creation.owner} would create its variables on the step's first call",
            place,
            "It was not built before training, so it builds itself inside the first "
            "strategy.run. A layer or metric made in the scope and built that way ran on the "
            "8-replica MirroredStrategy here (Keras 3.15); on TPUStrategy unverified on "
            "hardware. The check stops its trace there and does not build it for you, so the "
            "rest of the step is not checked.",
            "Build it before training, inside strategy.scope(): call the model once on a batch "
            "(or give it keras.Input), build a metric by updating it once; then check again.",
        )
    return Finding(
        "variable-in-step",
        "error",
        f"the step creates {creation.owner} (new variables) each time it is traced",
        place,
        "A tf.function may create variables on its first trace only (TensorFlow's tf.function "
        "guide, 'Creating tf.Variables'); strategy.run traces the step once per replica, and "
        "tracing again fails with ValueError 'tf.function only supports singleton tf.Variables "
        "created on the first call' (seen here on the 8-replica MirroredStrategy).",
        "Create it once, outside the step, inside strategy.scope(), and use it in the step.",
    )


def optimizer_not_built(where: str, name: str, replicas: int, kind: str) -> Finding:
    """``optimizer-not-built``: its slot variables would be created by the first step."""
    if replicas == 1:
        severity, outcome = "note", "With one replica the first call builds them without trouble."
    elif kind == "tpu":
        severity = "warning"
        outcome = (
            "On MirroredStrategy with 2 or more replicas that first call fails (seen with Keras "
            "3.15); whether TPUStrategy fails the same way is unverified on hardware."
        )
    else:
        severity = "warning"
        outcome = (
            f"On the strategy you are checking with ({replicas} replicas, MirroredStrategy or "
            "alike) that first call inside strategy.run fails (seen with Keras 3.15). That is a "
            "property of this strategy; on TPUStrategy it is unverified on hardware."
        )
    return Finding(
        "optimizer-not-built",
        severity,
        f"the step uses {name}, whose slot variables do not exist yet",
        where,
        "Keras 3 optimizers with slots (Adam, SGD with momentum, ...) create them on the first "
        f"apply_gradients. {outcome} The check traces past them with stand-ins of its own that "
        "it discards, so it builds nothing of yours; the rest of the step (side effects, XLA) is "
        "checked once the optimizers are built.",
        "with strategy.scope(): optimizer.build(model.trainable_variables) before training, "
        "for every optimizer the step uses (the reference script's build() does so).",
    )
