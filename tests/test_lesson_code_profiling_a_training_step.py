"""Notebook 11_profiling_a_training_step captures its first profile with plain ``tf.profiler.experimental`` calls (cell
``53dc0bba``); the later runs use ``tpucheck.profiling.profile_calls``, which it says packages the
same lines. This runs the lesson's cell as stored and the helper on the same kind of calls, in one
child process, and requires the same reading of both profiles: every call marked as one step,
one training step per call, nothing traced inside the profile.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import _run_python

NOTEBOOK = (
    Path(__file__).resolve().parent.parent / "notebooks" / "11_profiling_a_training_step.ipynb"
)
PROFILE_CELL = "53dc0bba"

SCRIPT = """
import glob, json, os, tempfile
import tensorflow as tf
from tpucheck import profiling

profile_dir = tempfile.mkdtemp(prefix="profiles-")
PROFILED_CALLS = 4
x = tf.random.stateless_uniform([64, 16], seed=(0, 1))
batches = tf.data.Dataset.from_tensor_slices((x, tf.range(64))).repeat().batch(8).prefetch(2)
naive_batches = iter(batches)
ONE = tf.constant(1)


@tf.function
def train_steps(iterator, n):  # stands in for the script's many_steps, called with n = 1
    features, labels = next(iterator)
    return tf.reduce_sum(tf.matmul(features, features, transpose_b=True)) * tf.cast(n, tf.float32)


train_steps(naive_batches, ONE)  # traced before any profile, as in the lesson
lesson = dict(tf=tf, os=os, glob=glob, profile_dir=profile_dir, PROFILED_CALLS=PROFILED_CALLS,
              train_steps=train_steps, naive_batches=naive_batches, ONE=ONE)
exec(CELL, lesson)
by_hand = profiling.summarize(profiling.extract(lesson["trace_a"]))
_, extracted = profiling.profile_calls(
    os.path.join(profile_dir, "helper"), lesson["naive_one_step"], PROFILED_CALLS
)
helper = profiling.summarize(extracted)
print("RESULT" + json.dumps({name: [s.steps, s.batches_per_step, s.retraced_calls]
                             for name, s in (("lesson", by_hand), ("helper", helper))}))
"""


def test_notebook_11s_profile_cell_and_profile_calls_read_alike():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = "".join(next(c for c in cells if c["id"] == PROFILE_CELL)["source"])
    assert "tf.profiler.experimental.start" in cell and "tf.profiler.experimental.Trace" in cell
    out = _run_python(f"CELL = {cell!r}\n" + SCRIPT).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["lesson"] == result["helper"] == [4, 1, 0], result
