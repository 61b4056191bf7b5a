"""Notebook 01 writes the TPU connection out in plain TensorFlow (cell ``connect-by-hand``) and
then says that ``helpers.connect()`` makes the same calls: this test holds it to that.

One fresh interpreter runs the stored cell and ``connect()`` twice over: on pretended TPU
hardware, with TensorFlow's four TPU entry points replaced by recorders, the two must make the
same calls with the same arguments in the same order; on this CPU, both must build the same
simulated TPU (the same strategy class over the same devices).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import NO_TPU, _run_python

from helpers import plots

ROOT = Path(__file__).resolve().parent.parent
LESSON_CELL = ("01_tpu_detection_and_connection.ipynb", "connect-by-hand")

SCRIPT = """
import json, os
import tensorflow as tf
import helpers
from helpers import runtime
from helpers import strategy as chosen

calls = []


class Resolver:
    def __init__(self, tpu=None):
        self.tpu = tpu
        calls.append(["TPUClusterResolver", tpu])


class Strategy:
    num_replicas_in_sync = 8

    def __init__(self, resolver):
        calls.append(["TPUStrategy", resolver.tpu])


ENTRY_POINTS = [
    (tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver),
    (tf.config, "experimental_connect_to_cluster",
     lambda r: calls.append(["experimental_connect_to_cluster", r.tpu])),
    (tf.tpu.experimental, "initialize_tpu_system",
     lambda r: calls.append(["initialize_tpu_system", r.tpu])),
    (tf.distribute, "TPUStrategy", Strategy),
]
real = [getattr(module, name) for module, name, _ in ENTRY_POINTS]


def lesson_cell(replicas):
    scope = dict(tf=tf, hints=runtime.tpu_hints(), SIMULATED_REPLICAS=replicas)
    exec(CELL, scope)
    return scope["strategy"]


# 1. On (pretended) TPU hardware: the recorded calls of the cell, then of connect().
os.environ["ISTPUVM"] = "1"
runtime.tensorflow_tpu_support = lambda: runtime.TPUSupport(None, "pretended")
for module, name, stub in ENTRY_POINTS:
    setattr(module, name, stub)
lesson_cell(8)
by_hand, calls[:] = list(calls), []
helpers.connect(8)
by_helper = list(calls)

# 2. On this CPU: the real TensorFlow, no TPU hints, a fresh choice for connect().
for (module, name, _), original in zip(ENTRY_POINTS, real):
    setattr(module, name, original)
del os.environ["ISTPUVM"]
chosen._CHOSEN.clear()
simulated = lesson_cell(REPLICAS)
helper = helpers.connect(REPLICAS)
print("RESULT" + json.dumps(dict(
    by_hand=by_hand, by_helper=by_helper,
    cpu=[[type(s).__name__, list(s.extended.worker_devices)] for s in (simulated, helper)],
)))
"""


def lesson_cell() -> str:
    name, cell_id = LESSON_CELL
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return "".join(next(c for c in cells if c["id"] == cell_id)["source"])


def test_connect_makes_the_calls_notebook_01_writes_out():
    cell = lesson_cell()
    for call in ("TPUClusterResolver(tpu=", "experimental_connect_to_cluster", "TPUStrategy("):
        assert call in cell, call
    out = _run_python(f"CELL = {cell!r}\nREPLICAS = 8\n" + SCRIPT, env=NO_TPU).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["by_hand"] == [
        ["TPUClusterResolver", "local"],
        ["experimental_connect_to_cluster", "local"],
        ["initialize_tpu_system", "local"],
        ["TPUStrategy", "local"],
    ]
    assert result["by_helper"] == result["by_hand"]
    (cell_kind, cell_devices), (helper_kind, helper_devices) = result["cpu"]
    assert cell_kind == helper_kind == "MirroredStrategy"
    assert cell_devices == helper_devices and len(cell_devices) == 8


def test_plot_samples_titles_one_image_per_class():
    import matplotlib

    matplotlib.use("Agg")
    x = np.zeros((6, 28, 28, 1), "float32")
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"))
    assert [ax.get_title() for ax in fig.axes] == ["0: a", "1: b", "2: c"]
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"), count=2)
    assert len(fig.axes) == 2
