"""What a step would create while it is traced: optimizer slots, metric variables, layer weights.

The step is traced under a variable creator scope that stops the trace at the first variable it
would create, so the check creates nothing and builds nothing of the user's. The creator's Python
stack names what was being created and by whom, however the step reached it: an optimizer in a
closure, a trainer's attribute or a helper object; a metric or layer built lazily; or a variable
made anew inside the step. Part of the readiness check, notebook 10.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field

from helpers.readiness.report import Finding

__all__ = ["Creation", "creation_finding", "creation_in", "stop_at_creation"]

# TensorFlow and Keras are imported inside the functions: see _pipeline.

# Frames of these packages are the machinery, not the user's code that asked for the variable.
_LIBRARIES = ("tensorflow", "keras", "tf_keras", "absl", "contextlib", "helpers")


# The check's own function that the trace calls the step from: frames beyond it are the caller's.
TRACED = "flat_step"
_STEP_MODULE = "helpers.readiness._step"


class _Stopped(Exception):
    """Raised by the creator: the trace stops before any variable exists."""


@dataclass(frozen=True)
class Creation:
    """One variable a traced step would create: its name, its owner, and where it was asked for.

    ``kind``: ``optimizer`` (slots on the first ``apply_gradients``), ``lazy`` (a layer or
    metric building its variables on its first call) or ``every-call`` (a variable, metric or
    layer made inside the step itself, anew at each trace). Part of the readiness check,
    notebook 10.
    """

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


def _user_line(frames) -> str | None:
    """The innermost line of the user's own code, within the traced step (not its caller)."""
    for frame in frames:
        if frame.f_code.co_name == TRACED and frame.f_globals.get("__name__", "") == _STEP_MODULE:
            return None
        module = frame.f_globals.get("__name__", "")
        generated = "__autograph_generated" in frame.f_code.co_filename
        if module.split(".")[0] not in _LIBRARIES and not generated:
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
        tb, chain = err.__traceback__, []
        while tb is not None:
            chain.append(tb.tb_frame)
            tb = tb.tb_next
        frames += reversed(chain)  # innermost first
        err = err.__cause__ or err.__context__
    return _classify(frames, "", bare_variable=False)


def _stack() -> list:
    frames, frame = [], sys._getframe(2)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def stop_at_creation(created: list):
    """Inside a traced function: append a :class:`Creation` and stop at the first new variable."""
    import tensorflow as tf

    def creator(next_creator, **kwargs):
        name = str(kwargs.get("name") or "a variable")
        created.append(_classify(_stack(), name, bare_variable=True))
        raise _Stopped(f"the step would create a variable ({created[-1].variable})")

    with tf.variable_creator_scope(creator):
        yield


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
        f"apply_gradients. {outcome} The check stops its trace where they would be created, so "
        "it does not build the optimizer for you, and the rest of the step is not checked.",
        "with strategy.scope(): optimizer.build(model.trainable_variables) before training "
        "(helpers.loops.build_optimizer), for every optimizer the step uses.",
    )
