"""Train a small CNN on Fashion-MNIST with tf.distribute: on a TPU, on GPUs, or on a simulated TPU.

The TPU Field Guide's reference script: plain TensorFlow, Keras, NumPy and the standard library,
one file to copy. It runs unchanged on Kaggle's TPU v5e-8, Colab's v5e-1, a Cloud TPU VM, GPUs,
and a CPU (there, a simulated TPU of --replicas logical CPU devices). Run it twice with the same
--ckpt-dir and the second run continues where the first stopped, even after a SIGKILL.

    python train_tpu.py --smoke                  # about a minute on a laptop's CPU
    python train_tpu.py --ckpt-dir gs://bucket/run1 --data-dir gs://bucket/fmnist  # a TPU VM
    python train_tpu.py --fit                    # the same model with compile/fit

Each lesson shows one part of this file (the lines between "# ---- part: NAME ----" and
"# ---- end of part ----"); pasted into a notebook in order, the parts define everything
main() uses. Exit status: 0 done, 2 a problem you must fix (one sentence on stderr).
"""

# ---- part: imports ----
import argparse
import glob
import json
import math
import os
import sys
import time

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.distribute needs Keras on TensorFlow (not JAX)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up notes

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

IMAGE_SHAPE = (28, 28, 1)
CLASSES = 10
SHARDS = 8  # TFRecord files per split: up to 8 hosts can each read their own files


class UsageError(Exception):
    """Something the user must fix; main() prints its one sentence and exits with status 2."""


# ---- end of part ----


# ---- part: connect ----
TPU_SIGNS = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
_CONNECTED = []  # the strategy of this process: a TPU is initialised once, never twice


def tpu_signs():
    """What shows TPU hardware on this host: environment variables or its device nodes."""
    signs = [f"{name}={os.environ[name]}" for name in TPU_SIGNS if os.environ.get(name)]
    vfio = [p for p in glob.glob("/dev/vfio/*") if os.path.basename(p).isdigit()]  # v5e, v6e
    return signs + sorted(glob.glob("/dev/accel*")) + sorted(vfio)  # accel*: v4 and older


