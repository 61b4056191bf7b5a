"""Train an image classifier with tf.distribute.TPUStrategy: on a TPU, on GPUs, or on a CPU.

The TPU Field Guide's reference script, one file to copy. Written for Kaggle's TPU v5e-8, Colab's
v5e-1 and Cloud TPU VMs, it has run only on CPUs, as a simulated TPU of --replicas devices: no run
on a TPU is on record. Install, then restart (python train_tpu.py --help for the rest):
<!-- install: written by make sync from tpucheck/routes.py -->
    Colab, TPU runtime:   pip install tensorflow-tpu==2.20.0 libtpu==0.0.14
    Kaggle, TPU VM v5e-8: pip uninstall -y tensorflow tensorflow-cpu && pip install tensorflow-tpu==2.19.1
    Google Cloud TPU VM:  nothing: TensorFlow from the tpu-vm-tf-X.Y.Z-pjrt runtime image
    a CPU or GPUs:        pip install tensorflow
<!-- end -->
Run it again with the same --ckpt-dir and it resumes where it stopped, even after a kill; the
model ends in CKPT_DIR/model.keras, which loads without a TPU. The data set is one class: swap it
for yours (examples/ reads a folder of JPEG files, and texts). If Keras 3's fit fails on your TPU,
run it on tf-keras as Google's TensorFlow pod tests do: pip install tf-keras~=X.Y.0 (your
TensorFlow's X.Y) and set TF_USE_LEGACY_KERAS=1. Exit status 2: a problem to fix, said in one line.
"""

# ---- part: imports ----
import argparse
import functools
import glob
import json
import math
import os
import sys
import time
import zlib

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.distribute needs Keras on TensorFlow, not JAX
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ notes: errors only

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras  # Keras 3; tf-keras (Keras 2) where TF_USE_LEGACY_KERAS=1
KERAS = getattr(keras, "__version__", None) or sys.modules["tf_keras"].__version__
SHARDS = 8  # TFRecord files per split: up to 8 hosts can each read their own


class UsageError(Exception):
    """Something the user must fix; the script prints its one sentence and exits with 2."""


def one_line(err):
    return " ".join(str(err).split())[:160]


# ---- end of part ----
# ---- part: connect ----
_STRATEGY = []  # connected once per process: initialising a TPU again can lose its variables


def tpu_signs():
    """What shows TPU hardware on this host: environment variables or its device nodes."""
    names = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
    signs = [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]
    vfio = [p for p in glob.glob("/dev/vfio/*") if os.path.basename(p).isdigit()]  # v5e, v6e
    return signs + sorted(glob.glob("/dev/accel*")) + vfio  # accel*: v4 and older


