"""tpucheck.readiness against two corpora: planted problems and setups from public TPU examples.

The planted corpus: planted TPU problems must be caught, clean models must pass.

Every case is tiny (a few hundred examples at most, layers of a few units) and built in this
process; only the cases that need a real multi-replica strategy (a model built outside its scope,
``steps_per_execution`` under MirroredStrategy) run in one fresh process with the simulated
8-core TPU, with the public corpus, while this process checks the others. A planted problem
counts as caught when the report has a warning or an error with the expected code whose
``where`` names the planted place; a clean case raises a false alarm with any warning or error.
``test_corpus_figures`` prints recall and false alarms.

The public corpus (``tests/tpucheck_public_cases.py``, expectations with their sources in
``tests/data/tpucheck/readiness_public_expected.toml``): training setups reproduced from TensorFlow's and
keras-io's TPU and distributed-training examples. Every expected problem must be reported with
its severity and words, every expected note as a note, and nothing else as a warning or an error;
the check must not crash. ``test_public_corpus_figures`` prints the counts.

Both corpora measure the checker, in about 50 s: they run once, on the main stack (marked slow).
Lessons 03_keras_compile_and_fit and 10_tpu_readiness_check run the checker on every stack.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tpucheck import readiness  # noqa: E402

REPLICAS = 8
GLOBAL = 64  # global batch: 8 per replica
_FILES = tempfile.TemporaryDirectory(prefix="readiness-corpus-")  # removed when Python exits


@dataclass(frozen=True)
class Case:
    name: str
    part: str  # pipeline, model, step or strategy
    build: object  # strategy -> keyword arguments of readiness.check
    code: str | None = None  # the finding expected; None for a clean case
    where: str = ""  # a piece of text the finding's `where` must contain
    needs_replicas: bool = False  # run with the real 8-replica strategy (one subprocess)


CASES: list[Case] = []


def planted(part, code, where, needs_replicas=False):
    def register(build):
        CASES.append(Case(build.__name__, part, build, code, where, needs_replicas))
        return build

    return register


def clean(part, needs_replicas=False):
    def register(build):
        CASES.append(Case(build.__name__, part, build, None, "", needs_replicas))
        return build

    return register


# ------------------------------------------------------------------------------ building blocks


def arrays(n=128, shape=(8, 8, 1), classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, classes, n).astype(np.int32)


def batched(ds, batch=GLOBAL):
    return ds.batch(batch, drop_remainder=True).prefetch(2)


def images(batch=GLOBAL, n=128):
    return batched(tf.data.Dataset.from_tensor_slices(arrays(n)), batch)


def flat(batch=GLOBAL, features=16, dtype="float32"):
    x, y = arrays(128, (features,))
    return batched(tf.data.Dataset.from_tensor_slices((x.astype(dtype), y)), batch)


def mlp(*layers, inputs=16, outputs=10, name="mlp"):
    inp = keras.Input((inputs,))
    x = inp
    for layer in layers:
        x = (keras.layers.Dense(layer, activation="relu") if isinstance(layer, int) else layer)(x)
    return keras.Model(inp, keras.layers.Dense(outputs, name="logits")(x), name=name)


def convnet(filters=(32, 64), shape=(8, 8, 1), dropout=0.0, name="convnet"):
    inp = keras.Input(shape)
    x = inp
    for i, f in enumerate(filters):
        x = keras.layers.Conv2D(f, 3, padding="same", activation="relu", name=f"conv{i}")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    if dropout:
        x = keras.layers.Dropout(dropout, seed=42)(x)
    return keras.Model(inp, keras.layers.Dense(10, name="logits")(x), name=name)


def built_adam(model):
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    return optimizer


def train_step(model, optimizer, extra=None):
    """A correct per-replica step (loss averaged over the global batch); ``extra`` adds a habit."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        if extra is not None:
            x = extra(x, y)
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return replica_step


def step_case(extra):
    model = mlp(128)
    return {"dataset": flat(), "model": model, "step": train_step(model, built_adam(model), extra)}


def in_layer(fn, name):
    """A model whose first layer applies ``fn`` (a habit planted inside a layer)."""

    class Planted(keras.layers.Layer):
        def call(self, x):
            return fn(x)

    return {"dataset": flat(), "model": mlp(Planted(name=name), 128)}


