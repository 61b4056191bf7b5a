"""Train a small CNN on Fashion-MNIST (or a bag of words on texts) with tf.distribute: on a TPU, on GPUs, or on a simulated TPU.

The TPU Field Guide's reference script: plain TensorFlow, Keras, NumPy and the standard library,
one file to copy. It is written for Kaggle's TPU v5e-8, Colab's v5e-1 and Cloud TPU VMs, but so
far it has run only on CPUs (a simulated TPU of --replicas logical CPU devices, on the three
TensorFlow versions CI tests): no run on TPU hardware is on record yet. On Colab and Kaggle,
install the TPU build of TensorFlow and restart the session first (README, "Running on a real
TPU"); then bring the file in: the lessons' setup cell installs it (python -m train_tpu), or
download train_tpu.py from the repository. Run it twice with the same --ckpt-dir and the second
run continues where the first stopped, even after a SIGKILL (with --fit, after the last
finished epoch). A data folder whose files differ from its info.json is refused before training.
On a TPU of several cores, Keras 3's fit is expected to fail before its first step (see
fit_start_error): TF_USE_LEGACY_KERAS=1 with tf-keras installed runs --fit on tf-keras.

    python train_tpu.py --smoke                  # about a minute on a laptop's CPU
    python train_tpu.py --ckpt-dir gs://bucket/run1 --data-dir gs://bucket/fmnist  # a TPU VM
    python train_tpu.py --fit                    # compile/fit: resumes at its last epoch's end
    python train_tpu.py --dataset fortunes --smoke  # text: which language a fortune is in
    python train_tpu.py --prepare --data-dir gs://bucket/fmnist  # a pod: write the data once

Everything the data set decides (its loading, its examples, the model that fits them) is in one
class of part "data" (Fashion-MNIST) or "text" (fortunes, from Debian's fortunes packages); the
rest serves both. The first run writes the TFRecords itself on one host; a pod's hosts refuse
to start without them (--prepare).

Lessons show its parts (between the "part" markers). Exit status: 0 done, 2 a problem you
must fix (one sentence on stderr).
"""

# ---- part: imports ----
import argparse
import collections
import glob
import json
import math
import os
import re
import sys
import time

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.distribute needs Keras on TensorFlow (not JAX)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up notes

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# Keras 3; or tf-keras (Keras 2) with TF_USE_LEGACY_KERAS=1, as Google's own TensorFlow pod tests
# run: the same variable makes tf.keras tf-keras (install tf-keras of TensorFlow's version).
LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1")
TF_KERAS = f"tf-keras~={'.'.join(tf.__version__.split('.')[:2])}.0"  # pip's name for it
if LEGACY_KERAS:
    try:
        import tf_keras as keras
    except ImportError:
        raise ImportError(
            f"TF_USE_LEGACY_KERAS=1 needs tf-keras of TensorFlow's version: pip install {TF_KERAS}"
        ) from None
else:
    import keras  # noqa: E402
KERAS = f"{'tf-keras' if LEGACY_KERAS else 'Keras'} {keras.__version__}"  # which, for the log

SHARDS = 8  # TFRecord files per split: up to 8 hosts can each read their own files


class UsageError(Exception):
    """Something the user must fix; main() prints its one sentence and exits with status 2."""


# ---- end of part ----
# ---- part: connect ----
TPU_SIGNS = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
_CONNECTED = []  # [(strategy, replicas asked for on a CPU)]: a TPU is initialised once only


def tpu_signs():
    """What shows TPU hardware on this host: environment variables or its device nodes."""
    signs = [f"{name}={os.environ[name]}" for name in TPU_SIGNS if os.environ.get(name)]
    vfio = [p for p in glob.glob("/dev/vfio/*") if os.path.basename(p).isdigit()]  # v5e, v6e
    return signs + sorted(glob.glob("/dev/accel*")) + sorted(vfio)  # accel*: v4 and older