def connect(replicas=8):
    """The strategy for this host: a TPU, GPUs, or on a CPU `replicas` logical devices."""
    if _STRATEGY:
        return _STRATEGY[0]
    if signs := tpu_signs():  # never fall back to the CPU silently on a TPU host
        tpu = os.environ.get("TPU_NAME", "local")  # local: this VM's; a pod slice: its name
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            strategy = tf.distribute.TPUStrategy(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as err:
            raise UsageError(
                f"TPU hardware is here ({', '.join(signs)}) but TensorFlow {tf.__version__} "
                f"cannot use it ({one_line(err)}): install its TPU build (this file's "
                "docstring says how) and restart."
            ) from None
    elif tf.config.list_physical_devices("GPU"):
        strategy = tf.distribute.MirroredStrategy()  # every GPU
    else:  # a simulated TPU: the CPU split into devices, before TensorFlow starts
        try:
            cpu = tf.config.list_physical_devices("CPU")[0]
            config = [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
            tf.config.set_logical_device_configuration(cpu, config)
        except RuntimeError:
            raise UsageError("TensorFlow started already: restart and connect() first.") from None
        strategy = tf.distribute.MirroredStrategy(tf.config.list_logical_devices("CPU"))
    _STRATEGY.append(strategy)
    return strategy


# ---- end of part ----
# ---- part: data ----
# Everything that depends on the data set is one class; the rest of the script never looks
# inside an example. For your own data write such a class and pass it to main(data=...):
# examples/image_folder.py reads a folder of JPEG files, examples/text_fortunes.py texts.
def split_of(name, validation=0.1, test=0.0):
    """An example's split from its name alone: the same in every run, whatever the order of the
    files, and adding examples moves none of the others."""
    share = zlib.crc32(name.encode()) % 1000 / 1000
    return "test" if share < test else "validation" if share < test + validation else "train"


class FashionMNIST:
    """Zalando's 70,000 grey 28x28 photos of 10 kinds of clothing, from Keras as arrays."""

    NAME = "fashion_mnist"
    CLASSES = "T-shirt trouser pullover dress coat sandal shirt sneaker bag boot".split()
    SHAPE, DTYPE = (28, 28, 1), "uint8"  # one example: its static shape, and how it is stored

    def examples(self):
        """(name, split, item) of every example; read(item) makes the example."""
        try:  # downloaded once, into ~/.keras/datasets/fashion-mnist
            (x_train, y_train), (x_test, y_test) = keras.datasets.fashion_mnist.load_data()
        except Exception as err:
            raise UsageError(
                f"Fashion-MNIST could not be downloaded ({one_line(err)}): turn the internet "
                "on (Kaggle: Settings), or copy its 4 files to ~/.keras/datasets/fashion-mnist."
            ) from None
        for i, item in enumerate(zip(x_train, y_train, strict=True)):
            yield f"train/{i}", split_of(f"train/{i}"), item  # a tenth held out to validate
        for i, item in enumerate(zip(x_test, y_test, strict=True)):
            yield f"test/{i}", "test", item

    def read(self, item):
        """(example of SHAPE and DTYPE, label). An example that cannot be read raises: it is
        then left out, counted and named in the data folder's info.json."""
        image, label = item
        return image[..., None], int(label)


# ---- end of part ----
# ---- part: records ----
def serialize(x, label):
    """One tf.train.Example: the example's raw bytes and its label."""
    x = tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.asarray(x).tobytes()]))
    y = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
    example = tf.train.Example(features=tf.train.Features(feature={"x": x, "y": y}))
    return example.SerializeToString()


def write_tfrecords(folder, data):
    """Write `data` as SHARDS files per split; return what info.json says. A kill leaves no half
    file under a name that is read: files are renamed when complete, info.json comes last."""
    tf.io.gfile.makedirs(folder)
    tmp = f"tmp-{os.getpid()}"  # this writer's own names: writers never mix
    writers, info = {}, {"dataset": data.NAME, "classes": {}, "skipped": {}, "bytes": {}}
    for name, split, item in data.examples():
        try:
            x, label = data.read(item)
        except (ValueError, OSError, tf.errors.OpError) as err:  # a damaged file, say
            info["skipped"][name] = one_line(err)
            continue
        if (np.shape(x), np.asarray(x).dtype) != (data.SHAPE, data.DTYPE):
            raise UsageError(f"{name} is not {data.DTYPE} {data.SHAPE}: fix {data.NAME}'s read.")
        counts = info["classes"].setdefault(split, [0] * len(data.CLASSES))
        shard = sum(counts) % SHARDS  # in turn: reading the files in turn keeps this order
        if (split, shard) not in writers:
            writers[split, shard] = tf.io.TFRecordWriter(f"{folder}/{split}-{shard}.{tmp}")
        writers[split, shard].write(serialize(x, label))
        counts[label] += 1
    for (split, shard), writer in sorted(writers.items()):
        writer.close()
        name = f"{split}-{shard:05d}-of-{SHARDS:05d}.tfrecord"
        info["bytes"][name] = tf.io.gfile.stat(f"{folder}/{split}-{shard}.{tmp}").length
        tf.io.gfile.rename(f"{folder}/{split}-{shard}.{tmp}", f"{folder}/{name}", overwrite=True)
    with tf.io.gfile.GFile(f"{folder}/info.json.{tmp}", "w") as f:
        json.dump(info, f, indent=1)
    tf.io.gfile.rename(f"{folder}/info.json.{tmp}", f"{folder}/info.json", overwrite=True)
    if info["skipped"]:
        print(f"{len(info['skipped'])} unreadable examples left out: {folder}/info.json names them")
    return info


