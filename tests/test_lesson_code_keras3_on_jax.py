"""Notebook 12_keras3_on_jax writes its layout map in plain ``keras.distribution`` calls (cell ``26``), and
loads Fashion-MNIST with ``helpers.data`` in a process that must never import TensorFlow.

One child process with the JAX backend: the lesson's cell, as stored, builds the same layout as
``helpers.jax_port.classifier_layout``; both of ``helpers.data``'s Fashion-MNIST routes (Debian's
files, and Keras' download, here from a cache made of the same files) give the same arrays; and
TensorFlow is still not imported at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import _run_python

from helpers import data

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "12_keras3_on_jax.ipynb"
LAYOUT_CELL = "26"

SCRIPT = """
import json, sys
from helpers import jax_port
jax_port.configure(8)
import jax, keras, numpy as np
from helpers import data

devices = jax.devices()
lesson = dict(keras=keras, jax_port=jax_port, devices=devices, DEVICES=len(devices), MODEL_AXIS=4)
exec(CELL, lesson)
helper = jax_port.classifier_layout(lesson["mesh"])
mine = lesson["layout_map"]
layouts = {key: [list(mine[key].axes), list(helper[key].axes)] for key in helper.keys()}
debian = data.load_images("fashion_mnist")
downloaded = data._from_keras("fashion_mnist")  # HOME's Keras cache holds the same files
same = all(np.array_equal(getattr(debian, k), getattr(downloaded, k))
           for k in ("x_train", "y_train", "x_test", "y_test"))
print("RESULT" + json.dumps(dict(layouts=layouts, keys=sorted(mine.keys()), helper_keys=sorted(helper.keys()),
      same=same, train=len(debian.x_train), tensorflow="tensorflow" in sys.modules)))
"""


def test_notebook_12s_layout_map_and_data_without_tensorflow(tmp_path):
    if not (data.DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cache = tmp_path / ".keras" / "datasets" / "fashion-mnist"
    cache.mkdir(parents=True)
    for file in data.DEBIAN_FASHION_MNIST.glob("*.gz"):
        shutil.copy(file, cache)
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = "".join(next(c for c in cells if c["id"] == LAYOUT_CELL)["source"])
    assert "keras.distribution.LayoutMap" in cell
    env = {"HOME": str(tmp_path), "KERAS_BACKEND": None, "XLA_FLAGS": None}
    out = _run_python(f"CELL = {cell!r}\n" + SCRIPT, env=env).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["keys"] == result["helper_keys"]
    for key, (mine, helper) in result["layouts"].items():
        assert mine == helper, key
    assert result["same"] and result["train"] == 60000
    assert result["tensorflow"] is False, "TensorFlow was imported in the JAX process"