def connect(replicas=8):
    """The strategy for this host: a TPU, GPUs, or on a CPU a simulated TPU of `replicas`."""
    if _CONNECTED:  # a second initialize_tpu_system can lose variables (tensorflow#31961)
        strategy, asked = _CONNECTED[0]
        if asked not in (None, replicas):  # TensorFlow splits the CPU once per process
            raise UsageError(f"This process simulates {asked} replica(s): restart for {replicas}.")
        return strategy
    if keras.backend.backend() != "tensorflow":
        raise UsageError("Keras runs on another backend here; set KERAS_BACKEND=tensorflow.")
    signs, asked = tpu_signs(), None  # asked: a replica count that is ours to choose
    if signs:  # never fall back to the CPU silently on a TPU host
        tpu = os.environ.get("TPU_NAME", "local")  # "local": this VM's; a pod slice's name
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            strategy = tf.distribute.TPUStrategy(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UsageError(
                f"TPU hardware is here ({', '.join(signs)}) but TensorFlow {tf.__version__} "
                f"cannot use it ({reason}): install TensorFlow's TPU build (pip install "
                "tensorflow-tpu; lesson 01_tpu_detection_and_connection gives the version per "
                "platform) and restart."
            ) from None
    elif len(tf.config.list_physical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    elif tf.config.list_physical_devices("GPU"):
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
    elif replicas == 1:
        strategy, asked = tf.distribute.OneDeviceStrategy("/cpu:0"), 1
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
        devices = [d.name for d in tf.config.list_logical_devices("CPU")[:replicas]]
        strategy, asked = tf.distribute.MirroredStrategy(devices), replicas
    _CONNECTED.append((strategy, asked))
    return strategy


def connected():
    """The strategy connect() made in this process, or None before it ran."""
    return _CONNECTED[0][0] if _CONNECTED else None


# ---- end of part ----
# ---- part: fashion_mnist ----
# The images as NumPy arrays, from Debian's files where installed, else from Keras' download.
IDX_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist: works offline
IMAGE_SHAPE = (28, 28, 1)
CLASSES = 10


def load_fashion_mnist():
    """(x_train, y_train), (x_test, y_test): uint8 images [N, 28, 28] and uint8 labels."""
    if not os.path.exists(f"{IDX_DIR}/t10k-labels-idx1-ubyte.gz"):
        try:  # Colab and Kaggle: downloaded once into ~/.keras/datasets
            return keras.datasets.fashion_mnist.load_data()
        except Exception as err:
            raise UsageError(
                f"Fashion-MNIST could not be downloaded ({type(err).__name__}): turn the "
                "internet on, or offline install Debian's dataset-fashion-mnist."
            ) from None
    import gzip  # the offline path's only need

    arrays = []
    for name in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        with gzip.open(f"{IDX_DIR}/{name}-ubyte.gz", "rb") as f:
            raw = f.read()
        # idx: two zero bytes, type 8 (unsigned bytes), the number of sizes, 4 bytes per size
        shape = np.frombuffer(raw, ">u4", count=raw[3], offset=4)
        arrays.append(np.frombuffer(raw, np.uint8, offset=4 + 4 * raw[3]).reshape(shape))
    return (arrays[0], arrays[1]), (arrays[2], arrays[3])


# ---- end of part ----
# ---- part: data ----
# Everything that depends on the data set lives in one class per data set, chosen by name
# (--dataset, DATASETS in part "text"): where it comes from (load), how one example is stored
# (encode) and read back on the host (parse), the blank example that fills the last test
# batch (blank), what one example is on the device (INPUT: shape and dtype) and the model that
# fits it (build_model). The pipeline, the step, fit, the checkpoints and the evaluation never
# look inside an example: to train on your own data, write such a class and add it to DATASETS.
class FashionMNIST:
    """28x28 grey images of 10 kinds of clothing, sent as uint8 pixels, and a small CNN."""

    NAME = "fashion_mnist"
    INPUT = (IMAGE_SHAPE, "uint8")  # one example on the device (float32 with --cast-on-host)
    CLASSES = CLASSES
    EXAMPLES = "images"  # what the log calls them

    @staticmethod
    def load():
        """{"train": (images, labels), "test": (images, labels)} as NumPy arrays."""
        (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
        return {"train": (x_train, y_train), "test": (x_test, y_test)}

    @staticmethod
    def encode(image, label):
        """One tf.train.Example: the raw uint8 pixels and the label."""
        image = tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()]))
        label = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
        features = tf.train.Features(feature={"image": image, "label": label})
        return tf.train.Example(features=features).SerializeToString()

    @staticmethod
    def parse(serialized, cast=False):
        """A batch of serialized examples -> uint8 images [B, 28, 28, 1] and int32 labels; with
        `cast` (--cast-on-host), float32 images, as uint8 into a TPU step is unverified (model)."""
        fixed = tf.io.FixedLenFeature
        spec = {"image": fixed([], tf.string), "label": fixed([], tf.int64)}
        features = tf.io.parse_example(serialized, spec)
        batch = serialized.shape[0] or -1  # static when batched with drop_remainder: keep it
        images = tf.reshape(tf.io.decode_raw(features["image"], tf.uint8), (batch, *IMAGE_SHAPE))
        if cast:
            images = tf.cast(images, tf.float32)
        return images, tf.cast(features["label"], tf.int32)

    @staticmethod
    def blank():
        """The example that fills the last test batch (its weight 0 keeps it out): all black."""
        return FashionMNIST.encode(np.zeros(IMAGE_SHAPE, np.uint8), 0)

    @staticmethod
    def build_model(**model_args):
        """The small CNN of part "model" (build_cnn)."""
        return build_cnn(**model_args)


# The names lessons and helpers use: Fashion-MNIST, the default data set.
example_bytes = FashionMNIST.encode
parse_batch = FashionMNIST.parse


# ---- end of part ----
# ---- part: text ----
# A second data set, so that swapping the data part is shown, not claimed: fortune cookies in
# five languages, labelled by their language. Why these: Debian packages them (the data files
# of the fortune program), so a machine without internet, CI's included, installs them as it
# installs dataset-fashion-mnist, and they are small (55,000 texts, 9 MB with their indexes):
#   apt-get install fortunes fortunes-de fortunes-es fortunes-it fortunes-br
# Text on a TPU: words become int32 ids on the host, when the TFRecords are written (never
# strings on the device), every text the same LENGTH (one static shape), id 0 the padding that
# the model masks out.
FORTUNES_DIR = "/usr/share/games/fortunes"
LANGUAGES = (  # (label, Debian package, its fortune files under FORTUNES_DIR)
    ("English", "fortunes", "*"),  # the files at the top; of the others, "brasil" only
    ("German", "fortunes-de", "de/*"),
    ("Spanish", "fortunes-es", "es/*.fortunes"),  # es/off/: its offensive ones, left out
    ("Italian", "fortunes-it", "it/*"),
    ("Portuguese", "fortunes-br", "brasil"),
)
NOT_PROSE = {"ascii-art", "asciiart", "banner", "translate-me", "translations"}  # pictures, mixes
VOCABULARY = 8192  # ids: 0 padding, 1 a word not among the training split's 8,190 most frequent
LENGTH = 72  # words per text, a multiple of 8 that covers 95% of them: longer ones are cut
TEST_SHARE = 0.2


def fortune_files(pattern):
    """The fortune files a pattern names: not the .dat index beside each, nor a folder, nor a
    link (fortunes-it links its files into the top folder too)."""
    return [
        path
        for path in sorted(glob.glob(f"{FORTUNES_DIR}/{pattern}"))
        if os.path.isfile(path)
        and not os.path.islink(path)
        and not path.endswith((".dat", ".u8"))
        and os.path.basename(path) not in NOT_PROSE
        and not (pattern == "*" and os.path.basename(path) == "brasil")  # Portuguese, at the top
    ]


def words(text):
    return re.findall(r"\w+", text.lower())  # letters and digits, accents included