def read_info(folder, data):
    """What info.json says, once every file matches it (a missing, cut-short or stray file is an
    error: training on part of the data would look fine); None where there is none."""
    if not tf.io.gfile.exists(f"{folder}/info.json"):
        return None
    with tf.io.gfile.GFile(f"{folder}/info.json") as f:
        info = json.load(f)
    again = "copy it again, or delete the folder and the script writes it anew"
    if info.get("dataset") != data.NAME or "classes" not in info:
        raise UsageError(f"{folder} holds another data set than {data.NAME}: {again}.")
    files = tf.io.gfile.glob(f"{folder}/*.tfrecord")
    found = {os.path.basename(path): tf.io.gfile.stat(path).length for path in files}
    for name in sorted(set(found) | set(info["bytes"])):
        if found.get(name) != info["bytes"].get(name):  # missing, cut short, changed, or stray
            size = info["bytes"].get(name, "nothing")
            raise UsageError(
                f"{folder}/{name} holds {found.get(name, 0)} bytes where "
                f"info.json says {size}: {again}."
            )
    return info


# ---- end of part ----
# ---- part: pipeline ----
def read_records(folder, split, ctx, take=None):
    """This host's share (`ctx`: a tf.distribute.InputContext) of a split's first `take` records,
    from all its files at once (the Cloud TPU performance guide's first fix for a step that
    waits on its input) and in turn: the order they were written in."""
    files = sorted(tf.io.gfile.glob(f"{folder}/{split}-*-of-*.tfrecord"))
    hosts, host = ctx.num_input_pipelines, ctx.input_pipeline_id
    if not files or len(files) % hosts:
        raise UsageError(f"{len(files)} {split} files cannot be shared by {hosts} hosts evenly.")
    records = tf.data.TFRecordDataset(files[host::hosts], num_parallel_reads=len(files) // hosts)
    return records.take(take // hosts) if take else records


def parse(records, data, uint8=False):
    """A batch of records -> (examples, int32 labels), pixels scaled to float32 on the host. With
    `uint8` they go to the device as bytes, a quarter of the transfer: unverified on a TPU (in
    tensorflow/core/tpu/tpu_defs.h's TPU types; "not supported", tensorflow/tensorflow#37426)."""
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([], tf.int64)}
    features = tf.io.parse_example(records, spec)
    batch = records.shape[0] or -1  # known when batched with drop_remainder: a static shape
    x = tf.reshape(tf.io.decode_raw(features["x"], data.DTYPE), (batch, *data.SHAPE))
    if data.DTYPE == "uint8" and not uint8:
        x = tf.cast(x, tf.float32) / 255
    return x, tf.cast(features["y"], tf.int32)


def with_options(ds):
    options = tf.data.Options()
    # read_records split the files by host already: OFF, no tf.distribute wrapper splits them.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True  # the same order in every run: what resuming relies on
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def train_dataset(folder, ctx, batch, data, steps, epochs, start=0, seed=0, take=None, uint8=0):
    """This host's batches of `epochs` epochs of `steps` steps, from step `start` on. Each epoch
    shuffles with its own seed, so a resumed run sees what an uninterrupted one would."""
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines  # batches a step takes here
    first_epoch, done = divmod(start, steps)
    epoch_batches = [
        read_records(folder, "train", ctx, take)
        .shuffle(10_000, seed=seed * 1000 + epoch, reshuffle_each_iteration=False)
        .batch(batch, drop_remainder=True)  # static shapes: one compilation
        .take(steps * per_step)
        for epoch in range(first_epoch, epochs)
    ]
    ds = functools.reduce(tf.data.Dataset.concatenate, epoch_batches)
    ds = ds.skip(done * per_step)  # the batches the checkpoint says were trained
    return with_options(ds.map(lambda r: parse(r, data, uint8), tf.data.AUTOTUNE))


def eval_dataset(folder, ctx, batch, data, steps, split="test", uint8=False):
    """Every example of `split` once per `steps` batches, over and over. A TPU runs one static
    shape, so the last batch is filled up with blank examples whose weight 0 keeps them out."""
    records = read_records(folder, split, ctx)
    blank = serialize(np.zeros(data.SHAPE, data.DTYPE), 0)
    padding = tf.data.Dataset.from_tensors((blank, 0.0)).repeat()
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    ds = records.map(lambda r: (r, 1.0)).concatenate(padding).take(steps * per_step * batch)
    ds = ds.batch(batch, drop_remainder=True).map(lambda r, w: (*parse(r, data, uint8), w))
    return with_options(ds.cache().repeat())


# ---- end of part ----
# ---- part: model ----
def build_cnn(shape, classes, bf16=False, seed=0, uint8=False):
    """A small CNN, pixels to logits, for strategy.scope(). bf16: mixed_bfloat16 (bfloat16 math,
    float32 weights) per layer, so nothing global changes; float32 logits. 128: a TPU MXU's side."""
    policy = "mixed_bfloat16" if bf16 else "float32"
    init = [keras.initializers.GlorotUniform(seed + i) for i in range(4)]  # the same every run
    inputs = keras.Input(shape, dtype="uint8" if uint8 else "float32", name="pixels")
    x = keras.layers.Rescaling(1 / 255, dtype=policy)(inputs) if uint8 else inputs
    for i, filters in enumerate((32, 64)):
        x = keras.layers.Conv2D(
            filters, 3, padding="same", activation="relu", kernel_initializer=init[i], dtype=policy
        )(x)
        x = keras.layers.MaxPooling2D(dtype=policy)(x)
    x = keras.layers.Flatten(dtype=policy)(x)
    x = keras.layers.Dense(128, activation="relu", kernel_initializer=init[2], dtype=policy)(x)
    logits = keras.layers.Dense(classes, kernel_initializer=init[3], dtype="float32")(x)
    return keras.Model(inputs, logits, name="cnn")


def build(strategy, learning_rate, make_model=build_cnn, bf16=None, **model_args):
    """The model and Adam, built in the scope with Adam's slots: made lazily in strategy.run,
    they fail on 2+ replicas. bf16 None: on a TPU only, known by its strategy's class name (no
    TensorFlow needed on JAX), as a CPU without AVX-512 computes bfloat16 2-3 times slower."""
    bf16 = type(strategy).__name__.startswith("TPUStrategy") if bf16 is None else bf16
    with strategy.scope():
        model = make_model(bf16=bf16, **model_args)
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(model.trainable_variables)
    return model, optimizer


# ---- end of part ----
# ---- part: step ----
def make_train_step(model, optimizer, global_batch):
    """One replica's step. The optimizer sums the replicas' gradients, so each replica's loss is
    its examples' losses divided by the GLOBAL batch: a per-replica mean trains R times too fast."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        # Made dense: summing an embedding's sparse gradient gathers every replica's rows first.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return replica_step


def many_steps(strategy, replica_step, shape=()):
    """steps(iterator, n): n steps in one call (one host round trip), returning the mean over the
    steps of replica_step's value summed over the replicas. n: a tensor (a number retraces)."""

    @tf.function
    def steps(iterator, n):
        total = tf.zeros(shape)
        for _ in tf.range(n):
            per_replica = strategy.run(replica_step, args=next(iterator))
            total += strategy.reduce("SUM", per_replica, axis=None)
        return total / tf.cast(n, tf.float32)

    return steps


# ---- end of part ----
# ---- part: evaluation ----
def make_evaluate(strategy, model):
    """evaluate(iterator, n) -> (loss, accuracy, examples) over n padded batches."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_sums(x, labels, weights):  # sums, to which padding (weight 0) adds nothing
        logits = model(x, training=False)
        hits = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32) == labels, tf.float32)
        real, none = weights > 0, tf.zeros_like(weights)
        sums = [tf.where(real, loss_fn(labels, logits), none), tf.where(real, hits, none), weights]
        return tf.stack([tf.reduce_sum(s) for s in sums])

    sums = many_steps(strategy, replica_sums, shape=(3,))

    def evaluate(iterator, n):
        loss, hits, count = sums(iterator, tf.constant(n)).numpy()  # each divided by n
        return loss / count, hits / count, round(count * n)

    return evaluate


# ---- end of part ----
# ---- part: checkpoint ----
# --ckpt-dir must outlive the machine. Kaggle: under /kaggle/working (kept with a notebook's
# version). Colab: Google Drive (drive.mount). A TPU VM: gs://bucket/..., which every host of a
# pod sees and a preemption leaves (tf.train.Checkpoint writes to gs:// directly).
def checkpointing(folder, model, optimizer):
    """A CheckpointManager of the model, Adam, the step and `state` (a Dropout's seed, say). A save
    renames the file "checkpoint" that names the latest last: killed before, the previous stays."""
    step = tf.Variable(0, dtype=tf.int64, name="step")
    state = model.non_trainable_variables
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step, state=state)
    return tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3), step


def restore(manager, step, order, require=False):
    """Restore the latest save and return its step (0 without one). `order`: the seed, global
    batch and examples that make the step a position in the data; a save of others is refused."""
    if latest := manager.latest_checkpoint:
        try:
            manager.checkpoint.restore(latest).assert_consumed()
        except (AssertionError, ValueError, tf.errors.OpError) as err:
            raise UsageError(
                f"{latest} was saved by another model ({one_line(err)}): "
                "resume with the code that wrote it, or use a new --ckpt-dir."
            ) from None
    same_order(manager.directory, order, resuming=latest is not None, require=require)
    return int(step.numpy())


def fit_backup(folder, model, order, require=False):
    """(Keras' BackupAndRestore, steps trained): restored now, so the data can start where
    training does. It saves at each epoch's end and keeps the last: a finished run trains no more."""
    keep_two = {} if KERAS < "3" else {"double_checkpoint": True}  # a torn write
    backup = keras.callbacks.BackupAndRestore(folder, delete_checkpoint=False, **keep_two)
    backup.set_model(model)
    backup.on_train_begin()  # fit calls it again: a second restore of the same files
    done = int(model.optimizer.iterations.numpy())
    same_order(folder, order, resuming=done > 0, require=require)
    return backup, done


def same_order(folder, order, resuming, require):
    """Refuse to resume what was trained in another order; note this run's order."""
    if require and not resuming:  # --require-checkpoint: never start from zero by mistake
        raise UsageError(f"No checkpoint in {folder} to resume from.")
    if resuming and tf.io.gfile.exists(f"{folder}/order.json"):
        with tf.io.gfile.GFile(f"{folder}/order.json") as f:
            if json.load(f) != order:
                raise UsageError(f"{folder} was trained in another order: use a new --ckpt-dir.")
    try:  # before the first step: a folder that cannot be written fails now
        tf.io.gfile.makedirs(folder)
        with tf.io.gfile.GFile(f"{folder}/order.json", "w") as f:
            json.dump(order, f)
    except (OSError, tf.errors.OpError) as err:
        raise UsageError(f"Cannot write to {folder} ({one_line(err)}).") from None


# ---- end of part ----
# ---- part: fit ----
def fit_steps_per_execution(strategy, wanted):
    """More than 1 fails under MirroredStrategy with 2+ replicas (keras-team/keras#19246)."""
    many = isinstance(strategy, tf.distribute.TPUStrategy) or strategy.num_replicas_in_sync == 1
    return wanted if many else 1  # a TPU, or one replica: many steps per host call


def epoch_plan(batches, wanted):
    """(steps per call, steps per epoch) for fit, which runs whole calls: the most steps per call
    up to `wanted` that leave under 1% of a pass's batches out (58 at 32 per call would train 32)."""
    per_call = max(k for k in range(1, min(wanted, batches) + 1) if batches % k < batches / 100)
    return per_call, batches - batches % per_call


def compile_for_fit(strategy, model, optimizer, steps_per_execution):
    """The model and optimizer, ready for fit. Keras 3's fit first averages a batch over the
    replicas (strategy.reduce), which TPUStrategy returns unchanged: fine, but unverified on a TPU."""
    with strategy.scope():
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=optimizer, loss=loss, steps_per_execution=steps_per_execution)
    return model


# ---- end of part ----
# ---- part: main ----
def parse_args(argv=None):
    def positive(text):
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
        return int(text)

    p = argparse.ArgumentParser(prog="train_tpu", description=__doc__.splitlines()[0])
    p.add_argument("--ckpt-dir", help="checkpoints and model.keras (default checkpoints[-smoke])")
    p.add_argument("--data-dir", help="the TFRecords (default DATASET_tfrecords)")
    p.add_argument("--prepare", action="store_true", help="write the TFRecords and stop")
    p.add_argument("--replicas", type=positive, default=8, help="a simulated TPU's, on a CPU")
    p.add_argument("--epochs", type=positive, help="passes over the data (default 5, smoke 3)")
    p.add_argument("--per-replica-batch", type=positive, default=128, help="a multiple of 8")
    p.add_argument("--steps-per-call", type=positive, default=50, help="steps per host call")
    p.add_argument("--save-every", type=positive, help="steps between saves (default an epoch)")
    p.add_argument("--learning-rate", type=float, default=2e-3, help="Adam's rate at batch 128")
    p.add_argument("--train-examples", type=positive, help="use only this many (default all)")
    p.add_argument("--seed", type=int, default=0, help="initial weights and data order")
    p.add_argument("--smoke", action="store_true", help="a quick run: 16384 examples, 3 epochs")
    p.add_argument("--fit", action="store_true", help="train with compile/fit (CKPT_DIR/fit)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, help="default: on a TPU only")
    p.add_argument("--uint8", action="store_true", help="send pixels as uint8 (unverified)")
    p.add_argument("--require-checkpoint", action="store_true", help="refuse to start at 0")
    args = p.parse_args(argv)
    args.epochs = args.epochs or (3 if args.smoke else 5)
    args.train_examples = args.train_examples or (16384 if args.smoke else None)
    args.ckpt_dir = args.ckpt_dir or ("checkpoints-smoke" if args.smoke else "checkpoints")
    if args.per_replica_batch % 8:  # a TPU core pads it to tiles of 8 rows and computes them
        print("warning: --per-replica-batch is not a multiple of 8.", file=sys.stderr)
    return args


def main(argv=None, strategy=None, data=None, make_model=build_cnn):
    """Train; return what the run measured. `strategy`: one already connected (a notebook that
    holds the TPU); `data`, `make_model`: a data set and a model of your own."""
    args, data = parse_args(argv), data or FashionMNIST()
    args.data_dir = args.data_dir or f"{data.NAME}_tfrecords"
    info = read_info(args.data_dir, data)  # damaged data fails before the TPU starts
    if args.prepare:
        return info or write_tfrecords(args.data_dir, data)
    strategy = strategy or connect(args.replicas)
    keras.utils.set_random_seed(args.seed)
    seen = []  # each host's tf.distribute.InputContext, asked for without reading anything
    strategy.distribute_datasets_from_function(lambda c: seen.append(c) or tf.data.Dataset.range(1))
    if info is None and seen[0].num_input_pipelines > 1:  # a pod: no host may write alone
        raise UsageError(f"No TFRecords in {args.data_dir}: write them with --prepare first.")
    run = plan(args, strategy, info or write_tfrecords(args.data_dir, data))
    model_args = dict(bf16=args.bf16, seed=args.seed, uint8=args.uint8, shape=data.SHAPE)
    model, optimizer = build(strategy, run.lr, make_model, classes=len(data.CLASSES), **model_args)
    print(
        f"{type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s), Keras {KERAS}, "
        f"{model.layers[1].dtype_policy.name}, global batch {run.global_batch}, "
        f"{run.steps} steps per epoch{run.share}"
    )

    def distributed(make_dataset, *more, **kw):  # each host builds its share of every batch
        def per_host(ctx):
            batch = ctx.get_per_replica_batch_size(run.global_batch)
            return make_dataset(args.data_dir, ctx, batch, data, *more, uint8=args.uint8, **kw)

        return strategy.distribute_datasets_from_function(per_host)

    def evaluation(split):  # a function that evaluates every example of a split
        steps = math.ceil(run.found[split] / run.global_batch)
        batches = iter(distributed(eval_dataset, steps, split=split))
        return lambda: evaluate(batches, steps)

    def batches(start):  # the training batches from step `start` on
        kw = dict(start=start, seed=args.seed, take=run.examples)
        return distributed(train_dataset, run.steps, args.epochs, **kw)

    evaluate = make_evaluate(strategy, model)
    run.validate, run.test = evaluation("validation"), evaluation("test")  # kept: see the end
    train, run.clock = (train_with_fit if args.fit else train_custom_loop), time.perf_counter()
    train(args, run, strategy, model, optimizer, batches)
    run.test_loss, run.test_accuracy, n = run.test()
    model.save(f"{args.ckpt_dir}/model.keras")  # for serving: keras.models.load_model, no TPU
    print(
        f"done: {run.done} steps, test accuracy {run.test_accuracy:.4f} on {n} examples (the "
        f"commonest class alone: {run.baseline:.4f}); model in {args.ckpt_dir}/model.keras"
    )
    return run


def plan(args, strategy, info):
    """The run's batches, steps and learning rate, from the data found."""
    run = argparse.Namespace(history=[], found={k: sum(v) for k, v in info["classes"].items()})
    run.examples = min(args.train_examples or run.found["train"], run.found["train"])
    run.baseline = max(info["classes"]["test"]) / run.found["test"]  # the commonest class's share
    run.global_batch = args.per_replica_batch * strategy.num_replicas_in_sync
    batches = run.examples // run.global_batch  # whole batches per pass
    if batches < 1:
        raise UsageError(f"{run.examples} training examples make no batch of {run.global_batch}.")
    run.per_call, run.steps = args.steps_per_call, batches  # a loop's last call may be shorter
    if args.fit:  # fit runs whole host calls only
        run.per_call = fit_steps_per_execution(strategy, run.per_call)
        run.per_call, run.steps = epoch_plan(batches, run.per_call)
    run.share = f" ({run.steps / batches:.1%} of {batches})" * (run.steps < batches)
    # Adam's rate grows with the square root of the global batch (03_keras_compile_and_fit).
    run.lr = args.learning_rate * math.sqrt(run.global_batch / 128)
    return run


def report(args, run, epoch, loss, steps):
    """An epoch's line, with the validation split's loss and accuracy."""
    rate = steps * run.global_batch / (time.perf_counter() - run.clock)  # before validating
    val_loss, val_accuracy, n = run.validate()
    run.history.append({"loss": loss, "val_loss": val_loss, "val_accuracy": val_accuracy})
    resumed = "" if steps == run.steps else f" (its last {steps} steps: resumed)"
    print(
        f"epoch {epoch}/{args.epochs}: loss {loss:.4f}{resumed}, validation loss {val_loss:.4f}, "
        f"accuracy {val_accuracy:.4f} ({n} examples); {rate:,.0f} examples/s"
    )
    run.clock = time.perf_counter()


def train_custom_loop(args, run, strategy, model, optimizer, batches):
    """Many steps per call with strategy.run; a save at each epoch's end (or --save-every)."""
    manager, step = checkpointing(args.ckpt_dir, model, optimizer)
    order = [args.seed, run.global_batch, run.examples]
    run.done = restore(manager, step, order, args.require_checkpoint)
    print(f"resumed at step {run.done}" if run.done else "starting at step 0")
    total = args.epochs * run.steps
    run.iterator = iter(batches(run.done)) if run.done < total else None  # kept: see the end
    train_steps = many_steps(strategy, make_train_step(model, optimizer, run.global_batch))
    save_every, loss_sum, steps = args.save_every or run.steps, 0.0, 0
    while run.done < total:  # each call stops at the next save, epoch end or the end
        n = min(args.steps_per_call, *(k - run.done % k for k in (save_every, run.steps)))
        loss_sum += float(train_steps(run.iterator, tf.constant(n))) * n
        steps, run.done = steps + n, int(step.assign_add(n))
        if run.done % save_every == 0 or run.done % run.steps == 0:
            manager.save(checkpoint_number=run.done)
        if run.done % run.steps == 0:  # the epoch's mean loss, since it began or resumed
            report(args, run, run.done // run.steps, loss_sum / steps, steps)
            loss_sum, steps = 0.0, 0


def train_with_fit(args, run, strategy, model, optimizer, batches):
    """Keras' compile and fit: one call for every epoch, resumed after the last whole epoch."""
    compile_for_fit(strategy, model, optimizer, run.per_call)
    order = [args.seed, run.global_batch, run.examples, run.steps]
    backup, done = fit_backup(f"{args.ckpt_dir}/fit", model, order, args.require_checkpoint)
    print(f"resumed at step {done}" if done else "starting at step 0")
    line = lambda epoch, logs: report(args, run, epoch + 1, logs["loss"], run.steps)  # noqa: E731
    run.done = args.epochs * run.steps  # one fit call for every epoch: each starts the data anew
    if done < run.done:  # the backup saves before the epoch's line is printed
        callbacks = [backup, keras.callbacks.LambdaCallback(on_epoch_end=line)]
        kw = dict(epochs=args.epochs, steps_per_epoch=run.steps, callbacks=callbacks, verbose=0)
        model.fit(batches(done), shuffle=False, **kw)  # shuffled by the pipeline's own seeds
    print(f"fit with steps_per_execution={run.per_call}")


def run_as_program(argv=None, **kw):
    """main() as a program: exit status 2 and one sentence on stderr for a problem to fix."""
    sys.stdout.reconfigure(line_buffering=True)  # each line at once, even into a file
    try:
        run = main(argv, **kw)  # noqa: F841 (held until the exit, below)
    except UsageError as err:
        print(f"train_tpu: {err}", file=sys.stderr)
        sys.exit(2)
    # Leave at once, all saved: dropping run's iterators waits for tf.data's autotuning threads.
    os._exit(0)


# ---- end of part ----
if __name__ == "__main__":
    run_as_program()
