"""Training setups reproduced from public TPU and distributed-training examples, for the readiness check.

Each builder reproduces one setup of ``tests/data/readiness_public_expected.toml`` (source,
commit and every change from the original are listed there): the pipeline, the model and the
compile call or step as the example writes them, in this project's own code, with downloads
replaced by small random data of the same shapes. A builder takes the 8-replica strategy and
returns the keyword arguments of ``readiness.check``. ``tests/test_readiness_corpus.py`` runs them
in one process with the simulated TPU and compares the reports with the expectations.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from helpers import readiness

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

EXPECTED = Path(__file__).parent / "data" / "readiness_public_expected.toml"
_FILES = tempfile.TemporaryDirectory(prefix="readiness-public-")  # removed when Python exits
BUILDERS: dict = {}


def case(build):
    BUILDERS[build.__name__] = build
    return build


def _digits(n, shape=(28, 28, 1), classes=10, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    return images, rng.integers(0, classes, n).astype(np.int64)


def _jpeg(rng, height, width):
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


# ------------------------------------------------------------------ tensorflow/docs guide/tpu.ipynb


def _tpu_guide_dataset(batch_size, training=True):
    images, labels = _digits(1000)

    def scale(image, label):  # the guide's normalisation, cast then divide
        image = tf.cast(image, tf.float32)
        image /= 255.0
        return image, label

    ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(scale)
    if training:
        ds = ds.shuffle(10000).repeat()
    return ds.batch(batch_size)


def _tpu_guide_model():
    l2 = keras.regularizers.L2(1e-5)
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(256, 3, activation="relu", kernel_regularizer=l2),
            keras.layers.Conv2D(256, 3, activation="relu", kernel_regularizer=l2),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu", kernel_regularizer=l2),
            keras.layers.Dense(128, activation="relu", kernel_regularizer=l2),
            keras.layers.Dense(10, kernel_regularizer=l2),
        ]
    )


@case
def tpu_guide_fit(strategy):
    with strategy.scope():
        model = _tpu_guide_model()
        model.compile(
            optimizer="adam",
            steps_per_execution=50,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["sparse_categorical_accuracy"],
        )
    return {"dataset": _tpu_guide_dataset(200), "model": model, "strategy": strategy}


def tpu_guide_step(model, optimizer, strategy=None, metrics=()):
    """The guide's step_fn(inputs): unpacks the batch, averages over the global batch, no return."""

    def step_fn(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example_loss = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example_loss)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(list(zip(grads, model.trainable_variables, strict=True)))
        if metrics:  # training_loss and training_accuracy, as the guide updates them
            metrics[0].update_state(loss * strategy.num_replicas_in_sync)
            metrics[1].update_state(labels, logits)

    return step_fn


@case
def tpu_guide_custom_loop(strategy):
    with strategy.scope():
        model = _tpu_guide_model()
        optimizer = keras.optimizers.Adam()
        training_loss = keras.metrics.Mean("training_loss", dtype="float32")
        training_accuracy = keras.metrics.SparseCategoricalAccuracy("training_accuracy")
    per_replica_batch_size = 200 // strategy.num_replicas_in_sync
    context = tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)

    step_fn = tpu_guide_step(model, optimizer, strategy, (training_loss, training_accuracy))

    return {
        "dataset": _tpu_guide_dataset(per_replica_batch_size),
        "model": model,
        "step": step_fn,
        "strategy": strategy,
        "input_context": context,
    }


# ------------------------------------------ tensorflow/docs tutorials/distribute/custom_training


@case
def custom_training_tutorial(strategy):
    images, labels = _digits(1120)  # 2 x 512 + 96: the original's last batch
    images = images / np.float32(255)
    global_batch = 64 * strategy.num_replicas_in_sync
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(len(images))
        .batch(global_batch)
    )
    l2 = keras.regularizers.L2(1e-5)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Conv2D(32, 3, activation="relu", kernel_regularizer=l2),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(64, 3, activation="relu", kernel_regularizer=l2),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dense(64, activation="relu", kernel_regularizer=l2),
                keras.layers.Dense(10, kernel_regularizer=l2),
            ]
        )
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        optimizer = keras.optimizers.Adam(learning_rate=0.001)

    def compute_loss(labels, predictions, model_losses):
        loss = tf.nn.compute_average_loss(loss_object(labels, predictions))
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        train_accuracy.update_state(labels, predictions)
        return loss

    return {"dataset": dataset, "model": model, "step": train_step, "strategy": strategy}


# ----------------------------------------------------- tensorflow/docs tutorials/distribute/keras


@case
def distributed_keras_tutorial(strategy):
    images, labels = _digits(1120)

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        image /= 255
        return image, label

    batch = 64 * strategy.num_replicas_in_sync
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.map(scale).cache().shuffle(10000).batch(batch)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=keras.optimizers.Adam(learning_rate=0.001),
            metrics=["accuracy"],
        )
    return {"dataset": ds, "model": model, "strategy": strategy}


