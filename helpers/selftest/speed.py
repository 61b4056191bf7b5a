"""The speed checks of the TPU self-test (notebook 00_tpu_self_test): input pipeline throughput (06), the
matmul rate against the chip's published peak (05), and the classic Keras recipe against the
collection's recipe (03 and 06) on the same model.

On a CPU, speed says nothing about a TPU, so the rate and recipe checks report ``info`` there:
measured, no verdict. As in :mod:`helpers.selftest.correctness`, each check's ``judge_*`` function
decides the status and writes the summary from the evidence alone. TensorFlow and Keras are
imported inside the checks, as in :mod:`helpers.selftest.correctness`.
"""

from __future__ import annotations

import math

import numpy as np

from helpers import data, fitting, models, pipelines, timing
from helpers.selftest.base import Context, Outcome, judged
from helpers.selftest.environment import tpu_generation
from helpers.tpu_facts import BATCH_FOR_MXU as PER_REPLICA_BATCH

__all__ = [
    "PEAK_FRACTION_TO_PASS",
    "input_pipeline",
    "judge_input_pipeline",
    "judge_matmul_rate",
    "judge_recipes",
    "keras_recipes",
    "matmul_rate",
    "recipe_model",
    "recipes",
    "time_recipes",
]

UNVERIFIED = "unverified on hardware"
# The speed checks' lines, unverified on hardware.
PEAK_FRACTION_TO_PASS = 0.25  # a large bf16 matmul below a quarter of peak means something is off
_RECIPE_SPEEDUP_TARGET = 2.0  # what the collection's recipe should gain over the classic on a TPU
_CLASSIC_SHUFFLE = 60_000  # the classic MNIST tutorial's shuffle buffer: the whole training set