def load_fortunes():
    """(texts, labels): every fortune of LANGUAGES once, in file order (a text found under two
    languages is left out), or a UsageError that says what to install."""
    found = {}  # text -> the labels it has
    for label, (_, package, pattern) in enumerate(LANGUAGES):
        paths = fortune_files(pattern)
        if not paths:
            packages = " ".join(p for _, p, _ in LANGUAGES)
            raise UsageError(
                f"The fortunes data set needs Debian's {package} (nothing in {FORTUNES_DIR}"
                f"/{pattern}): install them all with apt-get install {packages}."
            )
        for path in paths:
            with open(path, encoding="utf-8", errors="replace") as f:
                for text in re.split(r"^%\s*$", f.read(), flags=re.M):  # "%" ends a fortune
                    if words(text):  # a text of no word would be all padding
                        found.setdefault(text.strip(), set()).add(label)
    texts = [text for text, labels in found.items() if len(labels) == 1]
    return texts, np.array([min(found[text]) for text in texts], np.uint8)


def to_ids(texts, vocabulary):
    """int32 ids [N, LENGTH]: each text's words, cut at LENGTH, then 0s (padding)."""
    ids = np.zeros((len(texts), LENGTH), np.int32)
    for row, text in enumerate(texts):
        found = [vocabulary.get(word, 1) for word in words(text)[:LENGTH]]
        ids[row, : len(found)] = found
    return ids


class Fortunes:
    """Which language a fortune cookie is in: words as int32 ids, and an average of their
    embeddings (a bag of words: enough to tell languages apart)."""

    NAME = "fortunes"
    INPUT = ((LENGTH,), "int32")  # word ids, 0 = padding
    CLASSES = len(LANGUAGES)
    EXAMPLES = "texts"

    @staticmethod
    def load():
        """{"train": (ids, labels), "test": (ids, labels)}: the texts shuffled (the files come
        sorted by language), a fifth for testing, tokenised with the training split's words."""
        texts, labels = load_fortunes()
        order = np.random.default_rng(0).permutation(len(texts))
        texts, labels = [texts[i] for i in order], labels[order]
        cut = len(texts) - round(len(texts) * TEST_SHARE)
        vocabulary = Fortunes.vocabulary(texts[:cut])
        x_train, x_test = to_ids(texts[:cut], vocabulary), to_ids(texts[cut:], vocabulary)
        lengths = np.array([len(words(text)) for text in texts[:cut]])
        most = np.bincount(labels)  # texts per language
        print(
            f"fortunes: {cut} training and {len(texts) - cut} test texts in {len(LANGUAGES)} "
            f"languages ({LANGUAGES[most.argmax()][0]} {most.max() / len(labels):.1%}); {LENGTH} "
            f"words each: {np.mean(lengths > LENGTH):.1%} cut, {np.mean(x_train == 0):.1%} of "
            "the ids padding"
        )
        return {"train": (x_train, labels[:cut]), "test": (x_test, labels[cut:])}

    @staticmethod
    def vocabulary(texts):
        """{word: id} of the VOCABULARY - 2 most frequent words of these texts, from id 2 on."""
        counts = collections.Counter(word for text in texts for word in words(text))
        return {word: i + 2 for i, (word, _) in enumerate(counts.most_common(VOCABULARY - 2))}

    @staticmethod
    def encode(ids, label):
        """One tf.train.Example: the LENGTH word ids and the label."""
        ids = tf.train.Feature(int64_list=tf.train.Int64List(value=ids.tolist()))
        label = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
        features = tf.train.Features(feature={"ids": ids, "label": label})
        return tf.train.Example(features=features).SerializeToString()

    @staticmethod
    def parse(serialized, cast=False):
        """A batch of serialized examples -> int32 ids [B, LENGTH] and int32 labels (`cast`:
        nothing to cast, ids stay integers)."""
        fixed = tf.io.FixedLenFeature
        spec = {"ids": fixed([LENGTH], tf.int64), "label": fixed([], tf.int64)}
        features = tf.io.parse_example(serialized, spec)
        batch = serialized.shape[0] or -1  # static when batched with drop_remainder: keep it
        ids = tf.reshape(tf.cast(features["ids"], tf.int32), (batch, LENGTH))
        return ids, tf.cast(features["label"], tf.int32)

    @staticmethod
    def blank():
        """The example that fills the last test batch: one unknown word, not none (the average
        over no word is 0/0, a NaN that even a weight of 0 keeps)."""
        return Fortunes.encode(np.eye(1, LENGTH, dtype=np.int32)[0], 0)

    @staticmethod
    def build_model(bf16=True, seed=0, cast=False):
        """Word ids -> embeddings -> their average over the words (mask_zero: padding left out)
        -> a hidden layer -> logits. Seeded and mixed_bfloat16 per layer as the CNN is, float32
        logits; widths of 128, a TPU core's matrix unit."""
        policy = "mixed_bfloat16" if bf16 else "float32"
        embed = keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)
        init = [keras.initializers.GlorotUniform(seed + i) for i in (1, 2)]  # the same every run
        ids = keras.Input((LENGTH,), dtype="int32", name="ids")
        x = keras.layers.Embedding(
            VOCABULARY, 128, mask_zero=True, embeddings_initializer=embed, dtype=policy
        )(ids)
        x = keras.layers.GlobalAveragePooling1D(dtype=policy)(x)  # over the unmasked words
        x = keras.layers.Dense(128, activation="relu", kernel_initializer=init[0], dtype=policy)(x)
        logits = keras.layers.Dense(len(LANGUAGES), kernel_initializer=init[1], dtype="float32")(x)
        return keras.Model(ids, logits, name="words")


DATASETS = {"fashion_mnist": FashionMNIST, "fortunes": Fortunes}  # --dataset's choices


