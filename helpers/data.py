"""A real dataset that works offline, and input pipelines with the static shapes a TPU needs.

Taught in notebooks 01 (loading) and 03 and 06 (pipelines).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers import batches

__all__ = ["ImageData", "load_images", "make_dataset", "network_available"]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

MNIST_HOST = ("storage.googleapis.com", 443)  # where keras.datasets.mnist downloads from


@dataclass
class ImageData:
    """Images as float32 ``[N, H, W, 1]`` in [0, 1] and int32 labels, split in train and test.

    Part of helpers.data, taught in notebook 01.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int = 10

    @property
    def image_shape(self) -> tuple[int, ...]:
        return self.x_train.shape[1:]

    def __str__(self) -> str:
        return (
            f"{self.name}: {len(self.x_train)} training and {len(self.x_test)} test images of "
            f"shape {self.image_shape}, {self.num_classes} classes"
        )


def network_available(address: tuple[str, int] = MNIST_HOST, timeout: float = 3.0) -> bool:
    """True when a TCP connection to ``address`` opens within ``timeout`` seconds.

    Part of helpers.data, taught in notebook 01.
    """
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def load_images(name: str = "mnist", *, max_train: int | None = None) -> ImageData:
    """Load ``"mnist"`` (Keras' loader) or ``"digits"`` (bundled with scikit-learn).

    MNIST needs the network the first time (Keras caches it in ``~/.keras/datasets``). With no
    network this prints a notice and returns the digits instead, at once, never hanging: 1,797
    real 8x8 handwritten digits that ship inside scikit-learn. ``max_train`` keeps only the first
    training examples (smoke runs). Taught in notebook 01.
    """
    if name not in ("mnist", "digits"):
        raise ValueError(f"unknown dataset {name!r}: choose 'mnist' or 'digits'")
    data = None
    if name == "mnist":
        cached = Path.home() / ".keras" / "datasets" / "mnist.npz"
        if cached.exists() or network_available():
            data = _mnist()
        else:
            print(
                "Notice: no network to download MNIST, so this run uses scikit-learn's bundled "
                "8x8 digits instead (same 10 classes, smaller images). Results differ from MNIST."
            )
    if data is None:
        data = _digits()
    if max_train is not None:
        data.x_train, data.y_train = data.x_train[:max_train], data.y_train[:max_train]
    return data


def _mnist() -> ImageData:
    import keras

    (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    scale = np.float32(1 / 255)
    return ImageData(
        "mnist",
        x_train[..., None].astype(np.float32) * scale,
        y_train.astype(np.int32),
        x_test[..., None].astype(np.float32) * scale,
        y_test.astype(np.int32),
    )


def _digits(test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return ImageData("digits", images[train], labels[train], images[test], labels[test])


def make_dataset(
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    replicas: int = 1,
    training: bool = True,
    seed: int = 0,
):
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches with static shapes (notebook 03).

    ``drop_remainder=True`` gives every batch the same shape, so XLA compiles the step once.
    Training data is shuffled and repeated; pass ``steps_per_epoch`` to ``fit`` with it.
    """
    import tensorflow as tf

    batches.split_batch(global_batch_size, replicas)
    if len(x) < global_batch_size:
        raise ValueError(
            f"only {len(x)} examples for a global batch of {global_batch_size}: "
            "lower the batch size or use more data"
        )
    ds = tf.data.Dataset.from_tensor_slices((x, y)).cache()
    if training:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True).repeat()
    return ds.batch(global_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
