"""Small offline images for the tests, and an in-memory pipeline for them.

The lessons train on Fashion-MNIST, loaded by the reference script's data part (its one home).
What the tests need is different: a few hundred images, the
same on every machine, ready without a download or any package beyond numpy. :func:`digits` draws
them: 8x8 images of the ten digits, each a glyph shifted, faded, thinned and noisy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucheck import batches

__all__ = ["ImageData", "digits", "make_dataset"]

# TensorFlow is imported inside the functions that use it.


@dataclass
class ImageData:
    """Images as float32 ``[N, H, W, 1]`` in [0, 1] and int32 labels, split in train and test."""

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


# The ten digits, 5 pixels wide and 7 high.
GLYPHS = (
    (" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
    ("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    (" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
    ("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
    ("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
    ("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
    ("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
    ("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
    (" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
    (" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "),
)  # fmt: skip


def digits(
    count: int = 1800,
    *,
    max_train: int | None = None,
    max_test: int | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> ImageData:
    """``count`` 8x8 digit images, the same for a given ``seed`` on every machine.

    Each is a glyph of :data:`GLYPHS` placed at one of 8 positions, at a random brightness, with
    15% of its strokes dropped and Gaussian noise added: a model must learn the shapes, and no
    two images are equal. Classes are balanced; ``test_fraction`` of them form the test split.
    ``max_train`` and ``max_test`` keep only the first examples (quick runs).
    """
    rng = np.random.default_rng(seed)
    glyphs = np.array([[[c == "#" for c in row] for row in glyph] for glyph in GLYPHS], np.float32)
    labels = rng.permutation(np.arange(count) % len(GLYPHS)).astype(np.int32)
    images = np.zeros((count, 8, 8), np.float32)
    for i, label in enumerate(labels):
        top, left = rng.integers(0, 2), rng.integers(0, 4)
        strokes = glyphs[label] * (rng.random((7, 5)) > 0.15) * rng.uniform(0.5, 1.0)
        images[i, top : top + 7, left : left + 5] = strokes
    images = np.clip(images + rng.normal(0.0, 0.08, images.shape), 0.0, 1.0).astype(np.float32)
    n_test = int(count * test_fraction)
    data = ImageData(
        "digits", images[n_test:, ..., None], labels[n_test:], images[:n_test, ..., None],
        labels[:n_test],
    )  # fmt: skip
    data.x_train, data.y_train = data.x_train[:max_train], data.y_train[:max_train]
    data.x_test, data.y_test = data.x_test[:max_test], data.y_test[:max_test]
    return data


def make_dataset(
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    replicas: int = 1,
    training: bool = True,
    seed: int = 0,
):
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches with static shapes, for the tests.

    The lessons feed the reference script's ``train_dataset`` (TFRecords); this in-memory pipeline
    serves the tests, the benchmark and the self-test's speed check.

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