# ---- end of part ----
# ---- part: tfrecords ----
def write_tfrecords(folder, splits, dataset=FashionMNIST):
    """Write {"train": (x, y), "test": (x, y)} once as SHARDS files per split, each example
    encoded by the data set; return counts. A kill leaves no half file under a name that is
    read: each file is renamed when complete, and info.json, which vouches for them all (their
    counts and sizes, and the data set's name), comes last."""
    info = read_info(folder, dataset)
    if info:
        return info
    tf.io.gfile.makedirs(folder)
    info = {split: [] for split in splits}
    info["bytes"] = {}
    for split, (x, y) in splits.items():
        for shard, rows in enumerate(np.array_split(np.arange(len(x)), SHARDS)):
            name = f"{split}-{shard:05d}-of-{SHARDS:05d}.tfrecord"
            partial = f"{folder}/{name}.tmp-{os.getpid()}"  # its own name: writers never mix
            with tf.io.TFRecordWriter(partial) as writer:
                for i in rows:
                    writer.write(dataset.encode(x[i], y[i]))
            info["bytes"][name] = tf.io.gfile.stat(partial).length
            tf.io.gfile.rename(partial, f"{folder}/{name}", overwrite=True)  # whole, or absent
            info[split].append(len(rows))
    info["dataset"] = dataset.NAME
    partial = f"{folder}/info.json.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(partial, "w") as f:
        json.dump(info, f)
    tf.io.gfile.rename(partial, f"{folder}/info.json", overwrite=True)
    return info


def prepare(folder, dataset):
    """The data set loaded, encoded on this host and written to `folder` (python train_tpu.py
    --prepare; on one host also the first run); its counts. Written already: only checked."""
    return read_info(folder, dataset) or write_tfrecords(folder, dataset.load(), dataset)


def read_info(folder, dataset=None):
    """What info.json records, once every file matches it; None if there is none to trust (no
    info.json, or one from before sizes were recorded: write the folder again). A missing,
    cut-short or unlisted file is an error: training on part of the data would look fine; so
    is another data set's folder than `dataset`'s."""
    if not tf.io.gfile.exists(f"{folder}/info.json"):
        return None
    with tf.io.gfile.GFile(f"{folder}/info.json") as f:
        info = json.load(f)
    if "bytes" not in info:
        return None
    found = {
        os.path.basename(path): tf.io.gfile.stat(path).length
        for path in tf.io.gfile.glob(f"{folder}/*.tfrecord")
    }
    again = "copy the folder again, or delete it and the script writes it anew"
    for name, size in info["bytes"].items():
        if name not in found:
            raise UsageError(f"{folder}/{name} is missing (info.json lists it): {again}.")
        if found[name] != size:
            raise UsageError(
                f"{folder}/{name} holds {found[name]} bytes where info.json says {size} (cut "
                f"short or changed): {again}."
            )
    for name in sorted(set(found) - set(info["bytes"])):
        raise UsageError(f"{folder}/{name} is not listed in info.json: move it elsewhere.")
    held = info.get("dataset", FashionMNIST.NAME)  # written before there was a choice
    if dataset and held != dataset.NAME:
        raise UsageError(
            f"{folder} holds {held}, not {dataset.NAME}: pass --dataset {held}, or another "
            "--data-dir."
        )
    return info


# ---- end of part ----
# ---- part: pipeline ----
def host_files(folder, split, ctx):
    """This host's share of a split's files (every file on one host)."""
    files = sorted(tf.io.gfile.glob(f"{folder}/{split}-*-of-*.tfrecord"))  # never a .tmp
    if len(files) % ctx.num_input_pipelines:
        raise UsageError(f"{len(files)} {split} files cannot be shared by the hosts evenly.")
    return files[ctx.input_pipeline_id :: ctx.num_input_pipelines]


def read_records(files):
    """The records of these files, several read at once (the Cloud TPU performance guide's first
    fix for a model waiting on its input; lesson 06_input_pipelines), in an order the files
    alone fix: one record from each in turn, which resuming relies on (with_options keeps the
    order deterministic)."""
    return tf.data.TFRecordDataset(files, num_parallel_reads=len(files))


def with_options(ds):
    options = tf.data.Options()
    # Each host reads its own files already (host_files); OFF says so. Keras' fit hands the
    # dataset to experimental_distribute_dataset, which would otherwise shard it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = True  # the same order in every run: what resuming relies on
    return ds.with_options(options)


