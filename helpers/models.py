"""The small models the lessons train (notebooks 02_building_in_strategy_scope to 09_scaling_out_to_pods).

Kept deliberately small ("keep examples quick"): the lessons are about distribution, not about
accuracy. Sizes follow the TPU's tiles: hidden widths are multiples of 128.
"""

from __future__ import annotations

__all__ = ["build_classifier"]


def build_classifier(
    image_shape: tuple[int, ...],
    num_classes: int = 10,
    *,
    hidden: int = 128,
    dropout: float = 0.0,
    seed: int = 0,
    l2: float = 0.0,
    name: str = "classifier",
    dtype=None,
    input_dtype: str = "float32",
):
    """A multilayer perceptron from images to class **logits** (no softmax); build it inside
    ``strategy.scope()``.

    It follows the rules of the reference script's CNN (``train_tpu.build_cnn``): ``dtype`` is the
    hidden layers' dtype policy, e.g. ``"mixed_bfloat16"`` (None: Keras' global policy), and the
    logits stay float32. ``seed`` makes the initial weights reproducible; ``l2`` > 0 adds an L2
    penalty on both kernels (``model.losses``), which a custom loop must scale per replica.
    ``input_dtype="uint8"`` takes raw pixels and scales them in the first layer, so the host
    ships a quarter of the bytes of float32 images.
    """
    import keras

    init = keras.initializers.GlorotUniform
    reg = keras.regularizers.L2(l2) if l2 else None
    inputs = keras.Input(shape=image_shape, dtype=input_dtype, name="images")
    x = inputs
    if input_dtype == "uint8":
        x = keras.layers.Rescaling(1 / 255, dtype=dtype, name="to_unit_range")(x)
    elif input_dtype != "float32":
        raise ValueError(f"input_dtype must be 'float32' or 'uint8', got {input_dtype!r}")
    x = keras.layers.Flatten(dtype=dtype)(x)
    x = keras.layers.Dense(
        hidden,
        activation="relu",
        kernel_initializer=init(seed),
        kernel_regularizer=reg,
        name="hidden",
        dtype=dtype,
    )(x)
    if dropout:
        x = keras.layers.Dropout(dropout, seed=seed, dtype=dtype)(x)
    outputs = keras.layers.Dense(
        num_classes,
        kernel_initializer=init(seed + 1),
        kernel_regularizer=reg,
        dtype="float32",
        name="logits",
    )(x)
    return keras.Model(inputs, outputs, name=name)