def slow_decode(x):  # plain Python on the host
    return x * 2.0


# ------------------------------------------------------------------------------ pipeline


@planted("pipeline", "dynamic-batch", "dimension 0")
def batch_keeps_remainder(strategy):
    x, y = arrays(100)
    return {"dataset": tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL).prefetch(2)}


@planted("pipeline", "dynamic-shape", "element")
def padded_to_each_batch(strategy):
    ds = tf.data.Dataset.range(64).map(lambda i: tf.ones([i % 5 + 1]))
    return {"dataset": ds.padded_batch(GLOBAL, drop_remainder=True).prefetch(2)}


@planted("pipeline", "dynamic-shape", "rank")
def unknown_rank(strategy):
    ds = tf.data.Dataset.range(64).map(lambda i: tf.zeros(tf.fill([i % 2 + 1], 2)))
    return {"dataset": ds.prefetch(2)}


@planted("pipeline", "ragged-input", "element")
def ragged_tokens(strategy):
    ds = tf.data.Dataset.range(64).map(lambda i: tf.range(i % 7))
    return {"dataset": ds.ragged_batch(GLOBAL, drop_remainder=True).prefetch(2)}


@planted("pipeline", "sparse-input", "element")
def sparse_features(strategy):
    sparse = tf.sparse.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [GLOBAL, 3])
    return {"dataset": tf.data.Dataset.from_tensors(sparse).prefetch(1)}


@planted("pipeline", "host-dtype", "['file']")
def file_names_in_element(strategy):
    x, y = arrays()
    names = np.array([f"img_{i}.png" for i in range(len(x))])
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(({"x": x, "file": names}, y)))}


@planted("pipeline", "host-dtype", "complex128")
def complex_spectrum(strategy):
    return {"dataset": tf.data.Dataset.from_tensors(tf.zeros([GLOBAL, 4], tf.complex128))}


@planted("pipeline", "float64", "['pixels']")
def pixels_divided_by_255(strategy):
    x, y = arrays()
    ds = tf.data.Dataset.from_tensor_slices(({"pixels": x.astype(np.float64) / 255.0}, y))
    return {"dataset": batched(ds)}


@planted("pipeline", "uneven-split", "batch dimension")
def round_batch_of_100(strategy):
    return {"dataset": images(batch=100, n=200)}


@planted("pipeline", "batch-tiles", "global batch 96")
def twelve_per_replica(strategy):
    return {"dataset": images(batch=96, n=200)}


@planted("pipeline", "python-in-pipeline", "slow_decode")
def py_function_in_map_with_shapes_restored(strategy):
    x, y = arrays(128, (16,))

    def parse(a, b):
        a = tf.py_function(slow_decode, [a], tf.float32)
        return tf.ensure_shape(a, [16]), b

    return {"dataset": batched(tf.data.Dataset.from_tensor_slices((x, y)).map(parse))}


@planted("pipeline", "python-in-pipeline", "tf.numpy_function")
def numpy_function_in_parallel_map(strategy):
    x, y = arrays(128, (16,))

    def parse(a, b):
        return tf.ensure_shape(tf.numpy_function(np.sqrt, [a], tf.float32), [16]), b

    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(parse, num_parallel_calls=2)
    return {"dataset": batched(ds)}


@planted("pipeline", "python-in-pipeline", "from_generator")
def python_generator_with_static_shapes(strategy):
    x, y = arrays(128, (16,))
    signature = (tf.TensorSpec([16], tf.float32), tf.TensorSpec([], tf.int32))
    ds = tf.data.Dataset.from_generator(lambda: zip(x, y, strict=True), output_signature=signature)
    return {"dataset": batched(ds)}


@planted("pipeline", "python-in-pipeline", "dataset.filter")
def py_function_in_filter(strategy):
    x, y = arrays(128, (16,))
    keep = lambda a, b: tf.py_function(lambda v: v >= 0, [b], tf.bool)  # noqa: E731
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices((x, y)).filter(keep))}