def train_dataset(
    folder, ctx, batch, steps_per_epoch, epochs, start_step=0, seed=0, examples=None, cast=False,
    dataset=FashionMNIST,
):  # fmt: skip
    """This host's batches (`ctx`: a tf.distribute.InputContext) from step `start_step` on.
    Epoch e shuffles with the seed (seed, e), so a run restarted at step k skips the batches
    its epoch already trained and sees exactly what an uninterrupted run would (tf.distribute's
    iterators cannot be checkpointed; the step can). `examples`: use only that many. The data
    set parses the records (part "data"): the rest knows nothing of what an example holds."""
    files = host_files(folder, "train", ctx)
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines  # batches one step takes here
    first_epoch, done = divmod(start_step, steps_per_epoch)
    ds = None
    for epoch in range(first_epoch, epochs):
        records = read_records(files)
        if examples:
            records = records.take(examples // ctx.num_input_pipelines)
        # The same order in every iterator made of it: Keras' fit under a strategy draws a
        # batch from one to build the model, then trains from a second.
        records = records.shuffle(10_000, seed=seed * 1000 + epoch, reshuffle_each_iteration=False)
        records = records.batch(batch, drop_remainder=True)  # static shapes: one compilation
        records = records.take(steps_per_epoch * per_step)
        ds = records if ds is None else ds.concatenate(records)
    ds = ds.skip(done * per_step)  # the batches the checkpoint says were trained
    ds = ds.map(lambda r: dataset.parse(r, cast), num_parallel_calls=tf.data.AUTOTUNE)
    return with_options(ds.prefetch(tf.data.AUTOTUNE))


def eval_dataset(folder, ctx, batch, steps, examples=None, cast=False, dataset=FashionMNIST):
    """Every test example once per `steps` batches, over and over. A TPU runs one static shape:
    the last batch is filled up with the data set's blank example, whose weight 0 keeps it out
    of it all."""
    records = read_records(host_files(folder, "test", ctx))
    if examples:
        records = records.take(examples // ctx.num_input_pipelines)
    padding = tf.data.Dataset.from_tensors((dataset.blank(), 0.0)).repeat()
    per_step = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    ds = records.map(lambda r: (r, 1.0)).concatenate(padding).take(steps * per_step * batch)
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.map(lambda r, w: (*dataset.parse(r, cast), w), tf.data.AUTOTUNE)
    return with_options(ds.cache().repeat().prefetch(tf.data.AUTOTUNE))


def input_pipelines(strategy):
    """How many hosts feed the replicas, each reading its own files: 1 but on a pod slice (or
    a cluster of workers), where no host may write the data alone (python train_tpu.py
    --prepare writes it once, beforehand)."""
    found = []

    def probe(ctx):  # what the strategy tells each host's pipeline
        found.append(ctx.num_input_pipelines)
        return tf.data.Dataset.range(1)

    strategy.distribute_datasets_from_function(probe)  # nothing read: no iterator made
    return found[0]


# ---- end of part ----
# ---- part: model ----
def build_cnn(bf16=True, seed=0, cast=False):
    """A small CNN from pixels to logits; build it in strategy.scope().

    mixed_bfloat16 (bfloat16 math, float32 variables) is set per layer, so nothing global
    changes; the float32 last layer keeps the logits and the loss precise. uint8 pixels (a
    quarter of float32's bytes to send) are scaled on the device. TensorFlow lists DT_UINT8
    among the types a TPU takes (kTpuAllTypes, tensorflow/core/tpu/tpu_defs.h) and XLA runs
    u8 on TPUs (jax-ml/jax#4011), though TensorFlow's TPU team said no in 2020
    (tensorflow/tensorflow#37426): unverified on hardware; if it fails, pass --cast-on-host.
    """
    policy = "mixed_bfloat16" if bf16 else "float32"
    init = [keras.initializers.GlorotUniform(seed + i) for i in range(4)]  # the same every run
    dtype = "float32" if cast else "uint8"
    inputs = keras.Input(IMAGE_SHAPE, dtype=dtype, name="pixels")
    x = keras.layers.Rescaling(1 / 255, dtype=policy)(inputs)
    for i, filters in enumerate((32, 64)):
        x = keras.layers.Conv2D(
            filters, 3, padding="same", activation="relu", kernel_initializer=init[i], dtype=policy
        )(x)
        x = keras.layers.MaxPooling2D(dtype=policy)(x)
    x = keras.layers.Flatten(dtype=policy)(x)
    x = keras.layers.Dense(128, activation="relu", kernel_initializer=init[2], dtype=policy)(x)
    logits = keras.layers.Dense(CLASSES, kernel_initializer=init[3], dtype="float32")(x)
    return keras.Model(inputs, logits, name="cnn")


build_model = build_cnn  # the name the lessons use: Fashion-MNIST's model


# The model that proofs of equality build (in the lessons and the self-test): float32,
# so that two runs can agree to the last bit. A layer added to the model that draws random
# numbers in training (Dropout) must be switched off here too; a test fails until it is.
EXACT = {"bf16": False}


def build(strategy, learning_rate, dataset=None, **model_args):
    """The data set's model (its build_model; None: the CNN above) and Adam, with Adam's slot
    variables created now, in the scope: made lazily inside strategy.run, they fail on 2+
    replicas ("You must feed a value for placeholder tensor")."""
    with strategy.scope():
        model = (dataset.build_model if dataset else build_cnn)(**model_args)
        optimizer = keras.optimizers.Adam(learning_rate)
        optimizer.build(model.trainable_variables)
    return model, optimizer


# ---- end of part ----
# ---- part: step ----
def make_train_step(model, optimizer, global_batch):
    """One replica's step. The optimizer sums the replicas' gradients, so each replica's loss is
    its examples' losses divided by the GLOBAL batch: a per-replica mean trains R times too fast."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return replica_step


def many_steps(strategy, replica_step, shape=()):
    """steps(iterator, n): n steps in one call (one host round trip), returning the mean over the
    steps of replica_step's value (of this shape) summed over the replicas, reduced inside the
    loop into one running total. Pass n as a tensor, or each new number traces again."""

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
        weighted = [weights * loss_fn(labels, logits), weights * hits, weights]
        return tf.stack([tf.reduce_sum(w) for w in weighted])

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
    """Checkpoint manager of the model, Adam, the step and the data order (seed, global batch,
    examples) that makes the step the data position. A save writes its files, then renames the
    small file "checkpoint" that names the latest: killed before, the previous save stays the
    latest, and the steps since it are trained again from its state, never twice. `state`: the
    model's non-trainable variables, named again: Keras 3 leaves a Dropout's seed state out of
    the model's checkpoint, and a resumed run would draw the first masks again."""
    step = tf.Variable(0, dtype=tf.int64, name="step")
    saved_order = tf.Variable(order, dtype=tf.int64, name="order")
    state = list(model.non_trainable_variables)
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=optimizer, step=step, order=saved_order, state=state
    )
    return tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3), step, saved_order


def restore(manager, step, saved_order, require=False):
    """Restore the latest committed save, return its step; without one 0 (`require`: an error)."""
    wanted, latest = saved_order.numpy().tolist(), manager.latest_checkpoint
    if latest is None and require:
        raise UsageError(
            f"No checkpoint in {manager.directory} to resume from (--require-checkpoint)."
        )
    if latest is None:
        return 0
    try:
        manager.checkpoint.restore(latest).assert_consumed()
    except AssertionError as err:  # e.g. saved before `state` existed, or by another model
        missing = ", ".join(re.findall(r"path=([^,\s]+)", str(err))) or str(err)[:160]
        raise UsageError(
            f"{latest} does not hold everything this model needs ({missing}): resume with "
            "the code that wrote it or use a new --ckpt-dir."
        ) from None
    if saved_order.numpy().tolist() != wanted:
        raise UsageError(
            f"{latest} was trained with another seed, batch or data size "
            f"{saved_order.numpy().tolist()}: resume with its settings or use a new --ckpt-dir."
        )
    return int(step.numpy())


