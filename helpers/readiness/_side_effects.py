"""Python side effects in a training step: what runs once, while tracing, and never again.

Part of the readiness check, notebook 10_tpu_readiness_check.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import inspect
import sys
import types

from helpers.readiness.report import Finding

__all__ = [
    "Watch",
    "add_side_effects",
    "capture_print",
    "frozen_random",
    "unbuilt_optimizers",
]

# Keras is imported inside the functions: see _pipeline.


def unbuilt_optimizers(fn) -> list:
    """The unbuilt Keras optimizers the step's code names (closures, globals, ``self``).

    Tracing builds one without slots (plain SGD) without creating a variable; the check marks
    them unbuilt again afterwards, so that it changes nothing of the user's (notebook 10_tpu_readiness_check).
    """
    import keras

    return [
        value
        for value in Watch(fn).values().values()
        if isinstance(value, keras.optimizers.Optimizer) and not value.built
    ]


# What a traced step may change in Python without anyone noticing: closure variables, globals and
# attributes of ``self`` that the function's code names.
class Watch:
    """The Python values a step can change: closures, globals, ``self`` attributes (notebook 10_tpu_readiness_check)."""

    def __init__(self, fn):
        self.fn = inspect.unwrap(fn)
        self.before = {name: _fingerprint(v) for name, v in self.values().items()}

    def values(self) -> dict:
        fn = self.fn
        code = getattr(fn, "__code__", None)
        if code is None:
            return {}
        names = _code_names(code)
        found = {}
        glob = getattr(fn, "__globals__", {})
        for name in names:
            if name in glob and not isinstance(glob[name], types.ModuleType):
                found[name] = glob[name]
        for name, cell in zip(
            code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False
        ):
            with contextlib.suppress(ValueError):  # an empty cell
                found[name] = cell.cell_contents
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            for name in names:
                if not name.startswith("_") and name in getattr(owner, "__dict__", {}):
                    found[f"self.{name}"] = owner.__dict__[name]
        return found

    def changed(self) -> list[str]:
        now = {name: _fingerprint(v) for name, v in self.values().items()}
        return [name for name, fp in now.items() if self.before.get(name, fp) != fp]


def _code_objects(code) -> list:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _code_objects(const)
    return found


def _code_names(code) -> set[str]:
    return {name for block in _code_objects(code) for name in block.co_names}


def _fingerprint(value):
    if isinstance(value, (list, dict, set, bytearray)):
        return ("container", id(value), len(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    return ("object", id(value))


@contextlib.contextmanager
def capture_print():
    """Record Python ``print`` calls made by user code while the step is traced (notebook 10_tpu_readiness_check)."""
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


def frozen_random(fn) -> list[str]:
    """Python or NumPy random generators and clocks the step's own code uses (notebook 10_tpu_readiness_check)."""
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
    for name, value in Watch(fn).values().items():  # generator objects held by the step
        if type(value).__module__.startswith(("numpy.random", "random")):
            hits.add(name)
    return sorted(hits)


def add_side_effects(report, where, printed, changed, random_names) -> None:
    """Report Python side effects and frozen random numbers found while tracing (notebook 10_tpu_readiness_check)."""
    if printed or changed:
        effects = [f"print() at {p}" for p in printed[:2]]
        effects += [f"changes Python variable '{name}'" for name in changed]
        report.findings.append(
            Finding(
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
        )
    if random_names:
        report.findings.append(
            Finding(
                "frozen-random",
                "warning",
                f"the step calls Python-side random numbers or clocks: {', '.join(random_names)}",
                where,
                "They are evaluated once, while tracing, and frozen into the compiled step as "
                "constants: every step on the TPU sees the same 'random' value or time.",
                "Use TensorFlow's random ops (tf.random.stateless_uniform with a step-dependent "
                "seed, or a tf.random.Generator) and measure time outside the step.",
            )
        )