def input_pipeline(context: Context, *, build=None) -> Outcome:
    """The collection's TFRecord pipeline (notebook 06_input_pipelines, "vectorised" stage) against the
    tutorial version ("naive"): examples per second, CPU work per example, static batches.
    ``build`` replaces ``helpers.pipelines.build_pipeline`` (same arguments).
    Run by the self-test of notebook 00_tpu_self_test.
    """
    images = context.images()
    # 32 batches of photos in the cache: all 60,000 took 7 GiB while they were enlarged and
    # more than 80 s to write and cache (measured here), in a check of a 20 s budget.
    count = context.size(512, 4096)
    batch = context.size(64, 128)
    pixels, side = images.x_train[:count], context.size(48, 96)
    photos = np.concatenate(  # enlarged 1,024 at a time: float32 copies of all take 0.6 GiB
        [pipelines.to_photos(pixels[i : i + 1024] / 255, side) for i in range(0, count, 1024)]
    )
    files = pipelines.write_tfrecords(
        photos, images.y_train[:count], context.workdir / "tfrecords", num_shards=4
    )
    out_size = context.size(32, 64)
    stages = {
        stage: (build or pipelines.build_pipeline)(files, batch, stage, out_size=out_size)
        for stage in ("naive", "vectorised")
    }
    pipelines.fill_caches(stages, count // batch + 1)  # the vectorised stage's, in one pass
    measured = timing.compare_throughput(
        stages, seconds=context.size(0.3, 1.0), rounds=context.size(1, 3)
    )
    naive, fast = measured["naive"], measured["vectorised"]
    shape = stages["vectorised"].element_spec[0].shape
    evidence = {
        "examples_per_second": round(fast.examples_per_second),
        "naive_examples_per_second": round(naive.examples_per_second),
        "speedup": fast.examples_per_second / naive.examples_per_second,
        "cpu_us_per_example": fast.cpu_us_per_example,
        "naive_cpu_us_per_example": naive.cpu_us_per_example,
        "cpu_work_saving": naive.cpu_us_per_example / fast.cpu_us_per_example,
        "batch_size": batch,
        "batch_shape": [None if d is None else int(d) for d in shape.as_list()],
        "photos": f"{count} PNG images of {photos.shape[1]} px, cropped to {out_size} px",
    }
    return judge_input_pipeline(evidence)


def judge_input_pipeline(evidence: dict) -> Outcome:
    """Status and summary of :func:`input_pipeline` from its evidence."""
    shape, batch = evidence["batch_shape"], evidence["batch_size"]
    saving, speedup = evidence["cpu_work_saving"], evidence["speedup"]
    shown = "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"
    problems = []
    if None in shape or not shape or shape[0] != batch:
        problems.append(
            f"batches of shape {shown}, not one static shape with {batch} examples "
            "(drop_remainder=True?)"
        )
    if not saving > 1:
        problems.append(
            f"the optimised pipeline did {1 / saving:.2f}x the naive one's CPU work per example: "
            "caching and vectorising saved nothing"
            if saving > 0
            else f"the CPU work per example could not be compared (saving {saving})"
        )
    success = (
        f"{evidence['examples_per_second']:,.0f} examples/s ({speedup:.1f}x the naive pipeline, "
        f"{saving:.1f}x less CPU work per example), static batches of {shown}"
    )
    return judged(problems, success, evidence)


def matmul_rate(context: Context) -> Outcome:
    """Chained square matmuls on every replica, in TFLOP/s: bfloat16 on a TPU, compared with the
    generation's published peak per chip; float32 elsewhere, for information.
    Run by the self-test of notebook 00_tpu_self_test.
    """
    import tensorflow as tf

    strategy = context.need_strategy()
    replicas = context.replicas
    on_tpu = context.on_tpu
    dtype = tf.bfloat16 if on_tpu else tf.float32
    n = context.size(2048, 4096) if on_tpu else context.size(512, 1024)
    chain = 16 if on_tpu else context.size(4, 2)  # about a second per call on 2 CPU cores
    rng = np.random.default_rng(9)
    start = rng.standard_normal((n, n)).astype(np.float32)
    step = (rng.standard_normal((n, n)) / math.sqrt(n)).astype(np.float32)  # keeps |x| steady
    with strategy.scope():  # one copy per replica, on its device: no host copy per call
        x0 = tf.Variable(tf.cast(start, dtype), trainable=False)
        w = tf.Variable(tf.cast(step, dtype), trainable=False)

    @tf.function
    def multiply():
        def replica():
            x = x0.read_value()
            for _ in range(chain):
                x = tf.matmul(x, w)
            return tf.reduce_sum(tf.cast(x, tf.float32))

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica), axis=None)

    measured = timing.time_call(multiply, repeats=context.size(3, 5), warmup=1)
    flops = replicas * chain * 2 * n**3
    rate = flops / measured.median / 1e12
    evidence = {
        "dtype": dtype.name,
        "matrix": n,
        "matmuls_per_replica_per_call": chain,
        "replicas": replicas,
        "seconds_per_call": measured.median,
        "tflops_total": rate,
    }
    generation = tpu_generation(context.kind, replicas) if on_tpu else None
    if generation is None:
        where = "this TPU's generation is unknown" if on_tpu else f"a {context.kind or 'CPU'}"
        summary = f"{rate * 1e3:,.1f} GFLOP/s {dtype.name} on {where}: no published peak to compare"
        return Outcome("info", summary, evidence)
    chips = replicas / generation.devices_per_chip
    evidence.update(
        tpu_generation=generation.name,
        chips=chips,
        tflops_per_chip=rate / chips,
        published_peak_tflops_per_chip=generation.peak_bf16_tflops,
        fraction_of_peak=rate / chips / generation.peak_bf16_tflops,
        peak_source=generation.source,
    )
    return judge_matmul_rate(evidence)