def fit_backup_saved(folder):
    """Whether `folder` holds a fit backup: Keras 3's weights file, or tf-keras' checkpoint."""
    if LEGACY_KERAS:
        return tf.train.latest_checkpoint(f"{folder}/chief") is not None
    return tf.io.gfile.exists(f"{folder}/latest.weights.h5")


def fit_backup(folder, model, steps_per_epoch, order, require=False):
    """fit's checkpoints: Keras' BackupAndRestore under `folder`, restored now, so that the data
    can start where training does. Returns (callbacks for fit, steps already trained). It saves
    at each epoch's end (a save every N batches would replay the unfinished epoch from its first
    batch), keeps the previous save (a kill mid-write leaves one intact) and keeps the last (a
    finished job run again trains nothing). The weights and the epoch are two files written one
    after the other: a check refuses a pair that disagrees, rather than train an epoch twice.
    Keras' backup leaves a Dropout's seed state out: the model's non-trainable variables are
    saved beside it under state/, by step, just before it (the last two kept)."""
    keep_previous = {} if LEGACY_KERAS else {"double_checkpoint": True}  # tf-keras: its own
    backup = keras.callbacks.BackupAndRestore(
        folder, save_freq="epoch", delete_checkpoint=False, **keep_previous
    )
    saved_order = f"{folder}/order.json"  # (seed, global batch, examples, steps per epoch)
    if tf.io.gfile.exists(saved_order):
        with tf.io.gfile.GFile(saved_order) as f:
            if json.load(f) != order:
                raise UsageError(
                    f"{folder} was trained with another seed, batch or data size: resume with "
                    "its settings or use a new --ckpt-dir."
                )
    backup.set_model(model)
    try:
        backup.on_train_begin()  # fit calls it again: a second restore of the same files
    except OSError as err:
        raise UsageError(f"The backup in {folder} cannot be read ({err}): delete it.") from None
    done = int(model.optimizer.iterations.numpy())
    if done == 0 and require:
        raise UsageError(f"No backup in {folder} to resume from (--require-checkpoint).")
    state = tf.train.Checkpoint(state=list(model.non_trainable_variables))
    if done:
        if not tf.io.gfile.exists(f"{folder}/state/step-{done}.index"):
            raise UsageError(
                f"The backup in {folder} holds step {done} but no state/step-{done} beside it "
                "(the seeds of its random layers): delete the backup to start over."
            )
        state.read(f"{folder}/state/step-{done}").assert_consumed()
    tf.io.gfile.makedirs(folder)
    with tf.io.gfile.GFile(saved_order, "w") as f:
        json.dump(order, f)

    class SameStep(keras.callbacks.Callback):  # fit's first epoch must start at step `done`
        def on_train_begin(self, logs=None):
            self.first = True

        def on_epoch_begin(self, epoch, logs=None):
            if self.first and epoch * steps_per_epoch != done:
                raise UsageError(
                    f"The backup in {folder} holds the weights of step {done} but resumes at "
                    f"epoch {epoch} of {steps_per_epoch} steps: delete it to start over."
                )
            self.first = False

    class SaveState(keras.callbacks.Callback):  # before the backup's save of the same epoch
        def on_epoch_end(self, epoch, logs=None):
            step = (epoch + 1) * steps_per_epoch
            state.write(f"{folder}/state/step-{step}")
            for old in tf.io.gfile.glob(f"{folder}/state/step-{step - 2 * steps_per_epoch}.*"):
                tf.io.gfile.remove(old)

    return [SaveState(), backup, SameStep()], done


# ---- end of part ----
# ---- part: fit ----
def fit_steps_per_execution(strategy, wanted):
    """More than 1 fails under MirroredStrategy with 2+ replicas (keras-team/keras#19246)."""
    if isinstance(strategy, tf.distribute.TPUStrategy) or strategy.num_replicas_in_sync == 1:
        return wanted  # a TPU, or one replica: many steps per host call
    return 1


def epoch_plan(batches, wanted):
    """(steps per call, steps per epoch) for fit, which runs whole calls only: the most steps per
    call, up to `wanted`, whose calls leave under 1% of a pass's `batches` out. Rounding the
    epoch down to calls of `wanted` can drop far more: 58 batches at 32 per call train 32."""
    for per_call in range(min(wanted, batches), 1, -1):
        if batches % per_call < batches / 100:
            return per_call, batches - batches % per_call
    return 1, batches


def fit_start_error(err, strategy):
    """What to do when Keras 3's fit fails before its first step on a TPU of several cores.
    Keras 3 averages fit's first batch over the replicas to build the model, integers too;
    TPUStrategy averages by `*= 1 / n`, which fails for an integer tensor (TypeError: "Cannot
    convert 0.125 to EagerTensor of dtype uint8"). Expected from both sources (tests run each
    half on a CPU), unverified on a TPU; tf-keras has no such step. None: another error."""
    if LEGACY_KERAS or "to EagerTensor of dtype" not in str(err):
        return None
    return UsageError(
        f"Keras 3's fit averaged the first batch's integer pixels or labels over the "
        f"{strategy.num_replicas_in_sync} replicas, which {type(strategy).__name__} cannot do "
        f"({err}): run with TF_USE_LEGACY_KERAS=1 (pip install {TF_KERAS}), or "
        "without --fit."
    )


def compile_for_fit(strategy, model, optimizer, steps_per_execution):
    """The same model and optimizer, ready for Keras' fit (lesson 03_keras_compile_and_fit)."""
    with strategy.scope():
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=optimizer, loss=loss, steps_per_execution=steps_per_execution)
    return model