# ------------------------------------------------ tensorflow/docs guide/migrate/tpu_estimator


def _migrate_model(strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.Adagrad(learning_rate=0.05)
        model.compile(optimizer, "mse", steps_per_execution=10)
    return model


@case
def migrate_tpu_estimator_fit(strategy):
    features, labels = [[1.0, 1.5]], [[0.3]]
    dataset = (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shuffle(10)
        .repeat()
        .batch(8, drop_remainder=True)
        .prefetch(2)
    )
    return {"dataset": dataset, "model": _migrate_model(strategy), "strategy": strategy}


@case
def migrate_tpu_estimator_evaluate(strategy):
    eval_features, eval_labels = [[4.0, 4.5]], [[0.8]]
    eval_dataset = tf.data.Dataset.from_tensor_slices((eval_features, eval_labels)).batch(
        1, drop_remainder=True
    )
    return {"dataset": eval_dataset, "model": _migrate_model(strategy), "strategy": strategy}


# ------------------------------------------------------ tensorflow/docs guide/distributed_training


def _one_unit_model():
    return keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(1e-4))]
    )


@case
def distributed_training_guide_fit(strategy):
    with strategy.scope():
        model = _one_unit_model()
        model.compile(loss="mse", optimizer="sgd")
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
    return {"dataset": dataset, "model": model, "strategy": strategy}


@case
def distributed_training_guide_custom_loop(strategy):
    global_batch_size = 5 * strategy.num_replicas_in_sync
    with strategy.scope():
        model = _one_unit_model()
        optimizer = keras.optimizers.SGD()
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(1000).batch(global_batch_size)
    loss_object = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    def train_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions))
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    return {"dataset": dataset, "model": model, "step": train_step, "strategy": strategy}


# ------------------------------------------ keras-io examples/vision/xray_classification_with_tpus


@case
def keras_io_xray_tpu(strategy):
    rng = np.random.default_rng(3)
    root = Path(_FILES.name) / "chest_xray"
    names = []
    for i in range(24):
        folder = root / ("PNEUMONIA" if i % 3 else "NORMAL")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"scan_{i}.jpeg"
        path.write_bytes(_jpeg(rng, 40 + i, 52))
        names.append(str(path))
    image_size = [180, 180]
    batch_size = 16 * strategy.num_replicas_in_sync

    def process_path(file_path):
        label = tf.strings.split(file_path, "/")[-2] == "PNEUMONIA"
        img = tf.image.decode_jpeg(tf.io.read_file(file_path), channels=3)
        img = tf.image.convert_image_dtype(img, tf.float32)
        return tf.image.resize(img, image_size), label

    ds = tf.data.Dataset.from_tensor_slices(names).map(process_path, num_parallel_calls=2)
    ds = ds.cache().shuffle(buffer_size=1000).repeat().batch(batch_size).prefetch(tf.data.AUTOTUNE)

    def conv_block(filters):
        return keras.Sequential(
            [
                keras.layers.SeparableConv2D(filters, 3, activation="relu", padding="same"),
                keras.layers.SeparableConv2D(filters, 3, activation="relu", padding="same"),
                keras.layers.BatchNormalization(),
                keras.layers.MaxPool2D(),
            ]
        )

    def dense_block(units, dropout_rate):
        return keras.Sequential(
            [
                keras.layers.Dense(units, activation="relu"),
                keras.layers.BatchNormalization(),
                keras.layers.Dropout(dropout_rate),
            ]
        )

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(*image_size, 3)),
                keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
                keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
                keras.layers.MaxPool2D(),
                conv_block(32),
                conv_block(64),
                conv_block(128),
                keras.layers.Dropout(0.2),
                conv_block(256),
                keras.layers.Dropout(0.2),
                keras.layers.Flatten(),
                dense_block(512, 0.7),
                dense_block(128, 0.5),
                dense_block(64, 0.3),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        metrics = ["accuracy", keras.metrics.Precision(name="precision")]
        metrics.append(keras.metrics.Recall(name="recall"))
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=metrics)
    return {"dataset": ds, "model": model, "strategy": strategy}


# --------------------------------------------------- keras-io examples/keras_recipes/tfrecord.py


