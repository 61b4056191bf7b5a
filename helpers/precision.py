"""bfloat16 and mixed precision: the format, the Keras policy, what it saves (notebook 05_bfloat16_mixed_precision).

What bfloat16 can represent, from its bit layout (:func:`format_table`, :func:`to_bfloat16`,
:func:`rounding_table`, :func:`running_sum`); which dtype each layer stores and computes in
(:func:`dtype_table`, :func:`check_float32_output`); the memory it saves (:func:`weight_bytes`,
:func:`activation_bytes`). ``epoch_timer`` lives with every other clock in ``tpucheck.timing``.
TensorFlow and Keras are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpucheck.timing import epoch_timer  # noqa: F401

__all__ = [
    "BITS",
    "activation_bytes",
    "check_float32_output",
    "dtype_table",
    "FloatFormat",
    "format_table",
    "rounding_table",
    "running_sum",
    "to_bfloat16",
    "weight_bytes",
]

# Bits of exponent and of stored mantissa (the leading 1 is implicit) per format.
BITS = {"float32": (8, 23), "bfloat16": (8, 7), "float16": (5, 10)}


@dataclass(frozen=True)
class FloatFormat:
    """The numbers a binary floating-point format can hold, derived from its bit layout."""

    name: str
    exponent_bits: int
    mantissa_bits: int

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def max(self) -> float:
        """Largest finite value: the mantissa all ones, the largest normal exponent."""
        bias = 2 ** (self.exponent_bits - 1) - 1
        return (2 - 2.0**-self.mantissa_bits) * 2.0**bias

    @property
    def smallest_normal(self) -> float:
        """The smallest value with all the mantissa's digits; below it come the subnormals."""
        bias = 2 ** (self.exponent_bits - 1) - 1
        return 2.0 ** (1 - bias)

    @property
    def smallest_subnormal(self) -> float:
        """The smallest value above zero; below half of it, values round to zero."""
        return self.smallest_normal * 2.0**-self.mantissa_bits

    @property
    def epsilon(self) -> float:
        """The gap between 1.0 and the next representable number."""
        return 2.0**-self.mantissa_bits


def format_table() -> list[FloatFormat]:
    """float32, bfloat16 and float16 side by side (notebook 05_bfloat16_mixed_precision)."""
    return [FloatFormat(name, *bits) for name, bits in BITS.items()]


def to_bfloat16(values) -> np.ndarray:
    """Round float32 values to the nearest bfloat16, returned as float32 (numpy only).

    bfloat16 is the top 16 bits of a float32: same sign and exponent, 7 of the 23 mantissa
    bits. Rounding adds half of the dropped part (ties to even) and truncates, exactly what
    ``tf.cast(x, tf.bfloat16)`` does. NaN stays NaN.
    """
    x = np.asarray(values, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)  # 64-bit, so the rounding carry cannot overflow
    lsb = (bits >> 16) & 1  # the last kept bit: ties round towards an even result
    rounded = ((bits + 0x7FFF + lsb) >> 16 << 16).astype(np.uint32)
    out = rounded.view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out).astype(np.float32)


def rounding_table(values: Sequence[float]) -> list[dict]:
    """Each value as float32, bfloat16 and float16 hold it, with bfloat16's relative error.

    float16 runs out of range where bfloat16 does not: large values overflow to ``inf`` and
    small ones (tiny gradients) flush to zero; that is why float16 training needs loss scaling
    and bfloat16 training does not.
    """
    rows = []
    for value in values:
        f32 = float(np.float32(value))
        bf16 = float(to_bfloat16(f32))
        with np.errstate(over="ignore"):
            f16 = float(np.float16(f32))
        error = abs(bf16 - f32) / abs(f32) if f32 else 0.0
        rows.append(
            {"value": value, "float32": f32, "bfloat16": bf16, "float16": f16, "bf16 error": error}
        )
    return rows


