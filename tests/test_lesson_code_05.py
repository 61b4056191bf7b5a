"""Notebook 05 writes the per-layer ``mixed_bfloat16`` classifier in plain Keras (cell
``86f49fff``) and later lessons call ``helpers.models.build_classifier``: the same model.

The lesson's cell runs as stored; both builders make the same layers with the same dtypes and
the same initial weights, and give the same logits for the same images. One device, no strategy:
the model does not depend on one.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import models, precision

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "notebooks" / "05_bfloat16_mixed_precision.ipynb"
CLASSIFIER_CELL = "86f49fff"


def _lesson_cell(cell_id: str) -> str:
    cells = json.loads(LESSON.read_text())["cells"]
    return "".join(next(c for c in cells if c["id"] == cell_id)["source"])


@pytest.fixture(scope="module")
def lesson_build_classifier():
    cell = _lesson_cell(CLASSIFIER_CELL)
    assert "def build_classifier" in cell and 'dtype="float32"' in cell
    namespace = {"keras": keras}
    exec(cell, namespace)
    return namespace["build_classifier"]


def _dtypes(model):
    return [
        (row.kind, row.policy, row.variable_dtype, row.compute_dtype, row.output_dtype)
        for row in precision.layer_dtypes(model)
    ]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "bfloat16", "mixed_float16"])
def test_lesson_classifier_is_models_build_classifier(lesson_build_classifier, policy):
    shape = (28, 28, 1)
    lesson = lesson_build_classifier(shape, 10, policy=policy, name="lesson")
    helper = models.build_classifier(shape, 10, dtype=policy, name="helper")
    assert _dtypes(lesson) == _dtypes(helper)
    assert [w.shape for w in lesson.weights] == [w.shape for w in helper.weights]
    for a, b in zip(lesson.get_weights(), helper.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # the same seeds, the same initial weights
    images = np.random.default_rng(0).random((4, *shape), dtype=np.float32)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(lesson(images)), keras.ops.convert_to_numpy(helper(images))
    )
    precision.check_float32_output(lesson)