def judge_matmul_rate(evidence: dict) -> Outcome:
    """Status and summary of :func:`matmul_rate` on a TPU of known generation, from its
    evidence.
    """
    fraction, per_chip = evidence["fraction_of_peak"], evidence["tflops_per_chip"]
    rate = (
        f"{per_chip:.1f} TFLOP/s per chip = {fraction:.0%} of the {evidence['tpu_generation']}'s "
        f"published {evidence['published_peak_tflops_per_chip']:g}"
    )
    line = f"{PEAK_FRACTION_TO_PASS:.0%}"
    words = (f"below the {line} this check needs", f"at least {line} needed")
    note = f"peak and the {line} threshold are {UNVERIFIED}"
    return _against_target(evidence, rate, fraction >= PEAK_FRACTION_TO_PASS, words, note)


def _against_target(evidence: dict, measured: str, met: bool, words, note: str) -> Outcome:
    """Pass with ``measured, words[1]`` when ``met``, else fail with ``measured, words[0]``."""
    problems = [] if met else [f"{measured}, {words[0]}"]
    return judged(problems, f"{measured}, {words[1]}", evidence, (note,))


def recipes(replicas: int, pixels: np.ndarray, labels: np.ndarray, spe: int) -> list[dict]:
    """The stages from the classic Keras recipe to the collection's, each a dict with ``name``,
    ``change`` (over the stage before), ``input_dtype``, ``steps_per_execution`` and its
    ``dataset``; the first is the classic recipe, the last the collection's. Taught in 03 and
    06; notebook 00_tpu_self_test runs the readiness check on the last one.
    Taught in notebook 00.
    """
    import tensorflow as tf

    global_batch = PER_REPLICA_BATCH * replicas
    floats = np.divide(pixels, 255, dtype=np.float32)  # the classic way: scaled on the host

    def classic(x):
        ds = tf.data.Dataset.from_tensor_slices((x, labels)).shuffle(_CLASSIC_SHUFFLE)
        return ds.batch(global_batch).repeat()  # a last, smaller batch; nothing prepared ahead

    collection = data.make_dataset(pixels, labels, global_batch, replicas=replicas)
    static = "cache, shuffle, repeat, static batches (drop_remainder=True), prefetch"
    stages = [
        {
            "name": "classic",
            "change": "float32 pixels scaled on the host, shuffle(60000), batch without "
            "drop_remainder, no cache or prefetch, one step per call",
            "input_dtype": "float32",
            "steps_per_execution": 1,
            "dataset": classic(floats),
        },
        {
            "name": "uint8 input",
            "change": "uint8 pixels on the host, cast and scaled by the model on the device",
            "input_dtype": "uint8",
            "steps_per_execution": 1,
            "dataset": classic(pixels),
        },
        {
            "name": "static input",
            "change": static,
            "input_dtype": "uint8",
            "steps_per_execution": 1,
            "dataset": collection,
        },
        {
            "name": "collection",
            "change": f"steps_per_execution={spe}, as helpers.fitting chooses for the strategy",
            "input_dtype": "uint8",
            "steps_per_execution": spe,
            "dataset": collection,
        },
    ]
    if spe == 1:  # one step per call on this strategy: the static input is the whole recipe
        del stages[2]
        stages[-1]["change"] = f"{static}; steps_per_execution stays 1 on this strategy"
    return stages


def recipe_model(recipe: dict, strategy, image_shape=(28, 28, 1)):
    """The same Dense-128 classifier for every recipe, compiled in ``strategy.scope()``.

    Taught in notebook 00.
    """
    import keras

    with strategy.scope():
        model = models.build_classifier(
            image_shape, hidden=128, seed=31, input_dtype=recipe["input_dtype"]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=recipe["steps_per_execution"],
        )
    return model


def time_recipes(strategy, stages: list[dict], steps: int, epochs: int) -> dict:
    """``fitting.time_fit`` of each recipe stage (see :func:`recipes`) on ``strategy``: a
    ``FitTiming`` per stage name, the same model and data for each. One implementation for the
    self-test and the benchmark (``tools/bench``).
    """
    return {
        stage["name"]: fitting.time_fit(
            recipe_model(stage, strategy), stage["dataset"], steps, epochs=epochs
        )
        for stage in stages
    }


