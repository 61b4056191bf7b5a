"""Input pipelines that keep a TPU fed: TFRecords, pipeline stages, throughput (notebook 06_input_pipelines).

The notebook writes each stage of :data:`STAGES` out in plain TensorFlow; its tests check those
cells against these functions. The clocks live in :mod:`tpucheck.timing`, importable from here.
TensorFlow is imported inside the functions.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

import numpy as np

from helpers import tf_internals
from tpucheck.batches import positive_int
from tpucheck.timing import Throughput, compare_throughput, compare_timings  # noqa: F401

__all__ = [
    "STAGES",
    "augment",
    "autoshard_preview",
    "build_pipeline",
    "check_roundtrip",
    "decode",
    "fill_caches",
    "input_wait_fraction",
    "parse",
    "read_tfrecords",
    "shard_plan",
    "to_photos",
    "transformations",
    "write_tfrecords",
]

# Stage name -> what it adds to the one before. Each stage keeps everything above it.
STAGES = {
    "naive": "read files one by one, decode and augment one example at a time, batch",
    "parallel": "read files in parallel (interleave) and map with num_parallel_calls=AUTOTUNE",
    "cache": "decode once and cache the decoded images in memory; augment after the cache",
    "prefetch": "prefetch(AUTOTUNE): prepare the next batches while the step runs",
    "non-deterministic": "deterministic=False: hand out whichever element is ready first",
    "vectorised": "batch first, then augment the whole batch with one call per op",
}

IMAGE_KEY, LABEL_KEY, INDEX_KEY = "image_png", "label", "index"


def to_photos(images: np.ndarray, size: int) -> np.ndarray:
    """Scale ``[N, H, W, C]`` float images in [0, 1] to ``uint8`` images of ``size`` x ``size``:
    enlarged, Fashion-MNIST's examples cost a real photo's decoding and augmentation work."""
    import tensorflow as tf

    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"expected images shaped [N, H, W, C], got shape {images.shape}")
    positive_int("size", size)
    if images.size and (images.min() < 0 or images.max() > 1):
        raise ValueError("expected float images in [0, 1]")
    big = tf.image.resize(images.astype(np.float32), (size, size), method="bilinear")
    return np.clip(np.round(big.numpy() * 255), 0, 255).astype(np.uint8)


def _example_bytes(png: bytes, label: int, index: int) -> bytes:
    import tensorflow as tf

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))

    feature = {
        IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
        LABEL_KEY: int64(label),
        INDEX_KEY: int64(index),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_tfrecords(
    images: np.ndarray,
    labels: np.ndarray,
    directory: str | os.PathLike,
    num_shards: int,
    *,
    prefix: str = "train",
) -> list[str]:
    """Write ``images`` and ``labels`` into ``num_shards`` files named
    ``{prefix}-00000-of-00004.tfrecord`` and so on, in ``directory`` (local or ``gs://``); return
    their paths."""
    import tensorflow as tf

    images, labels = np.asarray(images), np.asarray(labels)
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if (
        isinstance(num_shards, bool)
        or not isinstance(num_shards, numbers.Integral)
        or not 1 <= num_shards <= len(images)
    ):
        raise ValueError(
            f"num_shards must be an integer between 1 and the number of examples ({len(images)}), "
            f"got {num_shards!r}: an empty shard would give one host nothing to read"
        )
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(
            f"expected uint8 images shaped [N, H, W, C], got {images.dtype} {images.shape}"
        )
    # PNG-encode in a tf.data map: in parallel and without one eager call per image.
    pngs = (
        tf.data.Dataset.from_tensor_slices(images)
        .map(tf.io.encode_png, num_parallel_calls=tf.data.AUTOTUNE)
        .as_numpy_iterator()
    )
    directory = os.fspath(directory)
    tf.io.gfile.makedirs(directory)
    paths = []
    for shard, indices in enumerate(np.array_split(np.arange(len(images)), num_shards)):
        path = os.path.join(directory, f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in indices:
                writer.write(_example_bytes(next(pngs), labels[i], i))
        paths.append(path)
    return paths


def parse(serialized):
    """Parse one serialized example, or a batch of them, into a dict of tensors."""
    import tensorflow as tf

    spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
    spec |= {key: tf.io.FixedLenFeature([], tf.int64) for key in (LABEL_KEY, INDEX_KEY)}
    return tf.io.parse_example(serialized, spec)


def decode(serialized):
    """Serialized example -> ``(uint8 image [H, W, 1], int32 label)``; per example."""
    import tensorflow as tf

    features = parse(serialized)
    image = tf.io.decode_png(features[IMAGE_KEY], channels=1)
    return image, tf.cast(features[LABEL_KEY], tf.int32)


def augment(images, out_size: int):
    """Random resized crop, horizontal flip and brightness, for one image or a batch.

    ``images`` are ``uint8`` ``[H, W, C]`` or ``[B, H, W, C]``; the result is float32 in [0, 1],
    ``out_size`` x ``out_size``. Every op works on a whole batch with a different random draw
    per image, so the same function serves the per-example and the vectorised pipelines.
    """
    import tensorflow as tf

    single = images.shape.rank == 3
    x = tf.cast(images[None] if single else images, tf.float32) / 255.0
    n = tf.shape(x)[0]
    scale = tf.random.uniform([n, 1], 0.6, 1.0)  # crop side, as a fraction of the image
    top = tf.random.uniform([n, 1]) * (1.0 - scale)
    left = tf.random.uniform([n, 1]) * (1.0 - scale)
    boxes = tf.concat([top, left, top + scale, left + scale], axis=1)
    x = tf.image.crop_and_resize(x, boxes, tf.range(n), (out_size, out_size))
    flip = tf.random.uniform([n, 1, 1, 1]) < 0.5
    x = tf.where(flip, tf.reverse(x, axis=[2]), x)
    x = tf.clip_by_value(x + tf.random.uniform([n, 1, 1, 1], -0.1, 0.1), 0.0, 1.0)
    return x[0] if single else x


def read_tfrecords(
    files: Sequence[str], *, parallel: bool = True, deterministic: bool | None = None
):
    """A dataset of serialized examples from ``files``, read one after another or, ``parallel``,
    several at once with ``interleave`` (what hides the latency of GCS). ``deterministic`` None
    follows the dataset's ``tf.data.Options``."""
    import tensorflow as tf

    files = list(files)
    if not files:
        raise ValueError("no TFRecord files given (check the directory and the glob pattern)")
    if not parallel:
        return tf.data.TFRecordDataset(files)
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def check_roundtrip(files: Sequence[str], images: np.ndarray, labels: np.ndarray) -> int:
    """Read every example back and compare it with the original (matched by its stored index);
    return how many matched. ``AssertionError`` names the first that differs, is missing, or
    appears twice."""
    import tensorflow as tf

    images, labels = np.asarray(images), np.asarray(labels)
    seen: set[int] = set()
    ds = read_tfrecords(files, deterministic=False).map(parse)
    for features in ds.as_numpy_iterator():
        i = int(features[INDEX_KEY])
        if i in seen:
            raise AssertionError(f"example {i} was read twice")
        if not 0 <= i < len(images):
            raise AssertionError(f"example index {i} is outside 0..{len(images) - 1}")
        seen.add(i)
        image = tf.io.decode_png(features[IMAGE_KEY], channels=images.shape[-1]).numpy()
        if int(features[LABEL_KEY]) != int(labels[i]):
            raise AssertionError(f"example {i}: label {features[LABEL_KEY]} != {labels[i]}")
        if image.shape != images[i].shape or not np.array_equal(image, images[i]):
            raise AssertionError(f"example {i}: the decoded image differs from the original")
    if len(seen) != len(images):
        missing = sorted(set(range(len(images))) - seen)
        raise AssertionError(f"{len(missing)} example(s) missing, first: {missing[:5]}")
    return len(seen)


def build_pipeline(
    files: Sequence[str],
    batch_size: int,
    stage: str,
    *,
    out_size: int,
    shuffle_buffer: int = 1024,
    seed: int = 0,
):
    """The training pipeline at one optimisation ``stage`` (a key of :data:`STAGES`): batches
    ``(float32 [batch_size, out_size, out_size, 1], int32 [batch_size])``, shuffled, repeated
    forever. ``"naive"`` is what most tutorials show: one ``map`` per example does all the work.
    """
    import tensorflow as tf

    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {list(STAGES)}")
    positive_int("batch_size", batch_size)
    level = list(STAGES).index(stage)
    parallel = tf.data.AUTOTUNE if level >= 1 else None

    def augment_only(image, label):
        return augment(image, out_size), label

    def decode_and_augment(serialized):
        return augment_only(*decode(serialized))

    ds = read_tfrecords(files, parallel=level >= 1)
    if level < 2:  # all the work per example, after the shuffle, every epoch
        ds = ds.shuffle(shuffle_buffer, seed=seed).repeat()
        ds = ds.map(decode_and_augment, num_parallel_calls=parallel)
        ds = ds.batch(batch_size, drop_remainder=True)
    else:  # decode once; random augmentation stays after the cache so every epoch differs
        ds = ds.map(decode, num_parallel_calls=parallel).cache()
        ds = ds.shuffle(shuffle_buffer, seed=seed).repeat()
        if level < 5:
            ds = ds.map(augment_only, num_parallel_calls=parallel)
            ds = ds.batch(batch_size, drop_remainder=True)
        else:
            ds = ds.batch(batch_size, drop_remainder=True)
            ds = ds.map(augment_only, num_parallel_calls=parallel)
    if level >= 3:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    if level >= 4:
        options = tf.data.Options()
        options.deterministic = False
        ds = ds.with_options(options)
    return ds


def transformations(dataset) -> list[str]:
    """The transformations a ``tf.data`` pipeline is built of, source first, e.g.
    ``["TFRecordDataset", "ShuffleDataset", "ParallelMapDataset", "BatchDataset"]``: follows the
    private ``_input_dataset`` links, the only way to walk the chain."""
    names = []
    while dataset is not None:
        names.append(type(dataset).__name__.lstrip("_"))
        dataset = getattr(dataset, "_input_dataset", None)
    return names[::-1]


def fill_caches(datasets, batches: int) -> list[str]:
    """Draw ``batches`` batches from each pipeline of ``datasets`` (name -> dataset) that has a
    ``cache()``; return their names. One full pass and one batch more complete the cache, which
    every later iterator shares: a measurement then sees the steady state."""
    positive_int("batches", batches)
    filled = []
    for name, ds in datasets.items():
        if "CacheDataset" not in transformations(ds):
            continue
        iterator = iter(ds)
        for _ in range(batches):
            next(iterator)
        del iterator  # its background threads stop before the next pipeline is read
        filled.append(name)
    return filled


def input_wait_fraction(step_seconds: float, cached_step_seconds: float) -> float:
    """The share of a step (fed by the real pipeline) spent waiting for input: the same step fed
    one batch held in memory takes ``cached_step_seconds``. Near 0: compute-bound; near 1:
    input-bound; noise that makes the cached step the slower one reads as 0."""
    for label, value in (
        ("step_seconds", step_seconds),
        ("cached_step_seconds", cached_step_seconds),
    ):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
    return max(0.0, 1.0 - cached_step_seconds / step_seconds)


def autoshard_preview(dataset, policy: str, num_workers: int) -> list[list]:
    """What each of ``num_workers`` workers would read of ``dataset`` under an auto-shard policy
    (TensorFlow's own rewrite, :func:`helpers.tf_internals.auto_shard`): a list per worker."""
    import tensorflow as tf

    policies = ("AUTO", "FILE", "DATA", "OFF")
    if policy not in policies:
        raise ValueError(f"unknown policy {policy!r}; choose one of {policies}")
    positive_int("num_workers", num_workers)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(
        tf.data.experimental.AutoShardPolicy, policy
    )
    dataset = dataset.with_options(options)
    return [
        list(tf_internals.auto_shard(dataset, num_workers, w).as_numpy_iterator())
        for w in range(num_workers)
    ]


def shard_plan(
    total_bytes: float,
    *,
    hosts: int = 1,
    files_per_host: int = 10,
    min_file_bytes: float = 10e6,
) -> int:
    """How many TFRecord files to write: ``files_per_host`` per host unless they would be smaller
    than ``min_file_bytes``, then fewer, at least one per host. tensorflow.org/tutorials/load_data/
    tfrecord advises ten times as many files as hosts reading them, each at least 10 MB."""
    if total_bytes <= 0:
        raise ValueError(f"total_bytes must be positive, got {total_bytes}")
    positive_int("hosts", hosts)
    positive_int("files_per_host", files_per_host)
    if min_file_bytes <= 0:
        raise ValueError(f"min_file_bytes must be positive, got {min_file_bytes}")
    per_host = min(files_per_host, math.floor(total_bytes / hosts / min_file_bytes))
    return max(1, per_host) * hosts