@planted("pipeline", "python-in-pipeline", "dataset.flat_map")
def py_function_inside_flat_map(strategy):
    x, y = arrays(128, (16,))

    def expand(a, b):
        a = tf.ensure_shape(tf.py_function(slow_decode, [a], tf.float32), [16])
        return tf.data.Dataset.from_tensors((a, b)).repeat(2)

    return {"dataset": batched(tf.data.Dataset.from_tensor_slices((x, y)).flat_map(expand))}


@planted("pipeline", "constant-seed", "dataset.map")
def augmentation_with_a_constant_seed(strategy):
    def augment(a, b):
        return tf.image.stateless_random_flip_left_right(a, seed=(1, 2)), b

    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(arrays()).map(augment))}


@planted("pipeline", "constant-seed", "stateless_dropout")
def keras_dropout_with_an_int_seed_in_map(strategy):
    drop = lambda a, b: (keras.random.dropout(a, 0.1, seed=7), b)  # noqa: E731
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(arrays())).map(drop)}


@planted("pipeline", "batch-tiles", "dataset_fn")
def dataset_fn_with_12_per_replica(strategy):
    context = tf.distribute.InputContext(2, 0, REPLICAS)
    ds = tf.data.Dataset.from_tensor_slices(arrays(200)).shard(2, 0)
    return {"dataset": batched(ds, 12), "input_context": context}


# ------------------------------------------------------------------------------ model


@planted("model", "float64", "model 'mlp'")
def float64_weights(strategy):
    inp = keras.Input((16,), dtype="float64")
    out = keras.layers.Dense(10, dtype="float64")(keras.layers.Dense(128, dtype="float64")(inp))
    return {"dataset": flat(dtype="float64"), "model": keras.Model(inp, out, name="mlp")}


@planted("model", "float16-policy", "model 'mlp'")
def float16_policy(strategy):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        return {"dataset": flat(), "model": mlp(128)}
    finally:
        keras.mixed_precision.set_global_policy("float32")


@planted("model", "float16-policy", "half")
def float16_on_one_layer(strategy):
    return {
        "dataset": flat(),
        "model": mlp(keras.layers.Dense(128, dtype="mixed_float16", name="half")),
    }


@planted("model", "layer-tiles", "layer 'wide'")
def hidden_width_just_past_a_tile(strategy):
    return {"dataset": flat(), "model": mlp(keras.layers.Dense(130, name="wide"), 256)}


@planted("model", "layer-tiles", "layer 'conv0'")
def conv_filters_just_past_a_tile(strategy):
    return {"dataset": images(), "model": convnet(filters=(136,))}


@planted("model", "python-in-step", "PyFunc")
def numpy_layer(strategy):
    fn = lambda x: tf.ensure_shape(tf.numpy_function(np.tanh, [x], tf.float32), x.shape)  # noqa: E731
    return in_layer(fn, "numpy_tanh")


@planted("model", "python-in-step", "EagerPyFunc")
def py_function_layer(strategy):
    fn = lambda x: tf.ensure_shape(tf.py_function(slow_decode, [x], tf.float32), x.shape)  # noqa: E731
    return in_layer(fn, "py_layer")


@planted("model", "xla-unsupported-op", "ImageProjectiveTransform")
def random_rotation_inside_the_model(strategy):
    inp = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(keras.layers.RandomRotation(0.1, seed=0)(inp))
    return {"dataset": images(), "model": keras.Model(inp, keras.layers.Dense(10)(x))}


@planted("model", "python-side-effect", "model 'mlp'")
def print_inside_a_layer(strategy):
    def fn(x):
        print("chatty layer sees", x.shape)
        return x

    return in_layer(fn, "chatty")


@planted("model", "dynamic-shape-op", "Unique")
def unique_inside_a_layer(strategy):
    def fn(x):
        distinct, _ = tf.unique(tf.reshape(tf.cast(x > 0.5, tf.int32), [-1]))
        return x + tf.cast(tf.size(distinct), tf.float32)

    return in_layer(fn, "uniq")


@planted("model", "xla-unsupported-op", "AsString")
def string_op_inside_a_layer(strategy):
    return in_layer(lambda x: x + tf.cast(tf.strings.length(tf.strings.as_string(x)), x.dtype), "s")


