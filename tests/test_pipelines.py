"""helpers.pipelines: TFRecords round trip, pipeline stages, timing in turns, sharding.

Timing tests use a fake clock (as tests/test_timing.py does), so they check exactly what was
measured and never depend on the machine's speed.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from helpers import pipelines
from tpucheck import timing


@pytest.fixture(scope="module")
def photos():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 12, 12, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, 40).astype(np.int32)
    return images, labels


@pytest.fixture
def files(tmp_path, photos):
    return pipelines.write_tfrecords(*photos, tmp_path, 4)


# --- to_photos --------------------------------------------------------------------------------


def test_to_photos_scales_and_converts():
    small = np.linspace(0, 1, 2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 1)
    big = pipelines.to_photos(small, 16)
    assert big.shape == (2, 16, 16, 1) and big.dtype == np.uint8
    assert big.min() == 0 and big.max() == 255  # the full [0, 1] range maps to [0, 255]


@pytest.mark.parametrize(
    ("images", "size", "message"),
    [
        (np.zeros((4, 4, 1)), 8, r"\[N, H, W, C\]"),
        (np.full((1, 4, 4, 1), 2.0), 8, r"in \[0, 1\]"),
        (np.zeros((1, 4, 4, 1)), 0, "positive integer"),
        (np.zeros((1, 4, 4, 1)), 8.5, "positive integer"),
    ],
)
def test_to_photos_rejects_bad_input(images, size, message):
    with pytest.raises(ValueError, match=message):
        pipelines.to_photos(images, size)


# --- TFRecords --------------------------------------------------------------------------------


def test_a_written_example_parses_and_decodes(tmp_path, photos):
    images, labels = photos
    (path,) = pipelines.write_tfrecords(images[3:4], labels[3:4], tmp_path, 1)
    record = next(iter(tf.data.TFRecordDataset(path)))
    features = pipelines.parse(record)
    assert int(features[pipelines.INDEX_KEY]) == 0
    assert int(features[pipelines.LABEL_KEY]) == labels[3]
    image, label = pipelines.decode(record)
    np.testing.assert_array_equal(image.numpy(), images[3])
    assert label.dtype == tf.int32 and int(label) == labels[3]


def test_write_tfrecords_rejects_float_images(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        pipelines.write_tfrecords(np.zeros((1, 4, 4, 1), np.float32), np.zeros(1), tmp_path, 1)


def test_write_tfrecords_names_and_splits_the_shards(tmp_path, photos):
    paths = pipelines.write_tfrecords(*photos, tmp_path / "sub", 3, prefix="val")
    assert [os.path.basename(p) for p in paths] == [
        f"val-{i:05d}-of-00003.tfrecord" for i in range(3)
    ]
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [len(part) for part in np.array_split(np.arange(len(photos[0])), 3)]


def test_roundtrip_of_written_files(files, photos):
    assert pipelines.check_roundtrip(files, *photos) == len(photos[0])


def test_roundtrip_detects_a_changed_image(files, photos):
    images, labels = photos
    changed = images.copy()
    changed[7, 0, 0, 0] ^= 1
    with pytest.raises(AssertionError, match="example 7: the decoded image differs"):
        pipelines.check_roundtrip(files, changed, labels)


def test_roundtrip_detects_a_wrong_label(files, photos):
    images, labels = photos
    wrong = labels.copy()
    wrong[5] = (wrong[5] + 1) % 10
    with pytest.raises(AssertionError, match="example 5: label"):
        pipelines.check_roundtrip(files, images, wrong)


def test_roundtrip_detects_missing_and_duplicate_examples(files, photos):
    images, labels = photos
    with pytest.raises(AssertionError, match="missing"):
        pipelines.check_roundtrip(files[1:], images, labels)
    with pytest.raises(AssertionError, match="read twice"):
        pipelines.check_roundtrip(files + files[:1], images, labels)
    with pytest.raises(AssertionError, match="outside"):
        pipelines.check_roundtrip(files, images[:10], labels[:10])


@pytest.mark.parametrize(
    ("labels_len", "shards", "message"),
    [
        (39, 4, "40 images but 39 labels"),
        (40, 0, "between 1 and"),
        (40, 41, "between 1 and"),
        (40, 2.0, "integer"),
    ],
)
def test_write_tfrecords_rejects_bad_arguments(tmp_path, photos, labels_len, shards, message):
    images, labels = photos
    with pytest.raises(ValueError, match=message):
        pipelines.write_tfrecords(images, labels[:labels_len], tmp_path, shards)


def test_read_tfrecords_parallel_and_sequential_agree(files, photos):
    def indices(ds):
        return [int(pipelines.parse(r)[pipelines.INDEX_KEY]) for r in ds]

    sequential = indices(pipelines.read_tfrecords(files, parallel=False))
    assert sequential == list(range(len(photos[0])))  # files one after another, in order
    parallel = indices(pipelines.read_tfrecords(files, deterministic=False))
    assert sorted(parallel) == sequential


def test_read_tfrecords_needs_files():
    with pytest.raises(ValueError, match="no TFRecord files"):
        pipelines.read_tfrecords([])


# --- augmentation and stages ------------------------------------------------------------------


def test_augment_one_image_and_a_batch():
    tf.random.set_seed(0)
    one = pipelines.augment(tf.fill([12, 12, 1], tf.constant(200, tf.uint8)), 8)
    assert one.shape == (8, 8, 1) and one.dtype == tf.float32
    gradient = tf.cast(tf.tile(tf.range(12)[None, :, None], [12, 1, 1]) * 20, tf.uint8)
    batch = pipelines.augment(tf.stack([gradient] * 16), 8)
    assert batch.shape == (16, 8, 8, 1)
    values = batch.numpy()
    assert 0.0 <= values.min() and values.max() <= 1.0
    # Identical inputs, yet different outputs: each image gets its own random crop and flip.
    assert len({v.tobytes() for v in values}) == 16


@pytest.mark.parametrize("stage", list(pipelines.STAGES))
def test_every_stage_yields_the_same_static_batches(files, photos, stage):
    ds = pipelines.build_pipeline(files, 8, stage, out_size=6, shuffle_buffer=16)
    image_spec, label_spec = ds.element_spec
    assert image_spec.shape == (8, 6, 6, 1) and image_spec.dtype == tf.float32
    assert label_spec.shape == (8,) and label_spec.dtype == tf.int32
    seen = set()
    for images, labels in ds.take(12):  # more than one pass over 40 examples: repeats
        assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
        seen.update(labels.numpy().tolist())
    assert seen <= set(photos[1].tolist())


def test_transformations_tell_the_stages_apart(files):
    steps = {
        stage: pipelines.transformations(pipelines.build_pipeline(files, 8, stage, out_size=6))
        for stage in pipelines.STAGES
    }
    assert len({tuple(s) for s in steps.values()}) == len(pipelines.STAGES)
    assert steps["naive"][1:] == ["ShuffleDataset", "RepeatDataset", "MapDataset", "BatchDataset"]
    assert "CacheDataset" not in steps["parallel"] and "CacheDataset" in steps["cache"]
    assert steps["prefetch"] == steps["cache"] + ["PrefetchDataset"]
    assert steps["non-deterministic"] == steps["prefetch"] + ["OptionsDataset"]
    assert steps["vectorised"][-4:-2] == ["BatchDataset", "ParallelMapDataset"]  # augment batches


@pytest.mark.parametrize(
    ("stage", "batch", "message"),
    [
        ("fast", 8, "unknown stage"),
        ("naive", 0, "positive integer"),
        ("naive", True, "positive integer"),
    ],
)
def test_build_pipeline_rejects_bad_arguments(files, stage, batch, message):
    with pytest.raises(ValueError, match=message):
        pipelines.build_pipeline(files, batch, stage, out_size=6)


# --- timing in turns --------------------------------------------------------------------------


def test_compare_timings_takes_turns_with_fresh_tasks(clock):
    log = []

    def setup(name, cost):
        def make():
            log.append(f"setup {name}")

            def task():
                log.append(name)
                clock.now += cost

            return task

        return make

    result = pipelines.compare_timings(
        {"a": setup("a", 0.01), "b": setup("b", 0.03)}, calls=2, warmup=1, rounds=2
    )
    one_round = ["setup a", "a", "a", "a", "setup b", "b", "b", "b"]  # 1 warm-up + 2 timed each
    assert log == one_round * 2
    assert isinstance(result["a"], timing.Timing) and len(result["a"].seconds) == 2
    assert result["a"].median == pytest.approx(0.01) and result["b"].median == pytest.approx(0.03)


@pytest.mark.parametrize(
    ("kwargs", "message"), [({}, "nothing to time"), ({"rounds": 0}, "rounds")]
)
def test_compare_timings_rejects_bad_arguments(kwargs, message):
    setups = {} if not kwargs else {"a": lambda: lambda: None}
    with pytest.raises(ValueError, match=message):
        pipelines.compare_timings(setups, calls=1, **kwargs)


def test_throughput_summaries():
    t = pipelines.Throughput(
        batch_size=10, wall_seconds=(0.5, 0.2, 0.4), cpu_seconds=(1.0, 3.0, 2.0)
    )
    assert t.examples_per_second == pytest.approx(10 / 0.2)  # the fastest round
    assert t.cpu_us_per_example == pytest.approx(1e6 * 2.0 / 10)  # the median round


def test_compare_throughput_reads_batch_sizes_and_times_every_round(monkeypatch):
    wall_ticks, cpu_ticks = iter(range(10_000)), iter(range(0, 20_000, 2))
    # Each reading of a clock advances it (wall by 1 s, CPU by 2 s): a pipeline timed for 3 s
    # delivers exactly 3 batches, each "taking" 1 s, whatever the machine does meanwhile.
    monkeypatch.setattr(
        timing,
        "time",
        SimpleNamespace(
            perf_counter=lambda: float(next(wall_ticks)),
            process_time=lambda: float(next(cpu_ticks)),
        ),
    )
    drawn = {"small": 0, "large": 0}

    def counted(name, size):
        def note(x):
            drawn[name] += 1
            return x

        ds = tf.data.Dataset.range(10_000).batch(size)
        return ds.map(lambda x: tf.py_function(note, [x], tf.int64))

    result = pipelines.compare_throughput(
        {"small": counted("small", 4), "large": counted("large", 12)},
        seconds=3,
        warmup=1,
        rounds=2,
    )
    small, large = result["small"], result["large"]
    assert (small.batch_size, large.batch_size) == (4, 12)
    assert small.wall_seconds == (1.0, 1.0)
    assert small.cpu_seconds == pytest.approx((2 / 3, 2 / 3))
    assert small.examples_per_second == pytest.approx(4.0)
    assert large.examples_per_second == pytest.approx(3 * small.examples_per_second)
    assert large.cpu_us_per_example == pytest.approx(small.cpu_us_per_example / 3)
    # one batch to read the size + 2 rounds x (1 warm-up + 3 timed), at least
    assert drawn["small"] >= 1 + 2 * 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup": -1}, "warmup"),
        ({"rounds": 1.5}, "rounds"),
        ({"seconds": 0}, "seconds"),
        ({"seconds": float("inf")}, "seconds"),
        ({"rounds": 0}, "rounds"),
    ],
)
def test_compare_throughput_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipelines.compare_throughput({"a": tf.data.Dataset.range(4).batch(2)}, **kwargs)
    with pytest.raises(ValueError, match="no pipelines"):
        pipelines.compare_throughput({})


def test_input_wait_fraction():
    assert pipelines.input_wait_fraction(0.04, 0.01) == pytest.approx(0.75)
    assert pipelines.input_wait_fraction(0.01, 0.01) == 0.0
    assert pipelines.input_wait_fraction(0.009, 0.01) == 0.0  # noise: cached step measured slower
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            pipelines.input_wait_fraction(bad, 0.01)
        with pytest.raises(ValueError, match="positive number of seconds"):
            pipelines.input_wait_fraction(0.01, bad)


# --- sharding ---------------------------------------------------------------------------------


def _by_index(files):
    return pipelines.read_tfrecords(files, parallel=False).map(
        lambda s: pipelines.parse(s)[pipelines.INDEX_KEY]
    )


def test_autoshard_policies(files, photos):
    n = len(photos[0])
    shards = np.array_split(np.arange(n), len(files))  # the examples of each file
    file_of = {int(i): f for f, part in enumerate(shards) for i in part}
    by_file = pipelines.autoshard_preview(_by_index(files), "FILE", 2)
    for worker, ids in enumerate(by_file):  # whole files: worker w gets files w, w + 2, ...
        assert {file_of[int(i)] % 2 for i in ids} == {worker}
    data = pipelines.autoshard_preview(_by_index(files), "DATA", 2)
    assert [list(map(int, ids)) for ids in data] == [list(range(0, n, 2)), list(range(1, n, 2))]
    off = pipelines.autoshard_preview(_by_index(files), "OFF", 2)
    assert all(sorted(map(int, ids)) == list(range(n)) for ids in off)


def test_autoshard_file_policy_needs_enough_files(files):
    with pytest.raises(tf.errors.InvalidArgumentError, match="not enough"):
        pipelines.autoshard_preview(_by_index(files), "FILE", len(files) + 1)


@pytest.mark.parametrize(
    ("policy", "workers", "message"), [("BY_HOST", 2, "unknown policy"), ("FILE", 0, "positive")]
)
def test_autoshard_preview_rejects_bad_arguments(files, policy, workers, message):
    with pytest.raises(ValueError, match=message):
        pipelines.autoshard_preview(_by_index(files), policy, workers)


def test_shard_plan():
    assert pipelines.shard_plan(5e9) == 10  # 10 files per host, 500 MB each
    assert pipelines.shard_plan(5e9, hosts=4) == 40  # 125 MB each
    assert pipelines.shard_plan(250e6, hosts=4) == 24  # 10 per host would be 6 MB: 6 per host
    assert pipelines.shard_plan(25e6) == 2  # a small dataset: files of at least 10 MB
    assert pipelines.shard_plan(1e6, hosts=4) == 4  # never fewer than one file per host
    assert pipelines.shard_plan(1e3, files_per_host=3, min_file_bytes=100) == 3
    for kwargs, message in (
        ({"total_bytes": 0}, "total_bytes"),
        ({"total_bytes": 1e6, "hosts": 0}, "hosts"),
        ({"total_bytes": 1e6, "files_per_host": 0}, "files_per_host"),
        ({"total_bytes": 1e6, "min_file_bytes": -1}, "min_file_bytes"),
    ):
        with pytest.raises(ValueError, match=message):
            pipelines.shard_plan(**kwargs)


def test_fill_caches_reads_only_the_pipelines_that_cache():
    reads = {"cached": 0, "plain": 0}

    def counted(name):
        def count(x):
            reads[name] += 1
            return x

        return lambda x: tf.py_function(count, [x], tf.int64)

    cached = tf.data.Dataset.range(10).map(counted("cached")).cache().repeat().batch(5)
    plain = tf.data.Dataset.range(10).map(counted("plain")).repeat().batch(5)
    assert pipelines.fill_caches({"cached": cached, "plain": plain}, 3) == ["cached"]
    assert reads == {"cached": 10, "plain": 0}  # one full pass filled the cache; no more
    assert [int(v) for v in next(iter(cached))] == [0, 1, 2, 3, 4]
    assert reads["cached"] == 10  # a later iterator reads from the cache


@pytest.mark.parametrize("batches", [0, -1, 1.5, True])
def test_fill_caches_rejects_bad_batches(batches):
    with pytest.raises(ValueError, match="batches"):
        pipelines.fill_caches({}, batches)
