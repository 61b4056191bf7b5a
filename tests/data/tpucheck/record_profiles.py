"""Re-record ``profiles.json``, the traces the unit tests of ``tpucheck.profiling`` read.

Run from the repository root: ``python tests/data/tpucheck/record_profiles.py``. It profiles short runs
on the simulated TPU (8 replicas) with the helpers of notebook 11 and stores what
``profiling.extract`` read from each ``.xplane.pb``, plus how each run was made (``"made"``), so
the tests can check the readers and the diagnosis against runs whose limit is known:

- ``one_step``, ``many_steps``: notebook 11's model (Dense 128 on 32x32 images, global batch 128)
  on an in-memory, cached pipeline, one and three training steps per call;
- ``busy_one_step``: the same with a hidden layer of 4,096: long, busy steps, one per call;
- ``tiny_one_step``, ``tiny_many_steps``: a Dense-16 model on the 8x8 digits at global batch 64,
  so each step has almost nothing to compute: one and ten steps per call;
- ``py_function_input``: notebook 11's model fed by a pipeline that runs a Python function on
  every example (``tf.py_function`` in a plain ``map``);
- ``retracing``: a loss scale passed as a new Python number at every call;
- ``shape_retracing``: token sequences sorted by length and padded per batch
  (``padded_batch``), so every batch has a new sequence length and the step traces again.

Each run prints its summary and diagnosis: check them before committing a new recording.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from helpers import quiet

quiet.quiet_tensorflow()  # before TensorFlow's first import, which the next imports make

import helpers  # noqa: E402
from helpers import loops, models, pipelines  # noqa: E402
from tpucheck import profiling  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the offline digits
import digits as data  # noqa: E402

strategy = helpers.connect(8)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, STEPS_PER_CALL, TINY_BATCH, TINY_STEPS_PER_CALL = 128, 3, 64, 10
images = data.digits(max_train=512)
x = pipelines.to_photos(images.x_train, 32).astype("float32") / 255.0
digits = images.x_train.astype("float32")  # 8x8


def one_step_function(model, optimizer, batch):
    """One training step per call, as notebook 11 writes it; ``scale`` multiplies the loss."""

    @tf.function
    def one_step(inputs, labels, scale):
        def replica(inputs, labels):
            with tf.GradientTape() as tape:
                logits = model(inputs, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, True)
                loss = tf.reduce_sum(per_example) * scale / batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(replica, args=(inputs, labels))
        return strategy.reduce("SUM", per_replica, axis=None)

    return one_step


def classifier(shape, hidden):
    with strategy.scope():
        model = models.build_classifier(shape, hidden=hidden)
        optimizer = loops.build_optimizer(strategy, keras.optimizers.SGD(0.01), model)
    return model, optimizer


def batches(dataset):
    return iter(strategy.experimental_distribute_dataset(dataset))


def training(inputs, hidden, batch):
    """A classifier of ``hidden`` units on ``inputs``: its one-step and many-steps functions
    and an iterator over an in-memory, cached pipeline (input is cheap there)."""
    model, optimizer = classifier(inputs.shape[1:], hidden)
    step = one_step_function(model, optimizer, batch)
    steps = loops.make_train_steps(strategy, model, optimizer, batch)
    return step, steps, batches(data.make_dataset(inputs, images.y_train, batch, replicas=8))


ONE = tf.constant(1.0)
runs, made = {}, {}  # name -> (call, calls, warmup), name -> how the run was made

one_step, many_steps, fast = training(x, 128, BATCH)  # notebook 11's model
runs["one_step"] = (lambda i: one_step(*next(fast), ONE), 3, 2)
runs["many_steps"] = (lambda i: many_steps(fast, STEPS_PER_CALL), 2, 1)
runs["retracing"] = (lambda i: one_step(*next(fast), 1.0 + i / 100), 2, 0)
made["one_step"] = f"Dense 128 on 32x32, global batch {BATCH}, cached input, 1 step per call"
made["many_steps"] = f"the same, {STEPS_PER_CALL} steps per call (helpers.loops.make_train_steps)"
made["retracing"] = "the same one-step function, its loss scale a new Python float per call"

busy_step, _, busy = training(x, 4096, BATCH)
runs["busy_one_step"] = (lambda i: busy_step(*next(busy), ONE), 3, 2)
made["busy_one_step"] = f"Dense 4096 on 32x32, global batch {BATCH}, cached input, 1 step per call"

tiny_step, tiny_steps, tiny = training(digits, 16, TINY_BATCH)
runs["tiny_one_step"] = (lambda i: tiny_step(*next(tiny), ONE), 5, 2)
runs["tiny_many_steps"] = (lambda i: tiny_steps(tiny, TINY_STEPS_PER_CALL), 3, 1)
made["tiny_one_step"] = f"Dense 16 on the 8x8 digits, global batch {TINY_BATCH}, 1 step per call"
made["tiny_many_steps"] = f"the same, {TINY_STEPS_PER_CALL} steps per call"


def blur_and_noise(image):
    """A 3x3 blur and noise in Python, pixel by pixel, as a first augmentation is often written."""
    pixels = image.numpy()[..., 0]
    size = pixels.shape[0]
    out = np.empty_like(pixels)
    for row in range(size):
        for col in range(size):
            near = [
                pixels[r, c]
                for r in range(max(row - 1, 0), min(row + 2, size))
                for c in range(max(col - 1, 0), min(col + 2, size))
            ]
            out[row, col] = min(1.0, max(0.0, sum(near) / len(near) + random.gauss(0.0, 0.05)))
    return out[..., None]


def augment(image, label):
    image = tf.py_function(blur_and_noise, [image], tf.float32)
    return tf.ensure_shape(image, x.shape[1:]), label


def py_function_input():
    """Made when its run starts: a pipeline started earlier fills its buffers while the other
    runs are profiled, and the profile would show batches made long before, not the pipeline."""
    slow = tf.data.Dataset.from_tensor_slices((x, images.y_train)).repeat().map(augment)
    slow = batches(slow.batch(BATCH, drop_remainder=True).prefetch(2))
    return lambda i: one_step(*next(slow), ONE)


runs["py_function_input"] = (py_function_input, 3, 2)
MADE_LATE = {"py_function_input"}
made["py_function_input"] = (
    "one_step's model; the pipeline maps tf.py_function (a 3x3 blur and noise, a Python loop "
    "over each image's pixels) over every example, then batches and prefetches 2 batches"
)

# Token sequences of 8 to 200 tokens, sorted by length to waste less padding, padded per batch.
rng = np.random.default_rng(0)
lengths = np.sort(rng.integers(8, 201, size=1024))
tokens = rng.integers(1, 1000, size=(len(lengths), lengths[-1])).astype("int32")
labels = rng.integers(0, 10, size=len(lengths))
texts = tf.data.Dataset.from_tensor_slices((tokens, lengths, labels)).repeat()
texts = texts.map(lambda sequence, length, label: (sequence[:length], label))
texts = batches(texts.padded_batch(BATCH, drop_remainder=True))
with strategy.scope():
    text_model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(1000, 32),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(10),
        ]
    )
    text_optimizer = loops.build_optimizer(strategy, keras.optimizers.SGD(0.01), text_model)
text_step = one_step_function(text_model, text_optimizer, BATCH)
runs["shape_retracing"] = (lambda i: text_step(*next(texts), ONE), 2, 0)
made["shape_retracing"] = (
    f"Embedding 32 + average + Dense 10 on token sequences of 8 to 200 tokens sorted by length, "
    f"padded_batch({BATCH}): each batch padded to its own longest sequence"
)

# Every function is called once before it is profiled: a first trace is not a problem.
one_step(*next(fast), ONE)
many_steps(fast, STEPS_PER_CALL)
busy_step(*next(busy), ONE)
tiny_step(*next(tiny), ONE)
tiny_steps(tiny, TINY_STEPS_PER_CALL)
text_step(*next(texts), ONE)

recorded = {
    "steps_per_call": STEPS_PER_CALL,
    "tiny_steps_per_call": TINY_STEPS_PER_CALL,
    "replicas": strategy.num_replicas_in_sync,
    "tensorflow": tf.__version__,
}
with tempfile.TemporaryDirectory() as logdir, profiling.retracing_warning_hidden():
    for name, (call, calls, warmup) in runs.items():
        call = call() if name in MADE_LATE else call
        path, extracted = profiling.profile_calls(
            os.path.join(logdir, name), call, calls, warmup=warmup
        )
        recorded[name] = {
            "made": made[name],
            "calls": calls,
            "xplane_bytes": os.path.getsize(path),
            **extracted,
        }
        summary = profiling.summarize(extracted)
        print(f"{name}: {summary}\n    {profiling.diagnose(summary)}")
out = os.path.join(os.path.dirname(__file__), "profiles.json")
with open(out, "w") as f:
    json.dump(recorded, f, separators=(",", ":"))
print(f"wrote {out}: {os.path.getsize(out) / 1024:.0f} KiB")
