"""Training setups reproduced from public TPU and distributed-training examples, for the readiness check.

Each builder reproduces one setup of ``tests/data/tpucheck/readiness_public_expected.toml`` (source,
commit and every change from the original are listed there): the pipeline, the model and the
compile call or step as the example writes them, in this project's own code, with downloads
replaced by small random data of the same shapes. A builder takes the 8-replica strategy and
returns the keyword arguments of ``readiness.check``. ``tests/test_tpucheck_readiness_corpus.py`` runs them
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

from tpucheck import readiness

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

EXPECTED = Path(__file__).parent / "data" / "tpucheck" / "readiness_public_expected.toml"
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


# ------------------------------------------------------- keras-io examples/vision/mnist_convnet.py


def keras_fit_dataset(x, y, batch_size, validation_split=0.0, shuffle=True):
    """The dataset Keras' fit() builds itself from NumPy arrays (its own data adapter)."""
    from keras.src.trainers.data_adapters import array_slicing, get_data_adapter

    if validation_split:
        (x, y), _ = array_slicing.train_validation_split((x, y), validation_split)
    return get_data_adapter(x, y, batch_size=batch_size, shuffle=shuffle).get_tf_dataset()


@case
def keras_io_mnist_convnet_fit_arrays(strategy):
    images, labels = _digits(
        409
    )  # 368 for training after validation_split=0.1, as 54,000 of 60,000
    x_train = np.expand_dims(images[..., 0].astype("float32") / 255, -1)
    y_train = keras.utils.to_categorical(labels, 10)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
                keras.layers.MaxPooling2D(pool_size=(2, 2)),
                keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
                keras.layers.MaxPooling2D(pool_size=(2, 2)),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    dataset = keras_fit_dataset(x_train, y_train, batch_size=128, validation_split=0.1)
    return {"dataset": dataset, "model": model, "strategy": strategy}


# --------------------------------------- keras-io examples/generative/dcgan_overriding_train_step.py


class DCGAN(keras.Model):
    """The example's GAN: a model of two built models, trained by its own train_step."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = tf.shape(real_images)[0]
        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
        generated_images = self.generator(random_latent_vectors)
        combined_images = tf.concat([generated_images, real_images], axis=0)
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * tf.random.uniform(tf.shape(labels))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(
            zip(grads, self.discriminator.trainable_weights, strict=True)
        )
        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
        misleading_labels = tf.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights, strict=True))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def _strided_leaky(conv, *filters):
    """The example's blocks: conv(f, kernel_size=4, strides=2, padding="same") -> LeakyReLU(0.2)."""
    return [
        layer
        for f in filters
        for layer in (
            conv(f, kernel_size=4, strides=2, padding="same"),
            keras.layers.LeakyReLU(negative_slope=0.2),
        )
    ]


@case
def keras_io_dcgan_train_step(strategy):
    rng = np.random.default_rng(6)
    faces = rng.integers(0, 256, (71, 64, 64, 3)).astype("float32")  # 2 x 32 + 7, as CelebA's
    dataset = tf.data.Dataset.from_tensor_slices(faces).batch(32).map(lambda x: x / 255.0)
    latent_dim = 128
    with strategy.scope():
        discriminator = keras.Sequential(
            [
                keras.Input(shape=(64, 64, 3)),
                *_strided_leaky(keras.layers.Conv2D, 64, 128, 128),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(1, activation="sigmoid"),
            ],
            name="discriminator",
        )
        generator = keras.Sequential(
            [
                keras.Input(shape=(latent_dim,)),
                keras.layers.Dense(8 * 8 * 128),
                keras.layers.Reshape((8, 8, 128)),
                *_strided_leaky(keras.layers.Conv2DTranspose, 128, 256, 512),
                keras.layers.Conv2D(3, kernel_size=5, padding="same", activation="sigmoid"),
            ],
            name="generator",
        )
        gan = DCGAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
        gan.compile(
            d_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
            g_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
            loss_fn=keras.losses.BinaryCrossentropy(),
        )
    return {"dataset": dataset, "model": gan, "strategy": strategy}


# ------------------------------------------------------- keras-io examples/generative/cyclegan.py


