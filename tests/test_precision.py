"""helpers.precision: the bfloat16 format, dtype policies, dtype reports and memory measurement.

Expected values come from an independent source (ml_dtypes' and numpy's format tables, TensorFlow's
own cast, Keras' parameter counts, the layers' output shapes), never from the code under test.
"""

from __future__ import annotations

import contextlib

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from helpers import models, precision

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)


@contextlib.contextmanager
def _global_policy(name):
    """Keras' global dtype policy for a with block, set back afterwards, as notebook 05_bfloat16_mixed_precision does."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


@pytest.mark.parametrize(
    ("name", "reference"),
    [("float32", np.float32), ("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)],
)
def test_format_table_matches_the_real_formats(name, reference):
    fmt = {f.name: f for f in precision.format_table()}[name]
    info = ml_dtypes.finfo(reference)
    assert fmt.bits == info.bits
    assert fmt.max == float(info.max)
    assert fmt.smallest_normal == float(info.smallest_normal)
    assert fmt.smallest_subnormal == float(info.smallest_subnormal)
    assert fmt.epsilon == float(info.eps)
    assert fmt.mantissa_bits == info.nmant and fmt.exponent_bits == info.nexp


def _tf_bfloat16(values):
    return tf.cast(tf.cast(np.float32(values), tf.bfloat16), tf.float32).numpy()


def test_to_bfloat16_matches_tensorflow_over_many_magnitudes():
    rng = np.random.default_rng(0)
    mantissas = rng.standard_normal(20_000).astype(np.float32)
    exponents = rng.integers(-38, 38, 20_000).astype(np.float32)
    values = mantissas * np.float32(10.0) ** exponents
    specials = np.float32([0.0, -0.0, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e-45])
    values = np.concatenate([values, specials])
    np.testing.assert_array_equal(precision.to_bfloat16(values), _tf_bfloat16(values))


def test_to_bfloat16_rounds_ties_to_even():
    step = 2.0**-7  # the gap between bfloat16 numbers just above 1
    ties = np.float32([1 + step / 2, 1 + 3 * step / 2])  # each exactly between two neighbours
    np.testing.assert_array_equal(precision.to_bfloat16(ties), [1.0, 1 + 2 * step])
    np.testing.assert_array_equal(precision.to_bfloat16(ties), _tf_bfloat16(ties))


def test_to_bfloat16_keeps_nan():
    assert np.isnan(precision.to_bfloat16([np.nan])[0])


def test_rounding_table_shows_float16_range_limits():
    rows = precision.rounding_table([1e-8, 70_000.0, 0.0, 1 / 3])
    tiny, large, zero, third = rows
    assert tiny["float16"] == 0.0 and tiny["bfloat16"] == pytest.approx(1e-8, rel=2**-8)
    assert np.isinf(large["float16"]) and large["bfloat16"] == float(_tf_bfloat16(70_000.0))
    assert zero["bf16 error"] == 0.0
    expected = abs(float(_tf_bfloat16(1 / 3)) - float(np.float32(1 / 3))) / float(np.float32(1 / 3))
    assert third["bf16 error"] == pytest.approx(expected)


def test_running_sum_matches_step_by_step_rounding():
    step, count = 0.01, 500
    simulated = np.float32(0)
    bf16_step = precision.to_bfloat16(step)
    for _ in range(count):  # bfloat16 addition: exact sum, rounded to bfloat16
        simulated = precision.to_bfloat16(np.float32(simulated) + bf16_step)
    assert precision.running_sum(step, count, "bfloat16") == float(simulated)
    assert precision.running_sum(step, count, "float32") == pytest.approx(step * count, rel=1e-5)
    assert precision.running_sum(step, 0, "float32") == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1, "dtype": "float32"}, "count must be"),
        ({"count": 2.5, "dtype": "float32"}, "count must be"),
        ({"count": 3, "dtype": "int32"}, "floating-point"),
    ],
)
def test_running_sum_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        precision.running_sum(0.1, **kwargs)


def test_build_classifier_dtype_argument_and_default():
    mixed = {
        r.name: r
        for r in precision._layer_dtypes(models.build_classifier((8, 8, 1), dtype="mixed_bfloat16"))
    }
    assert (mixed["hidden"].variable_dtype, mixed["hidden"].compute_dtype) == (
        "float32",
        "bfloat16",
    )
    assert mixed["hidden"].output_dtype == "bfloat16" and mixed["hidden"].policy == "mixed_bfloat16"
    assert mixed["logits"].output_dtype == "float32"
    default = precision._layer_dtypes(models.build_classifier((8, 8, 1)))
    assert all(r.compute_dtype == "float32" for r in default)
    with _global_policy("mixed_bfloat16"):  # dtype=None follows the global policy
        following = {r.name: r for r in precision._layer_dtypes(models.build_classifier((8, 8, 1)))}
    assert following["hidden"].compute_dtype == "bfloat16"
    assert following["logits"].compute_dtype == "float32"


def test_dtype_table_lists_every_layer():
    model = models.build_classifier((8, 8, 1), dtype="mixed_bfloat16")
    lines = precision.dtype_table(model).splitlines()
    assert lines[0].split() == ["layer", "kind", "policy", "variables", "compute", "output"]
    assert len(lines) == 1 + len(model.layers)
    assert lines[-1].split() == ["logits", "Dense", "float32", "float32", "float32", "float32"]


def test_layer_dtypes_of_a_layer_never_called_symbolically():
    model = keras.Sequential([keras.layers.Dense(3)])  # no Input: nothing was called yet
    (row,) = precision._layer_dtypes(model)
    assert row.output_dtype is None and row.compute_dtype == "float32"


def test_check_float32_output():
    precision.check_float32_output(models.build_classifier((8, 8, 1), dtype="mixed_bfloat16"))
    with _global_policy("mixed_bfloat16"):
        inputs = keras.Input((4,))
        bad = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="bad")
    with pytest.raises(ValueError, match="'bad' outputs bfloat16.*dtype='float32'"):
        precision.check_float32_output(bad)


def test_weight_bytes():
    f32 = models.build_classifier((8, 8, 1), hidden=128)
    assert precision.weight_bytes(f32) == 4 * f32.count_params()
    mixed = models.build_classifier((8, 8, 1), hidden=128, dtype="mixed_bfloat16")
    assert precision.weight_bytes(mixed) == precision.weight_bytes(f32)
    pure = models.build_classifier((8, 8, 1), hidden=128, dtype="bfloat16")
    hidden = pure.get_layer("hidden").count_params()
    logits = pure.get_layer("logits").count_params()
    assert precision.weight_bytes(pure) == 2 * hidden + 4 * logits


@pytest.mark.parametrize(("policy", "hidden_bytes"), [("float32", 4), ("mixed_bfloat16", 2)])
def test_activation_bytes_from_output_shapes(policy, hidden_bytes):
    model = models.build_classifier((8, 8, 1), hidden=128, dtype=policy)
    batch = np.zeros((5, 8, 8, 1), np.float32)
    measured = precision.activation_bytes(model, batch)
    expected = {
        layer.name: 5
        * int(np.prod(layer.output.shape[1:]))
        * (4 if layer.name == "logits" else hidden_bytes)
        for layer in model.layers[1:]
    }
    assert measured == expected


def test_activation_bytes_needs_layers():
    # A Sequential model, not keras.Model(inputs, inputs): Keras 3.13 (Colab's) refuses to build
    # a functional model whose output is its input.
    empty = keras.Sequential([keras.Input((3,))], name="empty")
    with pytest.raises(ValueError, match="no layers"):
        precision.activation_bytes(empty, np.zeros((2, 3)))


def test_epoch_timer_records_every_epoch():
    model = models.build_classifier((8, 8, 1), hidden=8)
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    timer = precision.epoch_timer()
    x, y = np.zeros((16, 8, 8, 1), np.float32), np.zeros(16, np.int32)
    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[timer])
    assert len(timer.seconds) == 3 and all(s > 0 for s in timer.seconds)
