"""What tpucheck's tests build for themselves, with no lesson and no ``helpers``: small images,
a small classifier and a static-shape pipeline, the shapes a user's own setup has."""

from __future__ import annotations

import numpy as np


def images(count: int = 512, shape=(8, 8, 1), seed: int = 0):
    """``count`` random float32 images of ``shape`` in [0, 1) and int32 labels of 10 classes:
    the readiness check reads shapes and graphs, never the values."""
    rng = np.random.default_rng(seed)
    x = rng.random((count, *shape), dtype=np.float32)
    return x, rng.integers(0, 10, count).astype(np.int32)


def classifier(image_shape=(8, 8, 1), hidden: int = 128, dtype=None):
    """Images to 10 logits: a hidden Dense layer (``dtype``: its policy) and float32 logits."""
    import keras

    inputs = keras.Input(image_shape, name="images")
    x = keras.layers.Flatten(dtype=dtype)(inputs)
    x = keras.layers.Dense(hidden, activation="relu", name="hidden", dtype=dtype)(x)
    logits = keras.layers.Dense(10, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="classifier")


def make_dataset(x, y, global_batch: int):
    """Cached, shuffled, repeated static batches of ``global_batch``, prefetched."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(len(x), seed=0).repeat()
    return ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