def connect(replicas=8):
    """The strategy for this host: a TPU, several GPUs, or on a CPU a simulated TPU."""
    if _CONNECTED:  # a second initialize_tpu_system can lose variables (tensorflow#31961)
        return _CONNECTED[0]
    if keras.backend.backend() != "tensorflow":
        raise UsageError("Keras runs on another backend here; set KERAS_BACKEND=tensorflow.")
    signs = tpu_signs()
    if signs:  # never fall back to the CPU silently on a TPU host
        try:
            # "local": the TPU of this VM; on a pod slice, $TPU_NAME names it.
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=os.environ.get("TPU_NAME", "local")
            )
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            strategy = tf.distribute.TPUStrategy(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UsageError(
                f"TPU hardware is here ({', '.join(signs)}) but TensorFlow {tf.__version__} "
                f"cannot use it ({reason}): install TensorFlow's TPU build (pip install "
                "tensorflow-tpu; lesson 01_tpu_detection_and_connection gives the version per platform) and restart."
            ) from None
    elif len(tf.config.list_physical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    elif tf.config.list_physical_devices("GPU"):
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
    elif replicas == 1:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    else:  # a simulated TPU: the CPU split into logical devices, before TensorFlow starts
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            config = [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
            tf.config.set_logical_device_configuration(cpu, config)
        except RuntimeError:
            raise UsageError(
                f"TensorFlow already started, so the CPU cannot be split into {replicas} "
                "devices: connect before any other TensorFlow code (restart the kernel)."
            ) from None
        strategy = tf.distribute.MirroredStrategy(
            [d.name for d in tf.config.list_logical_devices("CPU")[:replicas]]
        )
    _CONNECTED.append(strategy)
    return strategy


# ---- end of part ----


# ---- part: data ----
IDX_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist: works offline


def read_idx(path):
    """One gzipped idx file (MNIST's format): a 4-byte magic number, the sizes, uint8 data."""
    import gzip

    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[:3] != b"\x00\x00\x08":  # two zero bytes, then type 8: unsigned bytes
        raise UsageError(f"{path} is not an idx file of unsigned bytes.")
    dims = raw[3]
    shape = np.frombuffer(raw, ">u4", count=dims, offset=4)
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_fashion_mnist():
    """(x_train, y_train), (x_test, y_test): uint8 images [N, 28, 28] and uint8 labels."""
    if os.path.exists(f"{IDX_DIR}/t10k-labels-idx1-ubyte.gz"):
        return tuple(
            (
                read_idx(f"{IDX_DIR}/{split}-images-idx3-ubyte.gz"),
                read_idx(f"{IDX_DIR}/{split}-labels-idx1-ubyte.gz"),
            )
            for split in ("train", "t10k")
        )
    try:  # Colab and Kaggle: download once into ~/.keras/datasets
        return keras.datasets.fashion_mnist.load_data()
    except Exception as err:
        raise UsageError(
            f"Fashion-MNIST could not be downloaded ({type(err).__name__}): turn the "
            "internet on, or offline install Debian's dataset-fashion-mnist."
        ) from None


# ---- end of part ----


# ---- part: tfrecords ----
def example_bytes(image, label):
    """One tf.train.Example: the raw uint8 pixels and the label."""
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_tfrecords(folder, splits):
    """Write {"train": (x, y), "test": (x, y)} once as SHARDS files per split; return counts.

    Each file is written under a temporary name and renamed when complete, and info.json (the
    files' example counts) comes last: a kill at any moment leaves no half file under a name
    that is read, and the next run writes again whatever info.json does not vouch for.
    """
    info_path = f"{folder}/info.json"
    if tf.io.gfile.exists(info_path):
        with tf.io.gfile.GFile(info_path) as f:
            return json.load(f)
    tf.io.gfile.makedirs(folder)
    counts = {}
    for split, (x, y) in splits.items():
        counts[split] = []
        for shard, rows in enumerate(np.array_split(np.arange(len(x)), SHARDS)):
            name = f"{folder}/{split}-{shard:05d}-of-{SHARDS:05d}.tfrecord"
            partial = f"{name}.tmp-{os.getpid()}"  # its own name: two writers never mix
            with tf.io.TFRecordWriter(partial) as writer:
                for i in rows:
                    writer.write(example_bytes(x[i], y[i]))
            tf.io.gfile.rename(partial, name, overwrite=True)  # complete, or not there
            counts[split].append(len(rows))
    with tf.io.gfile.GFile(f"{info_path}.tmp-{os.getpid()}", "w") as f:
        json.dump(counts, f)
    tf.io.gfile.rename(f"{info_path}.tmp-{os.getpid()}", info_path, overwrite=True)
    return counts


def parse_batch(serialized, cast_on_host=False):
    """A batch of serialized examples -> uint8 images [B, 28, 28, 1] and int32 labels."""
    features = tf.io.parse_example(
        serialized,
        {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    batch = serialized.shape[0] or -1  # static when batched with drop_remainder: keep it
    images = tf.reshape(tf.io.decode_raw(features["image"], tf.uint8), (batch, *IMAGE_SHAPE))
    if cast_on_host:  # uint8 into a TPU step is unverified for TPUStrategy (see the model)
        images = tf.cast(images, tf.float32)
    return images, tf.cast(features["label"], tf.int32)


# ---- end of part ----


# ---- part: pipeline ----
def host_files(folder, split, ctx):
    """This host's share of a split's files (every file on one host)."""
    files = sorted(tf.io.gfile.glob(f"{folder}/{split}-*-of-*.tfrecord"))  # never a .tmp
    if len(files) % ctx.num_input_pipelines:
        raise UsageError(f"{len(files)} {split} files cannot be shared by the hosts evenly.")
    return files[ctx.input_pipeline_id :: ctx.num_input_pipelines]


def with_options(ds):
    options = tf.data.Options()
    # Each host reads its own files already (host_files); OFF says so. Keras' fit hands the
    # dataset to experimental_distribute_dataset, which would otherwise shard it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True  # the same order in every run: what resuming relies on
    return ds.with_options(options)


def train_dataset(folder, ctx, batch, steps_per_epoch, epochs, start_step=0, seed=0, **kw):
    """Batches of `batch` for the steps from `start_step` on, in an order fixed by `seed`.

    Resumable: epoch e is this host's files shuffled with the seed (seed, e), so a run restarted
    at step k skips the k % steps_per_epoch batches its epoch already trained and continues
    with exactly the batches an uninterrupted run would see. Checkpointing the iterator itself
    is the alternative, but tf.distribute's distributed iterators cannot be checkpointed.
    `ctx` (a tf.distribute.InputContext) says which host this is and how many replicas it feeds.
    """
    files = host_files(folder, "train", ctx)
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines  # batches one step takes here
    examples = kw.get("examples")  # fewer training examples (--smoke), else all of them
    first_epoch, done = divmod(start_step, steps_per_epoch)
    ds = None
    for epoch in range(first_epoch, epochs):
        records = tf.data.TFRecordDataset(files)
        if examples:
            records = records.take(examples // ctx.num_input_pipelines)
        records = records.shuffle(10_000, seed=seed * 1000 + epoch)  # the order is seeded
        records = records.batch(batch, drop_remainder=True)  # static shapes: one compilation
        records = records.take(steps_per_epoch * per_step)
        ds = records if ds is None else ds.concatenate(records)
    ds = ds.skip(done * per_step)  # the batches the checkpoint says were trained
    cast = kw.get("cast_on_host", False)
    ds = ds.map(lambda r: parse_batch(r, cast), num_parallel_calls=tf.data.AUTOTUNE)
    return with_options(ds.prefetch(tf.data.AUTOTUNE))


def eval_dataset(folder, ctx, batch, steps, examples=None, cast_on_host=False):
    """Every test image once per `steps` batches, padded with weight-0 examples; repeats.

    A TPU runs one static shape, so the last batch is filled up with blank examples whose
    weight 0 keeps them out of the loss and the accuracy.
    """
    records = tf.data.TFRecordDataset(host_files(folder, "test", ctx))
    if examples:
        records = records.take(examples // ctx.num_input_pipelines)
    blank = example_bytes(np.zeros(IMAGE_SHAPE, np.uint8), 0)
    padding = tf.data.Dataset.from_tensors((blank, 0.0)).repeat()
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    ds = records.map(lambda r: (r, 1.0)).concatenate(padding).take(steps * per_step * batch)
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.map(lambda r, w: (*parse_batch(r, cast_on_host), w), tf.data.AUTOTUNE)
    return with_options(ds.cache().repeat().prefetch(tf.data.AUTOTUNE))


# ---- end of part ----


# ---- part: model ----
def build_model(bf16=True, seed=0, input_dtype="uint8"):
    """A small CNN from raw pixels to class logits; call it inside strategy.scope().

    mixed_bfloat16: bfloat16 math on float32 variables, set per layer so nothing global
    changes; the last layer stays float32 so the logits and the loss keep their precision.
    uint8 pixels reach the device and are scaled there (a quarter of float32's bytes); XLA
    runs u8 on TPUs (jax-ml/jax#4011), but TPUStrategy with uint8 input is unverified
    (tensorflow/tensorflow#37426 said no in 2020): --cast-on-host sends float32 instead.
    """
    policy = "mixed_bfloat16" if bf16 else "float32"
    init = keras.initializers.GlorotUniform  # seeded: the same weights in every run
    inputs = keras.Input(IMAGE_SHAPE, dtype=input_dtype, name="pixels")
    x = keras.layers.Rescaling(1 / 255, dtype=policy)(inputs)  # on the device
    for i, filters in enumerate((32, 64)):
        x = keras.layers.Conv2D(
            filters,
            3,
            padding="same",
            activation="relu",
            kernel_initializer=init(seed + i),
            dtype=policy,
        )(x)
        x = keras.layers.MaxPooling2D(dtype=policy)(x)
    x = keras.layers.Flatten(dtype=policy)(x)
    x = keras.layers.Dense(128, activation="relu", kernel_initializer=init(seed + 2), dtype=policy)(
        x
    )
    logits = keras.layers.Dense(CLASSES, kernel_initializer=init(seed + 3), dtype="float32")(x)
    return keras.Model(inputs, logits, name="cnn")


def build(strategy, learning_rate, **model_args):
    """Model and Adam, with Adam's slot variables created now, in the scope: made lazily inside
    strategy.run, they fail on 2+ replicas ("You must feed a value for placeholder tensor")."""
    with strategy.scope():
        model = build_model(**model_args)
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(model.trainable_variables)
    return model, optimizer


# ---- end of part ----


# ---- part: step ----
def make_train_step(model, optimizer, global_batch):
    """One replica's step: its share of the loss averaged over the GLOBAL batch.

    The optimizer sums the replicas' gradients, so each replica contributes its examples'
    losses divided by the global batch; a per-replica mean would train R times too fast.
    """
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(
                loss_fn(labels, logits), global_batch_size=global_batch
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return replica_step


def many_steps(strategy, replica_step, shape=()):
    """steps(iterator, n): n steps in one tf.function call, one host round trip for all of them.

    Returns the mean over the steps of what replica_step returns (of this shape), summed over
    the replicas inside the loop: a per-replica value cannot leave a tf.range loop. Pass n as
    a tensor (tf.constant), or each new number traces the function again.
    """

    @tf.function
    def steps(iterator, n):
        total = tf.zeros(shape)
        for _ in tf.range(n):
            per_replica = strategy.run(replica_step, args=next(iterator))
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return total / tf.cast(n, tf.float32)

    return steps


# ---- end of part ----


# ---- part: evaluation ----
def make_evaluate(strategy, model):
    """evaluate(iterator, n) -> (loss, accuracy, examples) over n padded batches."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_sums(images, labels, weights):  # sums, so padding (weight 0) adds nothing
        logits = model(images, training=False)
        hits = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32) == labels, tf.float32)
        return tf.stack(
            [
                tf.reduce_sum(weights * loss_fn(labels, logits)),
                tf.reduce_sum(weights * hits),
                tf.reduce_sum(weights),
            ]
        )

    sums = many_steps(strategy, replica_sums, shape=(3,))  # the step part's loop

    def evaluate(iterator, n):
        loss, hits, count = sums(iterator, tf.constant(n)).numpy()  # each divided by n
        return loss / count, hits / count, round(count * n)

    return evaluate


# ---- end of part ----


# ---- part: checkpoint ----
# Where --ckpt-dir must be: somewhere that outlives the machine. Kaggle: under /kaggle/working
# (the only folder kept with a notebook's version; the rest goes with the session). Colab:
# Google Drive (drive.mount), since the runtime's disk is wiped when it is recycled. A TPU VM:
# gs://bucket/..., since a preempted VM takes its disk along and every host of a pod must see
# the same folder (tf.train.Checkpoint writes to gs:// directly).


def checkpointing(folder, model, optimizer, order):
    """Checkpoint manager of the model, Adam, the step and the data order it belongs to.

    The step is the data position: with the same order (seed, global batch, examples) the
    pipeline restarts exactly there. A save writes its files first and then renames the small
    file "checkpoint" that names the latest save: killed before the rename, the previous save
    stays the latest, so the steps since it are trained again from its state, never twice.
    """
    step = tf.Variable(0, dtype=tf.int64, name="step")
    saved_order = tf.Variable(order, dtype=tf.int64, name="order")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step, order=saved_order)
    return tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3), step, saved_order


def restore(manager, step, saved_order, require=False):
    """Restore the latest committed save, or start at step 0 (refused with `require`)."""
    wanted = saved_order.numpy().tolist()
    if manager.latest_checkpoint is None:
        if require:
            raise UsageError(
                f"No checkpoint in {manager.directory} to resume from (--require-checkpoint)."
            )
        return 0
    manager.checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    if saved_order.numpy().tolist() != wanted:
        raise UsageError(
            f"{manager.latest_checkpoint} was trained with another seed, batch or data size "
            f"{saved_order.numpy().tolist()}: resume with its settings or use a new --ckpt-dir."
        )
    return int(step.numpy())


def save_checkpoint(manager, step):
    return manager.save(checkpoint_number=step)


# ---- end of part ----


# ---- part: fit ----
def fit_steps_per_execution(strategy, wanted):
    """More than 1 fails under MirroredStrategy with 2+ replicas (keras-team/keras#19246)."""
    if isinstance(strategy, tf.distribute.TPUStrategy) or strategy.num_replicas_in_sync == 1:
        return wanted  # a TPU, or one replica: many steps per host call
    return 1


def compile_for_fit(strategy, model, optimizer, steps_per_execution):
    """The same model and optimizer, ready for Keras' fit (lesson 03_keras_compile_and_fit)."""
    with strategy.scope():
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=steps_per_execution,
        )
    return model


# ---- end of part ----


LIVE = []  # main()'s distributed iterators, never deleted: see the end of this file


def parse_args(argv=None):
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise UsageError(message[0].upper() + message[1:] + " (see --help).")

    p = Parser(prog="train_tpu", description=__doc__.splitlines()[0])
    p.add_argument(
        "--ckpt-dir", help="checkpoint folder (default: checkpoints, or checkpoints-smoke)"
    )
    p.add_argument("--data-dir", default="fashion_mnist_tfrecords", help="TFRecord folder")
    p.add_argument("--replicas", type=int, default=8, help="replicas of the simulated TPU on a CPU")
    p.add_argument("--epochs", type=int, help="passes over the training data (default 5, smoke 3)")
    p.add_argument(
        "--per-replica-batch", type=int, default=64, help="examples per replica and step"
    )
    p.add_argument("--steps-per-call", type=int, default=50, help="steps per tf.function call")
    p.add_argument("--save-every", type=int, help="steps between checkpoints (default: an epoch)")
    p.add_argument("--learning-rate", type=float, default=2e-3, help="Adam's rate at batch 128")
    p.add_argument("--train-examples", type=int, help="use only this many (default: all)")
    p.add_argument("--test-examples", type=int, help="evaluate only this many (default: all)")
    p.add_argument("--seed", type=int, default=0, help="initial weights and data order")
    p.add_argument("--smoke", action="store_true", help="a quick check: 16384 images, 3 epochs")
    p.add_argument("--fit", action="store_true", help="train with compile/fit (no checkpoints)")
    p.add_argument("--no-bf16", dest="bf16", action="store_false", help="float32 everywhere")
    p.add_argument("--cast-on-host", action="store_true", help="send float32 pixels, not uint8")
    p.add_argument("--require-checkpoint", action="store_true", help="refuse to start at step 0")
    args = p.parse_args(argv)
    if args.epochs is None:
        args.epochs = 3 if args.smoke else 5
    if args.smoke and args.train_examples is None:
        args.train_examples = 16384
    args.ckpt_dir = args.ckpt_dir or ("checkpoints-smoke" if args.smoke else "checkpoints")
    for name in (
        "replicas",
        "epochs",
        "per_replica_batch",
        "steps_per_call",
        "save_every",
        "train_examples",
        "test_examples",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {value}.")
    if args.per_replica_batch % 8:
        print(
            f"warning: a per-replica batch of {args.per_replica_batch} is not a multiple of "
            "8; a TPU pads it to one and computes the padding for nothing.",
            file=sys.stderr,
        )
    return args


def writable(folder):
    try:
        tf.io.gfile.makedirs(folder)
        probe = f"{folder}/.write-test-{os.getpid()}"
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (OSError, tf.errors.OpError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(f"Cannot write to {folder} ({reason}).") from None


def main(argv=None, strategy=None):
    """Run the script; `strategy`: one already connected (a notebook holding the TPU)."""
    args = parse_args(argv)
    for folder in (args.data_dir, args.ckpt_dir):
        writable(folder)
    if args.require_checkpoint and not tf.train.latest_checkpoint(args.ckpt_dir):
        raise UsageError(f"No checkpoint in {args.ckpt_dir} to resume from (--require-checkpoint).")
    start = time.perf_counter()
    strategy = strategy or connect(args.replicas)
    replicas = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(args.seed)  # the shuffle's order also depends on this seed
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    counts = write_tfrecords(args.data_dir, {"train": (x_train, y_train), "test": (x_test, y_test)})
    train_examples = min(args.train_examples or sum(counts["train"]), sum(counts["train"]))
    test_examples = min(args.test_examples or sum(counts["test"]), sum(counts["test"]))
    global_batch = args.per_replica_batch * replicas
    steps_per_epoch = train_examples // global_batch
    if steps_per_epoch < 1:
        raise UsageError(
            f"{train_examples} training examples are fewer than one batch of {global_batch}."
        )
    # Lesson 03_keras_compile_and_fit's rule for Adam: the rate grows with the square root of the global batch.
    learning_rate = args.learning_rate * math.sqrt(global_batch / 128)
    model, optimizer = build(
        strategy,
        learning_rate,
        bf16=args.bf16,
        seed=args.seed,
        input_dtype="float32" if args.cast_on_host else "uint8",
    )
    if args.fit:  # whole host calls per epoch (Keras rounds an epoch up to one)
        spe = min(fit_steps_per_execution(strategy, args.steps_per_call), steps_per_epoch)
        steps_per_epoch = steps_per_epoch // spe * spe
    order = [args.seed, global_batch, train_examples]
    manager, step, saved_order = checkpointing(args.ckpt_dir, model, optimizer, order)
    done = 0 if args.fit else restore(manager, step, saved_order, args.require_checkpoint)
    total = args.epochs * steps_per_epoch
    kind = type(strategy).__name__
    print(
        f"{kind}, {replicas} replica(s), global batch {global_batch}, {steps_per_epoch} steps "
        f"per epoch; " + (f"resumed at step {done}" if done else "starting at step 0")
    )

    eval_steps = math.ceil(test_examples / global_batch)
    evaluate = make_evaluate(strategy, model)
    test = strategy.distribute_datasets_from_function(
        lambda ctx: eval_dataset(
            args.data_dir,
            ctx,
            ctx.get_per_replica_batch_size(global_batch),
            eval_steps,
            test_examples,
            args.cast_on_host,
        )
    )
    test_iterator = iter(test)
    LIVE.append(test_iterator)
    kw = dict(examples=train_examples, cast_on_host=args.cast_on_host, seed=args.seed)

    def report(epoch, loss, seconds):
        test_loss, accuracy, n = evaluate(test_iterator, eval_steps)
        print(
            f"epoch {epoch}/{args.epochs}: loss {loss:.4f}, test loss {test_loss:.4f}, "
            f"test accuracy {accuracy:.4f} ({n} images), {seconds:.1f} s",
            flush=True,
        )
        return accuracy

    accuracy = None
    if args.fit:
        one_pipeline = tf.distribute.InputContext(num_replicas_in_sync=1)  # global batches
        train = train_dataset(
            args.data_dir, one_pipeline, global_batch, steps_per_epoch, args.epochs, **kw
        )
        compile_for_fit(strategy, model, optimizer, spe)
        model.make_train_function()  # Keras drops its iterator when fit returns: keep it (LIVE)
        keras_step = model.train_function
        model.train_function = lambda iterator: LIVE.append(iterator) or keras_step(iterator)
        clock = [time.perf_counter()]

        class Report(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                self.accuracy = report(epoch + 1, logs["loss"], time.perf_counter() - clock[0])
                clock[0] = time.perf_counter()

        # One fit call for all epochs: each call would start the data from its beginning.
        reporter = Report()
        model.fit(
            train,
            epochs=args.epochs,
            steps_per_epoch=steps_per_epoch,
            shuffle=False,
            callbacks=[reporter],
            verbose=0,
        )
        accuracy, done = reporter.accuracy, total
        print(f"fit with steps_per_execution={spe}")
    elif done < total:
        train = strategy.distribute_datasets_from_function(
            lambda ctx: train_dataset(
                args.data_dir,
                ctx,
                ctx.get_per_replica_batch_size(global_batch),
                steps_per_epoch,
                args.epochs,
                done,
                **kw,
            )
        )
        iterator = iter(train)
        LIVE.append(iterator)
        train_steps = many_steps(strategy, make_train_step(model, optimizer, global_batch))
        save_every = args.save_every or steps_per_epoch
        losses, t = [], time.perf_counter()
        while done < total:  # each call stops at the next save, epoch end or the end
            n = min(args.steps_per_call, *(e - done % e for e in (save_every, steps_per_epoch)))
            losses.append((float(train_steps(iterator, tf.constant(n))), n))
            done = int(step.assign_add(n))
            if done % save_every == 0 or done % steps_per_epoch == 0:
                save_checkpoint(manager, done)
            if done % steps_per_epoch == 0:
                loss = sum(l * k for l, k in losses) / sum(k for _, k in losses)  # noqa: E741
                accuracy = report(done // steps_per_epoch, loss, time.perf_counter() - t)
                losses, t = [], time.perf_counter()
    if accuracy is None:  # started after the last step: nothing left to train
        accuracy = evaluate(test_iterator, eval_steps)[1]
    saved = "no checkpoints (--fit)" if args.fit else f"checkpoints in {args.ckpt_dir}"
    print(
        f"done: {done} steps, test accuracy {accuracy:.4f} on all {test_examples} test images, "
        f"{time.perf_counter() - start:.0f} s; {saved}"
    )
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except UsageError as err:
        print(f"train_tpu: {err}", file=sys.stderr)
        status = 2
    # Leave at once (LIVE keeps the iterators): everything is saved, and on the simulated TPU
    # deleting a distributed iterator waited here for minutes on tf.data's autotuning threads.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