def running_sum(step: float, count: int, dtype: str) -> float:
    """Add ``step`` to a running total ``count`` times, in ``dtype`` ("float32", "bfloat16"...).

    In bfloat16 the total stops growing once ``step`` is smaller than half the gap between
    neighbouring numbers at the total's size: the reason Keras keeps metric totals and the
    weights the optimizer updates in float32 under ``mixed_bfloat16``.
    """
    import tensorflow as tf

    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    dtype = tf.as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(f"dtype must be a floating-point type, got {dtype.name}")

    @tf.function
    def add_up(step):
        total = tf.zeros([], dtype)
        for _ in tf.range(count):
            total += step
        return total

    return float(add_up(tf.constant(step, dtype)))


@dataclass(frozen=True)
class _LayerDtypes:
    """One layer's dtypes: its policy, the dtype of its weights, of its math, of its output."""

    name: str
    kind: str
    policy: str
    variable_dtype: str
    compute_dtype: str
    output_dtype: str | None


def _layer_dtypes(model) -> list[_LayerDtypes]:
    """The dtypes of every layer of a Keras model; ``output_dtype`` is None for a layer never
    called on a symbolic input (an unbuilt Sequential model's)."""
    rows = []
    for layer in model.layers:
        try:
            output = layer.output
        except (AttributeError, ValueError):  # never called symbolically
            output = None
        out_dtype = None if output is None or isinstance(output, (list, tuple)) else output.dtype
        rows.append(
            _LayerDtypes(
                name=layer.name,
                kind=type(layer).__name__,
                policy=layer.dtype_policy.name,
                variable_dtype=str(layer.variable_dtype),
                compute_dtype=str(layer.compute_dtype),
                output_dtype=None if out_dtype is None else _dtype_name(out_dtype),
            )
        )
    return rows


def _dtype_name(dtype) -> str:
    return getattr(dtype, "name", None) or str(dtype)


def dtype_table(model) -> str:
    """:func:`_layer_dtypes` as an aligned text table, one layer per line."""
    header = ("layer", "kind", "policy", "variables", "compute", "output")
    rows = [header] + [
        (r.name, r.kind, r.policy, r.variable_dtype, r.compute_dtype, r.output_dtype or "-")
        for r in _layer_dtypes(model)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def check_float32_output(model) -> None:
    """Raise ``ValueError`` unless every output of ``model`` is float32 (notebook 05_bfloat16_mixed_precision).

    Under ``mixed_bfloat16`` the last layer must still compute in float32: softmax and
    cross-entropy in bfloat16 lose the small differences between probabilities that the loss
    depends on. The fix is ``dtype="float32"`` on the output layer.
    """
    outputs = model.outputs if isinstance(model.outputs, (list, tuple)) else [model.outputs]
    for output in outputs:
        name = _dtype_name(output.dtype)
        if name != "float32":
            raise ValueError(
                f"model {model.name!r} outputs {name}, not float32: give its last layer "
                "dtype='float32' so that the logits, softmax and loss are computed in float32"
            )


def weight_bytes(model) -> int:
    """Bytes held by all of the model's variables (weights and non-trainable state)."""
    import tensorflow as tf

    return int(sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in model.weights))


def activation_bytes(model, batch) -> dict[str, int]:
    """Bytes of each layer's output for ``batch``, measured by running the model (notebook 05_bfloat16_mixed_precision).

    These are the activations a training step keeps in memory for the backward pass; under
    ``mixed_bfloat16`` they are half the size. The input layer is left out (it is the batch).
    """
    import keras
    import tensorflow as tf

    layers = [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]
    if not layers:
        raise ValueError(f"model {model.name!r} has no layers besides its input")
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    probe = keras.Model(inputs, [layer.output for layer in layers])
    outputs = probe(batch, training=False)
    return {
        layer.name: int(keras.ops.size(out)) * tf.as_dtype(out.dtype).size
        for layer, out in zip(layers, outputs, strict=True)
    }