class CycleGan(keras.Model):
    """The example's CycleGAN: two generators and two discriminators, four optimizers."""

    def __init__(self, generator_g, generator_f, discriminator_x, discriminator_y):
        super().__init__()
        self.gen_G, self.gen_F = generator_g, generator_f
        self.disc_X, self.disc_Y = discriminator_x, discriminator_y
        self.lambda_cycle, self.lambda_identity = 10.0, 0.5

    def call(self, inputs):
        return self.disc_X(inputs), self.disc_Y(inputs), self.gen_G(inputs), self.gen_F(inputs)

    def compile(self, gen_g_optimizer, gen_f_optimizer, disc_x_optimizer, disc_y_optimizer):
        super().compile()
        self.gen_G_optimizer, self.gen_F_optimizer = gen_g_optimizer, gen_f_optimizer
        self.disc_X_optimizer, self.disc_Y_optimizer = disc_x_optimizer, disc_y_optimizer
        self.adversarial_loss_fn = keras.losses.MeanSquaredError()
        self.cycle_loss_fn = keras.losses.MeanAbsoluteError()

    def train_step(self, batch_data):
        real_x, real_y = batch_data
        with tf.GradientTape(persistent=True) as tape:
            fake_y = self.gen_G(real_x, training=True)
            fake_x = self.gen_F(real_y, training=True)
            cycled_x = self.gen_F(fake_y, training=True)
            cycled_y = self.gen_G(fake_x, training=True)
            disc_fake_x = self.disc_X(fake_x, training=True)
            disc_fake_y = self.disc_Y(fake_y, training=True)
            disc_real_x = self.disc_X(real_x, training=True)
            disc_real_y = self.disc_Y(real_y, training=True)
            ones = tf.ones_like(disc_fake_y)
            cycle = self.cycle_loss_fn(real_y, cycled_y) + self.cycle_loss_fn(real_x, cycled_x)
            total_loss_g = self.adversarial_loss_fn(ones, disc_fake_y) + cycle * self.lambda_cycle
            total_loss_f = self.adversarial_loss_fn(ones, disc_fake_x) + cycle * self.lambda_cycle
            disc_x_loss = self.adversarial_loss_fn(ones, disc_real_x) + self.adversarial_loss_fn(
                tf.zeros_like(disc_fake_x), disc_fake_x
            )
            disc_y_loss = self.adversarial_loss_fn(ones, disc_real_y) + self.adversarial_loss_fn(
                tf.zeros_like(disc_fake_y), disc_fake_y
            )
        for loss, net, optimizer in (
            (total_loss_g, self.gen_G, self.gen_G_optimizer),
            (total_loss_f, self.gen_F, self.gen_F_optimizer),
            (disc_x_loss, self.disc_X, self.disc_X_optimizer),
            (disc_y_loss, self.disc_Y, self.disc_Y_optimizer),
        ):
            grads = tape.gradient(loss, net.trainable_variables)
            optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        return {"G_loss": total_loss_g, "F_loss": total_loss_f}


def _cyclegan_net(size, filters, name, generator):
    inputs = keras.Input(shape=(size, size, 3), name=name + "_img_input")
    x = keras.layers.Conv2D(filters, 4, strides=2, padding="same")(inputs)
    x = keras.layers.GroupNormalization(groups=-1)(x)  # tfa's InstanceNormalization
    x = keras.layers.LeakyReLU(negative_slope=0.2)(x)
    if generator:
        x = keras.layers.Conv2DTranspose(filters, 3, strides=2, padding="same")(x)
        x = keras.layers.Activation("tanh")(keras.layers.Conv2D(3, 7, padding="same")(x))
    else:
        x = keras.layers.Conv2D(1, 4, padding="same")(x)
    return keras.Model(inputs, x, name=name)


@case
def keras_io_cyclegan_zip(strategy):
    rng = np.random.default_rng(7)
    orig, size = 36, 32

    def preprocess_train_image(img, label):
        img = tf.image.random_flip_left_right(img)
        img = tf.image.resize(img, [orig, orig])
        img = tf.image.random_crop(img, size=[size, size, 3])
        return (tf.cast(img, tf.float32) / 127.5) - 1.0

    def domain(count):
        images = rng.integers(0, 256, (count, 40, 40, 3), dtype=np.uint8)
        ds = tf.data.Dataset.from_tensor_slices((images, np.zeros(count, np.int64)))
        ds = ds.map(preprocess_train_image, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.cache().shuffle(256).batch(1)

    with strategy.scope():
        gan = CycleGan(
            _cyclegan_net(size, 64, "generator_G", True),
            _cyclegan_net(size, 64, "generator_F", True),
            _cyclegan_net(size, 64, "discriminator_X", False),
            _cyclegan_net(size, 64, "discriminator_Y", False),
        )
        gan.compile(
            *(keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5) for _ in range(4)),
        )
    dataset = tf.data.Dataset.zip((domain(12), domain(15)))
    return {"dataset": dataset, "model": gan, "strategy": strategy}


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


def traced_steps(report) -> dict:
    """Whether a step was traced (or stopped where it would create variables), and the reasons
    given for every step called untraceable (tests/test_tpucheck_readiness_corpus.py checks them)."""
    stopped = any(
        f.code in ("optimizer-not-built", "variable-in-step", "builds-in-step")
        for f in report.findings
    )
    untraceable = [f.why for f in report.find("step-not-traceable")]
    return {
        "traced": "step trace" in report.checked or stopped or bool(untraceable),
        "untraceable": untraceable,
    }


def score(case_spec: dict, strategy) -> dict:
    """Run one public case; what was caught, missed, falsely alarmed, and the notes' verdicts."""
    start = time.perf_counter()
    try:
        report = readiness.check(**BUILDERS[case_spec["name"]](strategy))
    except Exception as err:  # a crash of the check is a result of its own
        return {"crash": f"{type(err).__name__}: {str(err)[:300]}", "seconds": 0.0}
    expects, notes = case_spec.get("expect", []), case_spec.get("note", [])
    caught = [  # as many distinct findings as `count` asks for (one by default)
        e["code"]
        for e in expects
        if len({f for f in report.problems if _matches(f, e, e["severity"])}) >= e.get("count", 1)
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
        **traced_steps(report),
    }


def score_all(strategy) -> dict:
    with open(EXPECTED, "rb") as file:
        cases = tomllib.load(file)["case"]
    return {spec["name"]: score(spec, strategy) for spec in cases}
