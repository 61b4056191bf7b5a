"""Notebook 01_tpu_detection_and_connection connects with the reference script's ``connect()`` and teaches its rules: decide by
the signs of TPU hardware, make the four calls with ``tpu="local"``, and initialise the TPU once
(a second ``initialize_tpu_system`` can lose the TPU's variables, tensorflow/tensorflow#31961).

One fresh interpreter runs ``train_tpu.connect`` on pretended TPU hardware, TensorFlow's four TPU
entry points replaced by recorders: the calls, their argument and their order are the lesson's,
and a second ``connect()`` makes none.
"""

from __future__ import annotations

import json

import numpy as np
from conftest import NO_TPU, _run_python

from helpers import plots

SCRIPT = """
import json, os
os.environ["ISTPUVM"] = "1"  # a sign of TPU hardware (train_tpu.TPU_SIGNS)
import tensorflow as tf
import train_tpu

calls = []


class Resolver:
    def __init__(self, tpu=None):
        self.tpu = tpu
        calls.append(["TPUClusterResolver", tpu])


class Strategy:
    num_replicas_in_sync = 8

    def __init__(self, resolver):
        calls.append(["TPUStrategy", resolver.tpu])


tf.distribute.cluster_resolver.TPUClusterResolver = Resolver
tf.config.experimental_connect_to_cluster = (
    lambda r: calls.append(["experimental_connect_to_cluster", r.tpu]))
tf.tpu.experimental.initialize_tpu_system = (
    lambda r: calls.append(["initialize_tpu_system", r.tpu]))
tf.distribute.TPUStrategy = Strategy
first = train_tpu.connect(8)
second = train_tpu.connect(8)
print("RESULT" + json.dumps(dict(calls=calls, same=first is second, signs=train_tpu.tpu_signs())))
"""


def test_connect_on_tpu_hardware_makes_the_four_calls_once():
    out = _run_python(SCRIPT, env=NO_TPU).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["calls"] == [
        ["TPUClusterResolver", "local"],
        ["experimental_connect_to_cluster", "local"],
        ["initialize_tpu_system", "local"],
        ["TPUStrategy", "local"],
    ]
    assert result["same"] and "ISTPUVM=1" in result["signs"]


def test_plot_samples_titles_one_image_per_class():
    import matplotlib

    matplotlib.use("Agg")
    x = np.zeros((6, 28, 28, 1), "float32")
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"))
    assert [ax.get_title() for ax in fig.axes] == ["0: a", "1: b", "2: c"]
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"), count=2)
    assert len(fig.axes) == 2
