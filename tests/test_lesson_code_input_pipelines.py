"""Notebook 06_input_pipelines reads its photos' TFRecords in plain TensorFlow (cell ``8670aeb9``:
the feature spec, parsing and parallel reading); ``helpers.pipelines`` packages the same code for
the self-test, the benchmark and later lessons, and writes the files the lesson reads.

The lesson's cell runs as stored, on a few small images: its ``decode`` and ``read_files`` give
what ``pipelines.decode`` and ``pipelines.read_tfrecords`` give. No strategy is involved, so no
child process either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers import pipelines

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "notebooks" / "06_input_pipelines.ipynb"
READ_CELL = "8670aeb9"


def _lesson_cell(cell_id: str) -> str:
    cells = json.loads(LESSON.read_text())["cells"]
    return "".join(next(c for c in cells if c["id"] == cell_id)["source"])


@pytest.fixture(scope="module")
def lesson():
    namespace = {"tf": tf, "np": np, "os": os}
    cell = _lesson_cell(READ_CELL)
    assert all(name in cell for name in ("parse_single_example", "decode_png", "interleave"))
    exec(cell, namespace)
    return namespace


@pytest.fixture(scope="module")
def photos():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (10, 12, 12, 1), dtype=np.uint8), rng.integers(0, 10, 10)


def test_the_lessons_reading_is_the_helpers(lesson, photos, tmp_path):
    images, labels = photos
    files = pipelines.write_tfrecords(images, labels, tmp_path, 4)
    records = list(tf.data.TFRecordDataset(files).as_numpy_iterator())
    for record in records:
        image, label = lesson["decode"](tf.constant(record))
        expected_image, expected_label = pipelines.decode(tf.constant(record))
        assert image.dtype == expected_image.dtype and label.dtype == expected_label.dtype
        np.testing.assert_array_equal(image.numpy(), expected_image.numpy())
        assert int(label) == int(expected_label)
    read = lesson["read_files"](files, deterministic=False)
    assert read.element_spec == pipelines.read_tfrecords(files).element_spec
    assert sorted(read.as_numpy_iterator()) == sorted(records)
    in_order = list(lesson["read_files"](files).as_numpy_iterator())
    assert in_order == list(pipelines.read_tfrecords(files).as_numpy_iterator())
    assert pipelines.transformations(lesson["read_files"](files)) == pipelines.transformations(
        pipelines.read_tfrecords(files)
    )
