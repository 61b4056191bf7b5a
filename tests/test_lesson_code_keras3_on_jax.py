"""Notebook 12_keras3_on_jax runs the reference script's data and model parts on JAX, shown in cells
(``script-part:data``, ``script-part:model``), because importing ``train_tpu`` would import
TensorFlow into the JAX process.

One child process with the JAX backend runs the lesson's cells as stored (the three names the
parts take from the script's imports part, then the two parts): the data part's
``FashionMNIST`` reads Keras' download (here a cache made of Debian's files) and hands out every
example with the script's splits; ``build`` takes a ``keras.distribution`` in the strategy's
place and builds the CNN with its uint8 input, bfloat16 layers, float32 logits and Adam's slots;
and TensorFlow is still not imported at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import _run_python

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "12_keras3_on_jax.ipynb"
CELLS = ("script-names", "part-data", "part-model")
DEBIAN = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist

SCRIPT = """
import collections, json, os, sys
from helpers import jax_port
jax_port.configure(8)
import jax, keras, numpy as np

lesson = dict(os=os, keras=keras, np=np)
for cell in CELLS:
    exec(cell, lesson)
data = lesson["FashionMNIST"]()
splits, first = collections.Counter(), None
for name, split, item in data.examples():
    splits[split] += 1
    first = first or data.read(item)
x, label = first
model, optimizer = lesson["build"](
    keras.distribution.DataParallel(devices=jax.devices()), 1e-3,
    shape=data.SHAPE, classes=len(data.CLASSES), uint8=True, bf16=True,  # as on a TPU
)
logits = model.predict(np.stack([x] * 64), batch_size=64, verbose=0)
print("RESULT" + json.dumps(dict(
    splits=dict(splits), shape=list(x.shape), dtype=str(x.dtype), label=label,
    input_dtype=str(model.inputs[0].dtype), hidden_dtype=model.layers[2].dtype_policy.name,
    logits_dtype=str(logits.dtype), logits_shape=list(logits.shape),
    finite=bool(np.all(np.isfinite(logits))), slots=len(optimizer.variables),
    weights=len(model.trainable_variables), tensorflow="tensorflow" in sys.modules)))
"""


def test_notebook_12s_script_parts_run_on_jax_without_tensorflow(tmp_path):
    if not (DEBIAN / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    cache = tmp_path / ".keras" / "datasets" / "fashion-mnist"
    cache.mkdir(parents=True)
    for file in DEBIAN.glob("*.gz"):
        shutil.copy(file, cache)
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    assert "class FashionMNIST" in cells["part-data"] and "def build(" in cells["part-model"]
    env = {"HOME": str(tmp_path), "KERAS_HOME": None, "KERAS_BACKEND": None, "XLA_FLAGS": None}
    stored = [cells[name] for name in CELLS]
    out = _run_python(f"CELLS = {stored!r}\n" + SCRIPT, env=env).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    splits = result["splits"]
    assert splits["test"] == 10000 and splits["train"] + splits["validation"] == 60000
    assert 0.09 < splits["validation"] / 60000 < 0.11  # split_of holds out a tenth
    assert result["shape"] == [28, 28, 1] and result["dtype"] == "uint8"
    assert result["input_dtype"] == "uint8" and result["hidden_dtype"] == "mixed_bfloat16"
    assert result["logits_dtype"] == "float32" and result["logits_shape"] == [64, 10]
    assert result["finite"]
    # Adam's two slots per trainable variable, and its iteration count, exist before training.
    assert result["slots"] > 2 * result["weights"]
    assert result["tensorflow"] is False, "TensorFlow was imported in the JAX process"


def test_notebook_12s_settings_taken_from_the_script_are_the_parsers():
    # The lesson cannot import the script (TensorFlow beside JAX), so its parameters cell states
    # the script's values as literals; here they are held to the script's parser.
    import ast
    import sys

    sys.path.insert(0, str(NOTEBOOK.parent.parent))
    import train_tpu

    cells = json.loads(NOTEBOOK.read_text())["cells"]
    (parameters,) = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    stated = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse("".join(parameters["source"])).body
        if isinstance(node, ast.Assign)
    }
    script = {
        "BASE_LEARNING_RATE": train_tpu.parse_args([]).learning_rate,
        "MAX_TRAIN": train_tpu.parse_args(["--smoke"]).train_examples,
    }
    wrong = [f"{name} = {value!r}" for name, value in script.items() if stated[name] != value]
    assert not wrong, f"set in {NOTEBOOK.name}'s parameters cell, as the script's parser: {wrong}"