@planted("model", "constant-seed", "noisy")
def dropout_with_an_int_seed_in_a_layer(strategy):
    return in_layer(lambda x: keras.random.dropout(x, 0.2, seed=3), "noisy")


# ------------------------------------------------------------------------------ step


@planted("step", "step-not-traceable", "test_tpucheck_readiness_corpus.py")
def numpy_call_in_step(strategy):
    return step_case(lambda x, y: x * float(x.numpy().mean()))


@planted("step", "python-side-effect", "replica_step")
def print_in_step(strategy):
    return step_case(lambda x, y: print("step!") or x)


LOSSES: list = []


@planted("step", "python-side-effect", "keep_losses")
def list_append_in_step(strategy):
    def keep_losses(x, y):
        loss = tf.reduce_mean(x)
        LOSSES.append(loss)
        return loss

    return {"dataset": flat(), "step": keep_losses}


@planted("step", "frozen-random", "lambda")
def numpy_random_in_step(strategy):
    return {**step_case(None), "step": lambda x, y: tf.reduce_mean(x) * np.random.uniform()}


@planted("step", "frozen-random", "step")
def python_random_and_clock_in_step(strategy):
    def step(x, y):
        return tf.reduce_mean(x) * random.random() + time.time()

    return {"dataset": flat(), "step": step}


@planted("step", "constant-seed", "stateless_random_uniform")
def stateless_noise_with_a_constant_seed(strategy):
    noise = lambda x, y: x + tf.random.stateless_uniform(tf.shape(x), seed=[1, 2])  # noqa: E731
    return step_case(noise)


@planted("step", "constant-seed", "stateless_random_flip")
def stateless_flip_with_a_constant_seed(strategy):
    def step(x, y):
        return tf.reduce_mean(tf.image.stateless_random_flip_up_down(x, seed=(0, 1)))

    return {"dataset": images(), "step": step}


@planted("step", "print-in-step", "PrintV2")
def tf_print_in_step(strategy):
    def log_mean(x, y):
        tf.print("mean", tf.reduce_mean(x))
        return x

    return step_case(log_mean)


@planted("step", "python-in-step", "EagerPyFunc")
def py_function_in_step(strategy):
    def step(x, y):
        return tf.reduce_mean(tf.py_function(slow_decode, [x], tf.float32))

    return {"dataset": flat(), "step": step}


@planted("step", "xla-compile-failed", "DenseBincount")
def bincount_in_step(strategy):
    def step(x, y):
        return tf.math.bincount(y, minlength=10, maxlength=10)

    return {"dataset": flat(), "step": step}


@planted("step", "dynamic-shape-op", "Where")
def boolean_mask_in_step(strategy):
    return {"dataset": flat(), "step": lambda x, y: tf.reduce_sum(tf.boolean_mask(x, x > 0.5))}


@planted("step", "xla-compile-failed", "Fill")
def size_from_values_in_step(strategy):
    return {"dataset": flat(), "step": lambda x, y: tf.zeros([tf.reduce_sum(y)])}


@planted("step", "float64", "step")
def float64_math_in_step(strategy):
    return {"dataset": flat(), "step": lambda x, y: tf.reduce_mean(tf.cast(x, tf.float64) * 2.0)}


@planted("step", "xla-unsupported-op", "histogram")
def histogram_in_step(strategy):
    def step(x, y):
        return tf.histogram_fixed_width(x, [0.0, 1.0], nbins=4)

    return {"dataset": flat(), "step": step}


STEPS_SEEN = 0


@planted("step", "python-side-effect", "count_steps")
def python_counter_in_step(strategy):
    def count_steps(x, y):
        global STEPS_SEEN
        STEPS_SEEN += 1
        return tf.reduce_mean(x)

    return {"dataset": flat(), "step": count_steps}


@planted("step", "frozen-random", "lambda")
def numpy_generator_in_step(strategy):
    rng = np.random.default_rng(0)
    return {"dataset": flat(), "step": lambda x, y: tf.reduce_mean(x) * rng.normal()}


# ------------------------------------------------------------------------------ strategy


