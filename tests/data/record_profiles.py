"""Re-record ``profiles.json``, the traces the unit tests of ``helpers.profiling`` read.

Run from the repository root: ``python tests/data/record_profiles.py``. It profiles three short
runs on the simulated TPU (8 replicas) with the helpers of notebook 11 and stores what
``profiling.extract`` read from each ``.xplane.pb``, plus how each run was made, so the tests
can check the readers against runs whose planted problem is known.
"""

from __future__ import annotations

import json
import os
import tempfile

from helpers import quiet

quiet.quiet_tensorflow()

import helpers  # noqa: E402
from helpers import data, loops, models, pipelines, profiling  # noqa: E402

strategy = helpers.connect(8)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, STEPS_PER_CALL = 128, 3
images = data.load_images("digits", max_train=512)
x = pipelines.to_photos(images.x_train, 32).astype("float32") / 255.0
# An in-memory, cached pipeline: input is cheap here, so the planted problems are the only ones.
fast = data.make_dataset(x, images.y_train, BATCH, replicas=8)
with strategy.scope():
    model = models.build_classifier(x.shape[1:])
    optimizer = loops.build_optimizer(strategy, keras.optimizers.SGD(0.01), model)
many_steps = loops.make_train_steps(strategy, model, optimizer, BATCH)


@tf.function
def one_step(images, labels, scale):
    def replica(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(y, logits, True))
            loss = loss * scale / BATCH
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    per_replica = strategy.run(replica, args=(images, labels))
    return strategy.reduce("SUM", per_replica, axis=None)


batches = iter(strategy.experimental_distribute_dataset(fast))
one_step(*next(batches), tf.constant(1.0))
many_steps(batches, STEPS_PER_CALL)
runs = {
    "one_step": (lambda i: one_step(*next(batches), tf.constant(1.0)), 3, 2),
    "many_steps": (lambda i: many_steps(batches, STEPS_PER_CALL), 2, 1),
    "retracing": (lambda i: one_step(*next(batches), 1.0 + i / 100), 2, 0),
}
recorded = {"steps_per_call": STEPS_PER_CALL, "replicas": strategy.num_replicas_in_sync}
with tempfile.TemporaryDirectory() as logdir, profiling.retracing_warning_hidden():
    for name, (call, calls, warmup) in runs.items():
        path, extracted = profiling.profile_calls(
            os.path.join(logdir, name), call, calls, warmup=warmup
        )
        recorded[name] = {"calls": calls, "xplane_bytes": os.path.getsize(path), **extracted}
out = os.path.join(os.path.dirname(__file__), "profiles.json")
with open(out, "w") as f:
    json.dump(recorded, f, separators=(",", ":"))
print(f"wrote {out}: {os.path.getsize(out) / 1024:.0f} KiB")