@case
def keras_io_tfrecord_melanoma(strategy):
    rng = np.random.default_rng(4)
    image_size = [96, 96]
    filenames = []
    for shard in range(2):
        path = str(Path(_FILES.name) / f"train{shard:02d}.tfrec")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(40):
                feature = {
                    "image": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[_jpeg(rng, *image_size)])
                    ),
                    "target": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[int(rng.integers(0, 2))])
                    ),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        filenames.append(path)
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "target": tf.io.FixedLenFeature([], tf.int64),
    }

    def read_tfrecord(example):
        example = tf.io.parse_single_example(example, spec)
        image = tf.cast(tf.image.decode_jpeg(example["image"], channels=3), tf.float32)
        image = tf.reshape(image, [*image_size, 3])
        return image, tf.cast(example["target"], tf.int32)

    options = tf.data.Options()
    options.deterministic = False
    dataset = tf.data.TFRecordDataset(filenames).with_options(options)
    dataset = dataset.map(read_tfrecord, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.shuffle(2048).prefetch(buffer_size=tf.data.AUTOTUNE).batch(64)

    def make_model():
        base_model = keras.applications.Xception(
            input_shape=(*image_size, 3), include_top=False, weights=None
        )
        base_model.trainable = False
        inputs = keras.layers.Input([*image_size, 3])
        x = keras.applications.xception.preprocess_input(inputs)
        x = keras.layers.GlobalAveragePooling2D()(base_model(x))
        x = keras.layers.Dropout(0.7)(keras.layers.Dense(8, activation="relu")(x))
        model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
        schedule = keras.optimizers.schedules.ExponentialDecay(0.01, 20, 0.96, staircase=True)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate=schedule),
            loss="binary_crossentropy",
            metrics=[keras.metrics.AUC(name="auc")],
        )
        return model

    with strategy.scope():
        model = make_model()
    return {"dataset": dataset, "model": model, "strategy": strategy}


# ---------------------------- keras-io examples/vision/image_classification_efficientnet_fine_tuning


@case
def keras_io_efficientnet_tpu(strategy):
    img_size, classes, batch_size = 64, 120, 64
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (128, 200, 200, 3), dtype=np.uint8)
    labels = rng.integers(0, classes, 128)
    img_augmentation = keras.Sequential(
        [
            keras.layers.RandomRotation(factor=0.15),
            keras.layers.RandomTranslation(height_factor=0.1, width_factor=0.1),
            keras.layers.RandomFlip(),
            keras.layers.RandomContrast(factor=0.1),
        ],
        name="img_augmentation",
    )
    img_augmentation(tf.zeros([1, img_size, img_size, 3]))  # the example plots augmented images

    size = (img_size, img_size)
    ds_train = tf.data.Dataset.from_tensor_slices((images, labels))
    ds_train = ds_train.map(lambda image, label: (tf.image.resize(image, size), label))
    ds_train = ds_train.map(
        lambda image, label: (image, tf.one_hot(label, classes)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds_train = ds_train.batch(batch_size=batch_size, drop_remainder=True)
    ds_train = ds_train.prefetch(tf.data.AUTOTUNE)
    with strategy.scope():
        inputs = keras.layers.Input(shape=(img_size, img_size, 3))
        x = img_augmentation(inputs)
        outputs = keras.applications.EfficientNetB0(
            include_top=True, weights=None, classes=classes, input_shape=(img_size, img_size, 3)
        )(x)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return {"dataset": ds_train, "model": model, "strategy": strategy}


# ------------------------------------------------------------------------------ scoring


def _text(finding) -> str:
    return " ".join((finding.what, finding.where, finding.why, finding.fix)).lower()


def _matches(finding, expect, severities) -> bool:
    text = _text(finding)
    return (
        finding.code == expect["code"]
        and finding.severity in severities
        and all(t.lower() in text for t in expect.get("text", ()))
        and not any(t.lower() in text for t in expect.get("absent", ()))
    )


def score(case_spec: dict, strategy) -> dict:
    """Run one public case; what was caught, missed, falsely alarmed, and the notes' verdicts."""
    start = time.perf_counter()
    try:
        report = readiness.check(**BUILDERS[case_spec["name"]](strategy))
    except Exception as err:  # a crash of the check is a result of its own
        return {"crash": f"{type(err).__name__}: {str(err)[:300]}", "seconds": 0.0}
    expects, notes = case_spec.get("expect", []), case_spec.get("note", [])
    caught = [
        e["code"] for e in expects if any(_matches(f, e, e["severity"]) for f in report.problems)
    ]
    alarms = [
        (f.code, f.severity, f.what)
        for f in report.problems
        if not any(_matches(f, e, e["severity"]) for e in expects)
    ]
    notes_ok = [n["code"] for n in notes if any(_matches(f, n, ("note",)) for f in report.notes)]
    return {
        "crash": None,
        "caught": caught,
        "missed": [e["code"] for e in expects if e["code"] not in caught],
        "false_alarms": alarms,
        "notes_ok": notes_ok,
        "notes_missed": [n["code"] for n in notes if n["code"] not in notes_ok],
        "findings": [(f.code, f.severity, f.what) for f in report.findings],
        "seconds": round(time.perf_counter() - start, 1),
    }


def score_all(strategy) -> dict:
    with open(EXPECTED, "rb") as file:
        cases = tomllib.load(file)["case"]
    return {spec["name"]: score(spec, strategy) for spec in cases}
