"""A real dataset that works offline, and input pipelines with the static shapes a TPU needs.

The lessons train on Fashion-MNIST: MNIST's drop-in replacement (the same 28x28 grey images, 60,000
for training and 10,000 for testing, 10 classes), which is harder to fit, so a bug shows in the
accuracy. Notebooks 01_tpu_detection_and_connection (loading), 03 and 06 (pipelines) show it.
"""

from __future__ import annotations

import gzip
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers import batches

__all__ = ["ImageData", "load_images", "make_dataset"]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

MNIST_HOST = ("storage.googleapis.com", 443)  # where keras.datasets downloads from
# Debian's `dataset-fashion-mnist` package: Zalando's four idx files, the ones Keras downloads.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
DATASETS = ("fashion_mnist", "mnist", "digits")


@dataclass
class ImageData:
    """Images as float32 ``[N, H, W, 1]`` in [0, 1] and int32 labels, split in train and test."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int = 10
    source: str = ""
    class_names: tuple[str, ...] = ()

    @property
    def image_shape(self) -> tuple[int, ...]:
        return self.x_train.shape[1:]

    def __str__(self) -> str:
        where = f" (from {self.source})" if self.source else ""
        return (
            f"{self.name}: {len(self.x_train)} training and {len(self.x_test)} test images of "
            f"shape {self.image_shape}, {self.num_classes} classes{where}"
        )


def network_available(address: tuple[str, int] = MNIST_HOST, timeout: float = 3.0) -> bool:
    """True when a TCP connection to ``address`` opens within ``timeout`` seconds."""
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def load_images(
    name: str = "fashion_mnist", *, max_train: int | None = None, max_test: int | None = None
) -> ImageData:
    """Load ``"fashion_mnist"`` (the lessons' dataset), ``"mnist"`` or ``"digits"``.

    Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` package when it is installed
    (offline, as CI runs), else from Keras' cache or download (Colab and Kaggle have the
    network). MNIST comes from Keras. Where neither the files nor the network are there, this
    prints one notice and returns scikit-learn's bundled 8x8 digits at once, never hanging.
    ``max_train`` and ``max_test`` keep only the first examples (quick runs).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    data = None
    if name == "fashion_mnist" and (DEBIAN_FASHION_MNIST / "t10k-labels-idx1-ubyte.gz").exists():
        data = _from_idx(DEBIAN_FASHION_MNIST, name)
    elif name != "digits":
        cached = Path.home() / ".keras" / "datasets"
        if any(cached.glob(f"{name.replace('_', '-')}*")) or network_available():
            data = _from_keras(name)
        else:
            print(
                f"Notice: {name} is neither installed nor downloadable here (no network), so this "
                "run uses scikit-learn's 8x8 digits instead; results differ. Offline, "
                "`apt-get install dataset-fashion-mnist` provides Fashion-MNIST."
            )
    if data is None:
        data = _digits()
    if max_train is not None:
        data.x_train, data.y_train = data.x_train[:max_train], data.y_train[:max_train]
    if max_test is not None:
        data.x_test, data.y_test = data.x_test[:max_test], data.y_test[:max_test]
    return data


def _scaled(images: np.ndarray) -> np.ndarray:
    return images[..., None].astype(np.float32) * np.float32(1 / 255)


def _from_keras(name: str) -> ImageData:
    import keras

    loader = getattr(keras.datasets, name)
    (x_train, y_train), (x_test, y_test) = loader.load_data()
    classes = FASHION_MNIST_CLASSES if name == "fashion_mnist" else ()
    return ImageData(
        name,
        _scaled(x_train),
        y_train.astype(np.int32),
        _scaled(x_test),
        y_test.astype(np.int32),
        source="keras.datasets",
        class_names=classes,
    )


def _read_idx(path: Path) -> np.ndarray:
    """One gzipped idx file (the format of MNIST and Fashion-MNIST): a header, then uint8 data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]  # magic number: two zero bytes, the type (8: uint8), the number of dimensions
    if raw[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path} is not an idx file of unsigned bytes")
    shape = np.frombuffer(raw, ">u4", count=dims, offset=4)
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _from_idx(folder: Path, name: str) -> ImageData:
    def read(split: str) -> tuple[np.ndarray, np.ndarray]:
        images = _read_idx(folder / f"{split}-images-idx3-ubyte.gz")
        labels = _read_idx(folder / f"{split}-labels-idx1-ubyte.gz")
        return _scaled(images), labels.astype(np.int32)

    (x_train, y_train), (x_test, y_test) = read("train"), read("t10k")
    return ImageData(
        name,
        x_train,
        y_train,
        x_test,
        y_test,
        source=str(folder),
        class_names=FASHION_MNIST_CLASSES,
    )


def _digits(test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return ImageData(
        "digits", images[train], labels[train], images[test], labels[test], source="scikit-learn"
    )


def make_dataset(
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    replicas: int = 1,
    training: bool = True,
    seed: int = 0,
):
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches with static shapes.

    The in-memory twin of ``train_tpu.train_dataset``, which notebook 03_keras_compile_and_fit now uses.

    ``drop_remainder=True`` gives every batch the same shape, so XLA compiles the step once.
    Training data is shuffled and repeated; pass ``steps_per_epoch`` to ``fit`` with it.
    """
    import tensorflow as tf

    batches.per_replica_batch(global_batch_size, replicas)
    if len(x) < global_batch_size:
        raise ValueError(
            f"only {len(x)} examples for a global batch of {global_batch_size}: "
            "lower the batch size or use more data"
        )
    ds = tf.data.Dataset.from_tensor_slices((x, y)).cache()
    if training:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True).repeat()
    return ds.batch(global_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
