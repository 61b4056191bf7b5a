"""Input pipelines that keep a TPU fed: TFRecords, pipeline stages, throughput (notebook 06_input_pipelines).

A TPU step is fast; the host CPU that decodes and augments the next batch often is not. This
module holds what notebook 06_input_pipelines measures:

- :func:`to_photos`, :func:`write_tfrecords`, :func:`read_tfrecords`, :func:`check_roundtrip`:
  a sharded TFRecord dataset of PNG-encoded images, written and read back exactly. Notebook 06_input_pipelines
  writes the writing, parsing and reading out in plain TensorFlow; ``tests/test_lesson_code_input_pipelines.py``
  checks that its cells write the same files and read the same records as these functions;
- :func:`build_pipeline`: the same input pipeline at each optimisation stage of :data:`STAGES`,
  from the typical tutorial version to a vectorised one, as one function for the self-test (00)
  and the benchmark; notebook 06_input_pipelines teaches the stages as its own cells, and checks with
  :func:`transformations` that they are built the same way;
- :func:`read_tfrecords`, :func:`decode` and :func:`augment`: the reading and per-example work
  every stage shares, incidental to the lesson;
- ``compare_throughput`` (examples per second and CPU work per example) and
  ``compare_timings``: measurements taken in one run, the candidates taking turns round by
  round, so that a busy machine slows every candidate alike; they live in :mod:`tpucheck.timing`
  with every other clock and are importable from here, as notebook 06_input_pipelines calls them;
- :func:`fill_caches`: one full pass over each pipeline that caches, before it is timed;
- :func:`input_wait_fraction`: how much of a step is spent waiting for input;
- :func:`autoshard_preview` and :func:`shard_plan`: how files are split over the workers or
  hosts that read them (the reference script's ``host_files`` gives each host its own).

TensorFlow is imported inside the functions, never at module level.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from helpers import tf_internals
from tpucheck.batches import positive_int

# Measured here in notebook 06_input_pipelines, kept with every other clock in tpucheck.timing.
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


def _feature_spec():
    import tensorflow as tf

    return {
        IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
        INDEX_KEY: tf.io.FixedLenFeature([], tf.int64),
    }


def to_photos(images: np.ndarray, size: int) -> np.ndarray:
    """Scale ``[N, H, W, C]`` float images in [0, 1] to ``uint8`` images of ``size`` x ``size``.

    The lessons' images are tiny (Fashion-MNIST's are 28x28); decoding them costs almost nothing,
    unlike the photos a real pipeline decodes. Enlarging them gives each example a realistic amount of
    decoding and augmentation work.
    Taught in notebook 11.
    """
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


def _check_image(image: np.ndarray) -> None:
    if image.dtype != np.uint8 or image.ndim != 3:
        raise ValueError(
            f"expected a uint8 image shaped [H, W, C], got {image.dtype} {image.shape}"
        )


def write_tfrecords(
    images: np.ndarray,
    labels: np.ndarray,
    directory: str | os.PathLike,
    num_shards: int,
    *,
    prefix: str = "train",
) -> list[str]:
    """Write ``images`` and ``labels`` into ``num_shards`` TFRecord files; return their paths.

    Files are named ``{prefix}-00000-of-00004.tfrecord`` and so on, the usual convention, so a
    glob such as ``train-*.tfrecord`` finds them all. ``directory`` may be local or a ``gs://``
    path (``tf.io.gfile`` handles both).
    Taught in notebook 11.
    """
    import tensorflow as tf

    images, labels = np.asarray(images), np.asarray(labels)
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)):
        raise ValueError(f"num_shards must be an integer, got {num_shards!r}")
    if not 1 <= num_shards <= len(images):
        raise ValueError(
            f"num_shards must be between 1 and the number of examples ({len(images)}), "
            f"got {num_shards}: an empty shard would give one host nothing to read"
        )
    _check_image(images[0])
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

    return tf.io.parse_example(serialized, _feature_spec())


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
    """A dataset of serialized examples from ``files``.

    ``parallel=True`` reads several files at once with ``interleave``, which is what hides the
    latency of remote storage (GCS); ``False`` reads them one after another. ``deterministic``
    None follows the dataset's ``tf.data.Options`` (deterministic unless they say otherwise).
    """
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
    """Read every example back and compare it with the original; return how many matched.

    Raises ``AssertionError`` naming the first example that differs, is missing, or appears
    twice. Order does not matter: examples are matched by their stored index.
    Taught in notebook 06.
    """
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
    """The training pipeline at one optimisation ``stage`` (a key of :data:`STAGES`).

    Every stage yields the same kind of batch, ``(float32 [batch_size, out_size, out_size, 1],
    int32 [batch_size])``, shuffled and repeated forever; each keeps the stages before it.
    ``"naive"`` is the pipeline most tutorials show: files read in turn, one ``map`` per
    example doing all the work, no parallelism, no prefetch.
    Taught in notebooks 06, 11.
    """
    import tensorflow as tf

    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {list(STAGES)}")
    positive_int("batch_size", batch_size)
    level = list(STAGES).index(stage)
    parallel = tf.data.AUTOTUNE if level >= 1 else None

    def decode_and_augment(serialized):
        image, label = decode(serialized)
        return augment(image, out_size), label

    def augment_only(image, label):
        return augment(image, out_size), label

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
    """The transformations a ``tf.data`` pipeline is built of, source first (notebook 06_input_pipelines).

    For checking that two pipelines are built alike: e.g. ``["TFRecordDataset",
    "ShuffleDataset", "RepeatDataset", "MapDataset", "BatchDataset"]``; a parallel ``map`` shows
    as ``ParallelMapDataset``, ``with_options`` as ``OptionsDataset``. It follows tf.data's
    private ``_input_dataset`` links, the only way to walk the chain; an interleave's file list
    is one step.
    Taught in notebook 06.
    """
    names = []
    while dataset is not None:
        names.append(type(dataset).__name__.lstrip("_"))
        dataset = getattr(dataset, "_input_dataset", None)
    return names[::-1]


def fill_caches(datasets, batches: int) -> list[str]:
    """Draw ``batches`` batches from each pipeline of ``datasets`` (name -> dataset) that has a
    ``cache()``; return the names of those pipelines (notebook 06_input_pipelines).

    Make ``batches`` one full pass and one batch more: the cache is then complete, kept by the
    dataset and shared by every later iterator, so a measurement afterwards sees the steady
    state. Pipelines without a cache are left alone: a pass over them prepares nothing that a
    later iterator could use, it would only cost a full pass of their work.
    Taught in notebook 06.
    """
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
    """The share of a training step spent waiting for input (notebook 06_input_pipelines).

    ``step_seconds`` is the step time fed by the real pipeline, ``cached_step_seconds`` the same
    step fed one batch held in memory, which costs no input work. The difference is time the
    accelerator waited. Near 0: compute-bound, the pipeline is fast enough. Near 1: input-bound,
    the accelerator mostly idles. Measurement noise can make the cached step the slower one; that
    reads as 0.
    Taught in notebook 06.
    """
    for label, value in (
        ("step_seconds", step_seconds),
        ("cached_step_seconds", cached_step_seconds),
    ):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
    return max(0.0, 1.0 - cached_step_seconds / step_seconds)


AUTOSHARD_POLICIES = ("AUTO", "FILE", "DATA", "OFF")


def autoshard_preview(dataset, policy: str, num_workers: int) -> list[list]:
    """What each of ``num_workers`` workers would read of ``dataset`` under an auto-shard policy.

    Multi-worker strategies shard a dataset given to ``experimental_distribute_dataset`` by
    rewriting it per worker; this calls TensorFlow's own rewrite (the internal
    ``input_ops.auto_shard_dataset`` that the strategies call), so the preview shows the real
    behaviour on one machine. Being internal, it may move in a future TensorFlow. Returns one
    list of elements (as numpy values) per worker.
    Taught in notebook 06.
    """
    import tensorflow as tf

    if policy not in AUTOSHARD_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {AUTOSHARD_POLICIES}")
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
    """How many TFRecord files to write, following TensorFlow's TFRecord guidance.

    TensorFlow's TFRecord tutorial (tensorflow.org/tutorials/load_data/tfrecord) advises about
    ten times as many files as hosts reading them, each at least 10 MB and ideally 100 MB or
    more. This gives ``files_per_host`` files per host unless they would be smaller than
    ``min_file_bytes``; then fewer, larger files, never fewer than one per host. The count is a
    multiple of ``hosts``, so every host reads the same share.
    Taught in notebook 06.
    """
    if total_bytes <= 0:
        raise ValueError(f"total_bytes must be positive, got {total_bytes}")
    for label, value in (("hosts", hosts), ("files_per_host", files_per_host)):
        positive_int(label, value)
    if min_file_bytes <= 0:
        raise ValueError(f"min_file_bytes must be positive, got {min_file_bytes}")
    per_host = min(files_per_host, math.floor(total_bytes / hosts / min_file_bytes))
    return max(1, per_host) * hosts