# ---- end of part ----


# ---- part: simulation ----
# Only on the simulated TPU (a CPU split into --replicas devices): dropping a distributed
# iterator there waits for tf.data's autotuning threads, one per replica, which sleep out an
# optimisation period that doubles up to 60 s as the iterator ages (RootDataset::Iterator's
# destructor; Keras' fit drops its iterator when it returns: 13 s after a --smoke run). So there
# main() keeps its iterators and leaves with os._exit. On a TPU or GPUs this part does nothing.
KEPT = []  # the simulated TPU's iterators, until the process ends


def simulated():
    """True on the simulated TPU: connect() split the CPU into devices."""
    return bool(_CONNECTED) and _CONNECTED[0][1] is not None


def keep(iterator):
    if simulated():
        KEPT.append(iterator)
    return iterator


def keep_fits_iterator(model):
    if simulated():
        model.make_train_function()
        step = model.train_function

        def train_function(iterator):  # Keras' own, keeping each iterator it is given
            KEPT.append(iterator)
            return step(iterator)

        model.train_function = train_function


def leave(status):
    """End the process with `status`: on the simulated TPU at once, everything being saved."""
    if simulated():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


# ---- end of part ----


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def parse_args(argv=None):
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise UsageError(message[0].upper() + message[1:] + " (see --help).")

    p = Parser(prog="train_tpu", description=__doc__.splitlines()[0])
    p.add_argument("--ckpt-dir", help="checkpoint folder (default checkpoints[-smoke])")
    p.add_argument(
        "--dataset", choices=sorted(DATASETS), default="fashion_mnist", help="what to train on"
    )
    p.add_argument("--data-dir", help="TFRecord folder (default DATASET_tfrecords)")
    p.add_argument(
        "--prepare", action="store_true", help="write the TFRecords and stop (a pod: once, first)"
    )
    p.add_argument("--replicas", type=positive, default=8, help="the simulated TPU's, on a CPU")
    p.add_argument("--epochs", type=positive, help="passes over the data (default 5, smoke 3)")
    p.add_argument("--per-replica-batch", type=positive, default=64, help="examples per replica")
    p.add_argument("--steps-per-call", type=positive, default=50, help="steps per tf.function call")
    p.add_argument("--save-every", type=positive, help="steps between saves (default an epoch)")
    p.add_argument("--learning-rate", type=float, default=2e-3, help="Adam's rate at batch 128")
    p.add_argument("--train-examples", type=positive, help="use only this many (default: all)")
    p.add_argument("--test-examples", type=positive, help="evaluate only this many")
    p.add_argument("--seed", type=int, default=0, help="initial weights and data order")
    p.add_argument("--smoke", action="store_true", help="a quick check: 16384 examples, 3 epochs")
    p.add_argument(
        "--fit", action="store_true", help="train with compile/fit (backup: CKPT_DIR/fit)"
    )
    p.add_argument("--no-bf16", dest="bf16", action="store_false", help="float32 everywhere")
    p.add_argument("--cast-on-host", action="store_true", help="send float32 pixels, not uint8")
    p.add_argument("--require-checkpoint", action="store_true", help="refuse to start at step 0")
    args = p.parse_args(argv)
    args.epochs = args.epochs or (3 if args.smoke else 5)
    args.train_examples = args.train_examples or (16384 if args.smoke else None)
    args.ckpt_dir = args.ckpt_dir or ("checkpoints-smoke" if args.smoke else "checkpoints")
    args.data_dir = args.data_dir or f"{args.dataset}_tfrecords"
    if args.per_replica_batch % 8:  # a TPU would pad it and compute the padding for nothing
        print("warning: --per-replica-batch is not a multiple of 8.", file=sys.stderr)
    return args