def keras_recipes(context: Context) -> Outcome:
    """The classic Keras recipe against the collection's (notebooks 03_keras_compile_and_fit and 06_input_pipelines), in examples per
    second of ``fit`` on the same model; in full mode each change's share too.
    Run by the self-test of notebook 00_tpu_self_test.
    """
    strategy = context.need_strategy()
    replicas = context.replicas
    global_batch = PER_REPLICA_BATCH * replicas
    # On a CPU a quarter of the training set: TensorFlow keeps what from_tensor_slices copied
    # until the process ends (0.6 GiB for all 60,000 on 8 replicas, measured here). The classic
    # recipe still refills its shuffle buffer with every image once per pass and ends each pass
    # on a smaller batch (15,000 is no multiple of 128).
    full = _CLASSIC_SHUFFLE if context.on_tpu else 15_000
    images, count = context.images(), context.size(4096, full)
    pixels, labels = images.x_train[:count], images.y_train[:count]  # Fashion-MNIST's uint8
    # On a TPU, whole calls of 32 steps and enough of them that per-epoch costs do not dominate;
    # on a CPU, few: every step runs all the replicas on the host's cores.
    steps = context.size(64, 256) if context.on_tpu else context.size(4, 40)
    choice = fitting.steps_per_execution_for(strategy, min(32, steps))
    steps = fitting.whole_executions(steps, choice.value)  # Keras runs whole calls
    stages = recipes(replicas, pixels, labels, choice.value)
    described = {
        "classic": stages[0]["change"],
        "collection": "; ".join(stage["change"] for stage in stages[1:]),
    }
    if context.smoke:
        stages = [stages[0], stages[-1]]
    timed = time_recipes(strategy, stages, steps, epochs=context.size(1, 3))
    rates = {name: global_batch / fit.median for name, fit in timed.items()}
    names = list(rates)
    ratio = rates[names[-1]] / rates[names[0]]
    evidence = {
        "examples_per_second": {name: round(rate) for name, rate in rates.items()},
        "recipes": described,
        "speedup": ratio,
        "images": count,
        "global_batch": global_batch,
        "steps_timed_per_epoch": steps,
        "steps_per_execution": choice.value,
        "steps_per_execution_reason": choice.reason,
    }
    if len(names) > 2:  # full mode: what each change added to the one before
        evidence["changes"] = {stage["name"]: stage["change"] for stage in stages[1:]}
        evidence["contribution"] = {
            later: rates[later] / rates[earlier]
            for earlier, later in zip(names, names[1:], strict=False)
        }
    if not context.on_tpu:
        note = "on a CPU the ratio is for information; on a TPU the target is at least 2x"
        summary = (
            f"collection {rates[names[-1]]:,.0f} vs classic {rates[names[0]]:,.0f} examples/s: "
            f"{ratio:.2f}x (for information on a CPU)"
        )
        return Outcome("info", summary, evidence, (note,))
    return judge_recipes(evidence)


def judge_recipes(evidence: dict) -> Outcome:
    """Status and summary of :func:`keras_recipes` on a TPU, from its evidence.
    Used in notebook 00_tpu_self_test.
    """
    rates, ratio = evidence["examples_per_second"], evidence["speedup"]
    names = list(rates)
    measured = (
        f"collection {rates[names[-1]]:,.0f} vs classic {rates[names[0]]:,.0f} examples/s: "
        f"{ratio:.2f}x"
    )
    target = f"the {_RECIPE_SPEEDUP_TARGET:g}x target"
    met, note = ratio >= _RECIPE_SPEEDUP_TARGET, f"{target} on a TPU is {UNVERIFIED}"
    return _against_target(evidence, measured, met, (f"below {target}", f"meets {target}"), note)