@planted("strategy", "optimizer-not-built", "optimizer")
def adam_not_built_before_8_replicas(strategy):
    model = mlp(128)
    return {"dataset": flat(), "model": model, "step": train_step(model, keras.optimizers.Adam())}


class Trainer:
    """A trainer holding its model and optimizer as attributes, its step a method."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def step(self, x, y):
        return train_step(self.model, self.optimizer)(x, y)


@planted("strategy", "optimizer-not-built", "optimizer Adam", needs_replicas=True)
def trainer_attribute_adam_in_scope_not_built(strategy):
    with strategy.scope():
        model = mlp(128)
        trainer = Trainer(model, keras.optimizers.Adam())
    return {"dataset": flat(), "model": model, "step": trainer.step, "strategy": strategy}


@clean("strategy", needs_replicas=True)
def trainer_attribute_adam_built_in_scope(strategy):
    with strategy.scope():
        model = mlp(128)
        trainer = Trainer(model, built_adam(model))
    return {"dataset": flat(), "model": model, "step": trainer.step, "strategy": strategy}


@planted("step", "variable-in-step", "metric Mean")
def metric_made_inside_the_step(strategy):
    def step(x, y):
        mean = keras.metrics.Mean()
        mean.update_state(x)
        return mean.result()

    return {"dataset": flat(), "step": step}


@planted("pipeline", "uneven-split", "zip(batch(1), batch(1))")
def zipped_pairs_batched_by_one(strategy):
    x, _ = arrays(32)
    one = tf.data.Dataset.from_tensor_slices(x).batch(1)
    return {"dataset": tf.data.Dataset.zip((one, one)).prefetch(2)}


@planted("pipeline", "dynamic-batch", "flat_map(slice_batch_indices)")
def keras_fit_on_arrays_with_a_partial_batch(strategy):
    from tpucheck_public_cases import keras_fit_dataset

    x, y = arrays(100, (16,))
    return {"dataset": keras_fit_dataset(x, y, GLOBAL), "model": mlp(128)}


@planted("model", "layer-tiles", "layer 'wide'")
def unbuilt_model_of_built_models(strategy):
    class Pair(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = mlp(keras.layers.Dense(130, name="wide"), 256, name="encoder")
            self.head = keras.Sequential([keras.Input((10,)), keras.layers.Dense(10)])

        def call(self, x):
            return self.head(self.encoder(x))

    return {"dataset": flat(), "model": Pair()}


@planted("strategy", "model-outside-scope", "model 'mlp'", needs_replicas=True)
def model_built_outside_the_scope(strategy):
    return {"dataset": flat(), "model": mlp(128), "strategy": strategy}


@clean("strategy", needs_replicas=True)  # on the simulated TPU: a note, the TPU's value stays
def steps_per_execution_for_the_tpu_on_the_simulated_tpu(strategy):
    with strategy.scope():
        model = mlp(128)
        model.compile("adam", "mse", steps_per_execution=8)
    return {"dataset": flat(), "model": model, "strategy": strategy, "compile_step": False}


@planted("strategy", "uneven-split", "batch dimension")
def global_batch_for_a_v5e_1(strategy):
    return {"dataset": images(batch=60, n=120), "model": convnet()}


# ------------------------------------------------------------------------------ clean cases


@clean("model")
def small_convnet_32_64_with_dropout(strategy):
    return {"dataset": images(), "model": convnet(dropout=0.5)}


@clean("model")
def residual_block_with_batch_norm(strategy):
    inp = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(128, 3, padding="same")(inp)
    y = keras.layers.BatchNormalization()(keras.layers.Conv2D(128, 3, padding="same")(x))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(keras.layers.Add()([x, y])))
    return {"dataset": images(), "model": keras.Model(inp, keras.layers.Dense(10)(x))}


def tokens(length=16, vocab=500, n=128):
    rng = np.random.default_rng(1)
    return rng.integers(1, vocab, (n, length)).astype(np.int32), rng.integers(0, 2, n)


@clean("model")
def text_classifier_with_embedding(strategy):
    inp = keras.Input((16,), dtype="int32")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(500, 64)(inp))
    x = keras.layers.Dense(128, activation="relu")(x)
    model = keras.Model(inp, keras.layers.Dense(2)(x))
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(tokens())), "model": model}


@clean("model")
def text_classifier_with_lstm(strategy):
    inp = keras.Input((16,), dtype="int32")
    x = keras.layers.LSTM(32)(keras.layers.Embedding(500, 32)(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(x))
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(tokens())), "model": model}


@clean("model")
def conv1d_text_classifier(strategy):
    inp = keras.Input((16,), dtype="int32")
    x = keras.layers.Conv1D(64, 3, activation="relu")(keras.layers.Embedding(500, 32)(inp))
    x = keras.layers.GlobalMaxPooling1D()(x)
    model = keras.Model(inp, keras.layers.Dense(2)(x))
    return {"dataset": batched(tf.data.Dataset.from_tensor_slices(tokens())), "model": model}


@clean("model")
def tabular_model_with_dict_inputs(strategy):
    rng = np.random.default_rng(2)
    features = {
        "age": rng.random((128, 1), dtype=np.float32),
        "income": rng.random((128, 1), dtype=np.float32),
        "city": rng.integers(0, 20, (128, 1)).astype(np.int32),
    }
    inputs = {
        "age": keras.Input((1,), name="age"),
        "income": keras.Input((1,), name="income"),
        "city": keras.Input((1,), name="city", dtype="int32"),
    }
    city = keras.layers.Flatten()(keras.layers.Embedding(20, 8)(inputs["city"]))
    x = keras.layers.Concatenate()([inputs["age"], inputs["income"], city])
    x = keras.layers.Dropout(0.1)(keras.layers.Dense(128, activation="relu")(x))
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    labels = rng.random((128, 1), dtype=np.float32)
    return {
        "dataset": batched(tf.data.Dataset.from_tensor_slices((features, labels))),
        "model": model,
    }


@clean("model")
def mixed_bfloat16_mlp(strategy):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = mlp(256, 128)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return {"dataset": flat(), "model": model}


@clean("model")
def regression_model_with_two_outputs(strategy):
    inp = keras.Input((16,))
    x = keras.layers.Dense(128, activation="relu")(inp)
    model = keras.Model(inp, {"mean": keras.layers.Dense(1)(x), "scale": keras.layers.Dense(1)(x)})
    return {"dataset": flat(), "model": model}


@clean("pipeline")
def vectorised_augmentation_and_keras_random_layers_in_map(strategy):
    flip = keras.layers.RandomFlip("horizontal", seed=0)

    def augment(x, y):
        x = tf.image.random_brightness(x, 0.1)  # a stateful op: new numbers every batch
        return flip(x, training=True), y

    ds = tf.data.Dataset.from_tensor_slices(arrays()).cache().shuffle(128, seed=0).repeat()
    ds = ds.batch(GLOBAL, drop_remainder=True).map(augment, num_parallel_calls=2)
    return {"dataset": ds.prefetch(tf.data.AUTOTUNE), "model": convnet(filters=(128,))}


@clean("pipeline")
def tfrecord_pipeline(strategy):
    path = str(Path(_FILES.name) / "data.tfrecord")
    x, y = arrays(64, (16,))
    with tf.io.TFRecordWriter(path) as writer:
        for a, b in zip(x, y, strict=True):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=a)),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[b])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    spec = {"x": tf.io.FixedLenFeature([16], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        return parsed["x"], tf.cast(parsed["y"], tf.int32)

    ds = tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return {"dataset": batched(ds), "model": mlp(128)}


@clean("pipeline")
def dataset_fn_per_replica_batches(strategy):
    context = tf.distribute.InputContext(2, 1, REPLICAS)
    ds = tf.data.Dataset.from_tensor_slices(arrays(256)).shard(2, 1).repeat()
    batch = context.get_per_replica_batch_size(128)
    return {
        "dataset": batched(ds, batch),
        "model": convnet(filters=(128,)),
        "input_context": context,
    }


@clean("step")
def custom_step_with_loss_scaling_and_step_seeded_noise(strategy):
    model = mlp(128)
    optimizer = built_adam(model)

    def noise(x, y):
        seed = tf.stack([tf.constant(7, tf.int64), tf.cast(optimizer.iterations, tf.int64)])
        return x + 0.01 * tf.random.stateless_normal(tf.shape(x), seed)

    return {"dataset": flat(), "model": model, "step": train_step(model, optimizer, noise)}


@clean("step")
def custom_step_with_regularisation_and_a_generator(strategy):
    inp = keras.Input((16,))
    hidden = keras.layers.Dense(128, activation="relu", kernel_regularizer="l2")(inp)
    model = keras.Model(inp, keras.layers.Dense(10)(hidden))
    optimizer = built_adam(model)
    generator = tf.random.Generator.from_seed(1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        x = x + 0.01 * generator.normal(tf.shape(x))
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_fn(y, model(x, training=True)), global_batch_size=GLOBAL
            )
            loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return {"dataset": flat(), "model": model, "step": replica_step}


@clean("step")
def mixed_bfloat16_custom_step(strategy):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = mlp(128)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return {"dataset": flat(), "model": model, "step": train_step(model, built_adam(model))}


@clean("strategy", needs_replicas=True)
def classifier_built_in_scope_on_8_replicas(strategy):
    with strategy.scope():
        model = convnet(dropout=0.2)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return {"dataset": images(), "model": model, "strategy": strategy}


@clean("strategy", needs_replicas=True)
def steps_per_execution_with_reduction_to_one_device(strategy):
    devices = strategy.extended.worker_devices
    one = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    with one.scope():
        model = mlp(128)
        model.compile("adam", "mse", steps_per_execution=8)
    return {"dataset": flat(), "model": model, "strategy": one, "compile_step": False}


# ------------------------------------------------------------------------------ running


def outcome(case: Case, strategy=None) -> dict:
    """Run one case; what the check found, whether it counts, and how long it took."""
    start = time.perf_counter()
    kwargs = case.build(strategy)
    if "strategy" not in kwargs and "input_context" not in kwargs:
        kwargs["replicas"] = REPLICAS
    report = readiness.check(**kwargs)
    problems = [(f.code, f.severity, f.where) for f in report.problems]
    errors = {f.code: f.why for f in report.problems if f.severity == "error"}
    if case.code is None:
        ok = not problems
    else:
        ok = any(code == case.code and case.where in where for code, _, where in problems)
    seconds = round(time.perf_counter() - start, 2)
    from tpucheck_public_cases import traced_steps  # tests/, on the path as conftest is

    traced = traced_steps(report)
    return {"ok": ok, "problems": problems, "errors": errors, "seconds": seconds, **traced}


# The planted cases that need the simulated 8-core TPU and the public corpus, in one fresh
# process: one TensorFlow start-up for both.
EIGHT_REPLICAS = f"""
import json, sys
import train_tpu
strategy = train_tpu.connect({REPLICAS})
sys.path.insert(0, {str(Path(__file__).parent)!r})
import test_tpucheck_readiness_corpus as corpus
import tpucheck_public_cases as public
results = {{c.name: corpus.outcome(c, strategy) for c in corpus.CASES if c.needs_replicas}}
print("RESULTS" + json.dumps(results))
print("PUBLIC" + json.dumps(public.score_all(strategy)))
"""


@pytest.fixture(scope="module")
def both_corpora() -> tuple[dict, dict]:
    """(planted results, public results): the child runs while this process checks the planted
    cases that need no real replicas."""
    from concurrent.futures import ThreadPoolExecutor

    from conftest import _run_python

    with ThreadPoolExecutor(1) as pool:
        child = pool.submit(_run_python, EIGHT_REPLICAS, timeout=900)
        found = {c.name: outcome(c) for c in CASES if not c.needs_replicas}
        out = child.result().stdout
    planted, public = out.split("RESULTS", 1)[1].split("PUBLIC", 1)
    return {**found, **json.loads(planted)}, json.loads(public)


@pytest.fixture(scope="module")
def results(both_corpora):
    return both_corpora[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, results):
    result = results[case.name]
    if case.code is None:
        assert result["ok"], f"false alarm: {result['problems']}"
    else:
        assert result["ok"], f"missed {case.code} at {case.where!r}; found {result['problems']}"


# What an error's text must cite: TensorFlow's source, docs or issues, or Google's TPU guides.
SOURCES = ("tensorflow/", "tensorflow's", "guide", "tutorial", "#")


def test_every_error_cites_a_source_that_it_fails_on_a_tpu(results):
    errors = {code: why for r in results.values() for code, why in r["errors"].items()}
    assert {"model-outside-scope", "xla-unsupported-op", "host-dtype"} <= set(errors)
    for code, why in errors.items():
        assert any(source in why.lower() for source in SOURCES), (code, why)


def test_corpus_figures(results, capsys):
    planted_cases = [c for c in CASES if c.code is not None]
    clean_cases = [c for c in CASES if c.code is None]
    caught = sum(results[c.name]["ok"] for c in planted_cases)
    alarms = sum(not results[c.name]["ok"] for c in clean_cases)
    parts = sorted({c.part for c in planted_cases})
    by_part = {p: sum(c.part == p for c in planted_cases) for p in parts}
    seconds = sum(r["seconds"] for r in results.values())
    with capsys.disabled():
        print(
            f"\nreadiness corpus: recall {caught}/{len(planted_cases)} planted problems caught "
            f"({caught / len(planted_cases):.0%}; by part {by_part}), false alarms "
            f"{alarms}/{len(clean_cases)} clean cases; checks took {seconds:.1f} s"
        )
    assert len(planted_cases) >= 40 and len(clean_cases) >= 12
    assert set(by_part) == {"pipeline", "model", "step", "strategy"}
    assert caught == len(planted_cases) and alarms == 0


# ------------------------------------------------------------------------------ public corpus

PUBLIC_EXPECTED = Path(__file__).parent / "data" / "tpucheck" / "readiness_public_expected.toml"
with open(PUBLIC_EXPECTED, "rb") as _file:
    PUBLIC_CASES = tomllib.load(_file)["case"]


@pytest.fixture(scope="module")
def public_results(both_corpora):
    return both_corpora[1]


def test_public_expectations_name_their_sources():
    import tpucheck_public_cases as public

    assert len(PUBLIC_CASES) >= 10 and set(public.BUILDERS) == {c["name"] for c in PUBLIC_CASES}
    for case in PUBLIC_CASES:
        assert case["source"] and len(case["commit"]) == 40 and case["setup"] and case["changes"]
        for item in case.get("expect", []) + case.get("note", []):
            assert item["backed_by"], (case["name"], item["code"])


@pytest.mark.parametrize("case", PUBLIC_CASES, ids=[c["name"] for c in PUBLIC_CASES])
def test_public_case(case, public_results):
    result = public_results[case["name"]]
    assert result["crash"] is None, result["crash"]
    assert not result["missed"], f"missed {result['missed']}; found {result['findings']}"
    assert not result["false_alarms"], f"false alarms {result['false_alarms']}"
    assert not result["notes_missed"], f"notes missing {result['notes_missed']}"


def test_public_corpus_figures(public_results, capsys):
    totals = {"expected": sum(len(c.get("expect", [])) for c in PUBLIC_CASES)}
    for key in ("caught", "false_alarms"):
        totals[key] = sum(len(r.get(key, [])) for r in public_results.values())
    totals["crashes"] = sum(r["crash"] is not None for r in public_results.values())
    line = (
        "{caught}/{expected} expected problems caught with their severity and words, "
        "{false_alarms} false alarms, {crashes} crashes".format(**totals)
    )
    with capsys.disabled():
        seconds = sum(r["seconds"] for r in public_results.values())
        print(f"\npublic corpus: {len(PUBLIC_CASES)} setups, {line}; checks took {seconds:.1f} s")
    assert totals["caught"] == totals["expected"] and not totals["false_alarms"]
    assert not totals["crashes"]


# Words of a trace that failed while creating variables: never to be called an untraceable step.
CREATION_WORDS = ("strategy.scope", "need to be inside", "tf.variable", "singleton", "slot")


def test_no_trace_failed_by_variable_creation_is_called_untraceable(results, public_results):
    both = list(results.values()) + list(public_results.values())
    traced = [r for r in both if r.get("traced")]
    assert len(traced) >= 30, len(traced)  # every traced step of both corpora
    for result in traced:
        for why in result["untraceable"]:
            assert not any(word in why.lower() for word in CREATION_WORDS), why