def main(argv=None, strategy=None):
    """Run the script; `strategy`: one already connected (a notebook holding the TPU)."""
    args = parse_args(argv)
    dataset = DATASETS[args.dataset]
    folders = [args.data_dir] + ([] if args.prepare else [args.ckpt_dir])
    for folder in folders:  # fail now, not at the first save
        try:
            tf.io.gfile.makedirs(folder)
            probe = f"{folder}/.write-test-{os.getpid()}"
            with tf.io.gfile.GFile(probe, "w") as f:
                f.write("ok")
            tf.io.gfile.remove(probe)
        except (OSError, tf.errors.OpError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UsageError(f"Cannot write to {folder} ({reason}).") from None
    if args.prepare:  # no TPU needed: the data is encoded on this host
        counts = prepare(args.data_dir, dataset)
        train, test = sum(counts["train"]), sum(counts["test"])
        print(f"{args.data_dir}: {train} training and {test} test examples of {dataset.NAME}")
        return 0
    backup_dir = f"{args.ckpt_dir}/fit"  # --fit's backup: Keras' files, beside the loop's
    saved = fit_backup_saved(backup_dir) if args.fit else tf.train.latest_checkpoint(args.ckpt_dir)
    if args.require_checkpoint and not saved:  # fail now, before the TPU is initialised
        where = backup_dir if args.fit else args.ckpt_dir
        raise UsageError(f"No checkpoint in {where} to resume from (--require-checkpoint).")
    counts = read_info(args.data_dir, dataset)  # damaged data (or another set's) fails now too
    start = time.perf_counter()
    strategy = strategy or connect(args.replicas)
    keras.utils.set_random_seed(args.seed)  # the shuffle's order also depends on this seed
    if counts is None and (hosts := input_pipelines(strategy)) > 1:  # each would write it
        raise UsageError(
            f"No TFRecords in {args.data_dir}, and {hosts} hosts must not each write them: run "
            f"python train_tpu.py --prepare --dataset {dataset.NAME} --data-dir {args.data_dir} "
            "once, then train."
        )
    if counts is None:  # the first run on one host: write the TFRecords
        counts = prepare(args.data_dir, dataset)
    train_examples = min(args.train_examples or sum(counts["train"]), sum(counts["train"]))
    test_examples = min(args.test_examples or sum(counts["test"]), sum(counts["test"]))
    global_batch = args.per_replica_batch * strategy.num_replicas_in_sync
    batches = train_examples // global_batch  # whole batches per pass
    if batches < 1:
        raise UsageError(f"{train_examples} training examples make no batch of {global_batch}.")
    steps_per_epoch = batches  # the custom loop ends a pass with a shorter call if need be
    if args.fit:  # fit runs whole host calls (it would round an epoch up to one more)
        wanted = fit_steps_per_execution(strategy, args.steps_per_call)
        per_call, steps_per_epoch = epoch_plan(batches, wanted)
    # Lesson 03_keras_compile_and_fit's rule for Adam: the rate grows with the square root of
    # the global batch.
    learning_rate = args.learning_rate * math.sqrt(global_batch / 128)
    model, optimizer = build(
        strategy, learning_rate, dataset, bf16=args.bf16, seed=args.seed, cast=args.cast_on_host
    )
    order = [args.seed, global_batch, train_examples]
    if args.fit:
        compile_for_fit(strategy, model, optimizer, per_call)
        order.append(steps_per_epoch)
        callbacks, done = fit_backup(
            backup_dir, model, steps_per_epoch, order, args.require_checkpoint
        )
    else:
        manager, step, saved_order = checkpointing(args.ckpt_dir, model, optimizer, order)
        done = restore(manager, step, saved_order, args.require_checkpoint)
    total = args.epochs * steps_per_epoch
    resumed = f"resumed at step {done}" if done else "starting at step 0"
    share = ""  # said only when an epoch leaves batches out (fit's whole calls: under 1%)
    if steps_per_epoch < batches:
        share = f" ({steps_per_epoch / batches:.1%} of {batches} batches)"
    print(
        f"{type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s), {KERAS}, "
        f"global batch {global_batch}, {steps_per_epoch} steps per epoch{share}; {resumed}"
    )

    def distributed(make_dataset, *more, **kw):  # each host builds its share of global batches
        def per_host(ctx):
            batch = ctx.get_per_replica_batch_size(global_batch)
            return make_dataset(args.data_dir, ctx, batch, *more, **kw)

        return strategy.distribute_datasets_from_function(per_host)

    eval_steps = math.ceil(test_examples / global_batch)
    test_iterator = keep(
        iter(distributed(eval_dataset, eval_steps, test_examples, args.cast_on_host, dataset))
    )
    evaluate = make_evaluate(strategy, model)
    accuracy, epoch_start = None, time.perf_counter()

    def report(epoch, loss, steps):  # steps: fewer than an epoch's after a restart mid-epoch
        nonlocal accuracy, epoch_start
        seconds = time.perf_counter() - epoch_start
        test_loss, accuracy, n = evaluate(test_iterator, eval_steps)
        over = "" if steps == steps_per_epoch else f" (its last {steps} steps: resumed)"
        print(
            f"epoch {epoch}/{args.epochs}: loss {loss:.4f}{over}, test loss {test_loss:.4f}, "
            f"test accuracy {accuracy:.4f} ({n} {dataset.EXAMPLES}), {seconds:.1f} s",
            flush=True,
        )
        epoch_start = time.perf_counter()

    kw = dict(examples=train_examples, cast=args.cast_on_host, seed=args.seed, dataset=dataset)
    if args.fit and done < total:
        # Every host reads its own files, from the step the backup restored (fit restarts
        # at that epoch): an uninterrupted run's data, batch for batch.
        data = distributed(train_dataset, steps_per_epoch, args.epochs, done, **kw)
        keep_fits_iterator(model)
        log = keras.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: report(epoch + 1, logs["loss"], steps_per_epoch)
        )
        # One fit call for all epochs: each call would start the data from its beginning.
        epoch_start = time.perf_counter()
        try:
            model.fit(
                data,
                epochs=args.epochs,
                steps_per_epoch=steps_per_epoch,
                shuffle=False,  # the pipeline's own seeded order (Keras would warn)
                callbacks=[*callbacks, log],  # the backup first: on disk before the epoch's line
                verbose=0,
            )
        except TypeError as err:
            if not (problem := fit_start_error(err, strategy)):
                raise
            raise problem from None
        done = total
        print(f"fit with steps_per_execution={per_call}")
    elif done < total:
        train_iterator = keep(
            iter(distributed(train_dataset, steps_per_epoch, args.epochs, done, **kw))
        )
        train_steps = many_steps(strategy, make_train_step(model, optimizer, global_batch))
        save_every = args.save_every or steps_per_epoch
        loss_sum, steps = 0.0, 0  # this epoch's, since its start or the restart
        epoch_start = time.perf_counter()
        while done < total:  # each call stops at the next save, epoch end or the end
            n = min(args.steps_per_call, *(e - done % e for e in (save_every, steps_per_epoch)))
            loss_sum += float(train_steps(train_iterator, tf.constant(n))) * n
            steps += n
            done = int(step.assign_add(n))
            if done % save_every == 0 or done % steps_per_epoch == 0:
                manager.save(checkpoint_number=done)
            if done % steps_per_epoch == 0:
                report(done // steps_per_epoch, loss_sum / steps, steps)
                loss_sum, steps = 0.0, 0
    if accuracy is None:  # started after the last step: nothing left to train
        accuracy = evaluate(test_iterator, eval_steps)[1]
    saved = f"a backup in {backup_dir}" if args.fit else f"checkpoints in {args.ckpt_dir}"
    print(
        f"done: {done} steps, test accuracy {accuracy:.4f} on all {test_examples} test "
        f"{dataset.EXAMPLES}, "
        f"{time.perf_counter() - start:.0f} s; {saved}"
    )
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except UsageError as err:
        print(f"train_tpu: {err}", file=sys.stderr)
        status = 2
    leave(status)
