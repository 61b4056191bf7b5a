"""The speed checks of the TPU self-test (notebook 00): input pipeline throughput (06), the
matmul rate against the chip's published peak (05), and the classic Keras recipe against the
collection's recipe (03 and 06) on the same model.

On a CPU, speed says nothing about a TPU, so these report ``info`` there: measured, no verdict.
"""

from __future__ import annotations

import math

import numpy as np

from helpers.selftest.base import Context, Outcome
from helpers.tpu_facts import BATCH_FOR_MXU as PER_REPLICA_BATCH

UNVERIFIED = "unverified on hardware"
PEAK_FRACTION_TO_PASS = 0.25  # a large bf16 matmul below a quarter of peak means something is off
RECIPE_SPEEDUP_TARGET = 2.0  # what the collection's recipe should gain over the classic on a TPU
CLASSIC_SHUFFLE = 60_000  # the classic MNIST tutorial's shuffle buffer: the whole training set


def input_pipeline(context: Context) -> Outcome:
    """The collection's TFRecord pipeline (notebook 06, "vectorised" stage) against the
    tutorial version ("naive"): examples per second, CPU work per example, static batches."""
    from helpers import pipelines, timing

    images = context.images()
    count = context.size(512, len(images.x_train))
    batch = context.size(64, 128)
    photos = pipelines.to_photos(images.x_train[:count], context.size(48, 96))
    files = pipelines.write_tfrecords(
        photos, images.y_train[:count], context.workdir / "tfrecords", num_shards=4
    )
    out_size = context.size(32, 64)
    stages = {
        stage: pipelines.build_pipeline(files, batch, stage, out_size=out_size)
        for stage in ("naive", "vectorised")
    }
    pipelines.fill_caches(stages, count // batch + 1)  # the vectorised stage's, in one pass
    measured = timing.compare_throughput(
        stages, seconds=context.size(0.3, 1.0), rounds=context.size(1, 3)
    )
    naive, fast = measured["naive"], measured["vectorised"]
    shape = stages["vectorised"].element_spec[0].shape
    static = shape.is_fully_defined() and shape[0] == batch
    saving = naive.cpu_us_per_example / fast.cpu_us_per_example
    evidence = {
        "examples_per_second": round(fast.examples_per_second),
        "naive_examples_per_second": round(naive.examples_per_second),
        "speedup": fast.examples_per_second / naive.examples_per_second,
        "cpu_us_per_example": fast.cpu_us_per_example,
        "naive_cpu_us_per_example": naive.cpu_us_per_example,
        "cpu_work_saving": saving,
        "batch_shape": [None if d is None else int(d) for d in shape.as_list()],
        "photos": f"{count} PNG digits of {photos.shape[1]} px, cropped to {out_size} px",
    }
    ok = static and saving > 1
    summary = (
        f"{fast.examples_per_second:,.0f} examples/s ({evidence['speedup']:.1f}x the naive "
        f"pipeline, {saving:.1f}x less CPU work per example), batch shape {shape}"
    )
    return Outcome("pass" if ok else "fail", summary, evidence)


def matmul_rate(context: Context) -> Outcome:
    """Chained square matmuls on every replica, in TFLOP/s: bfloat16 on a TPU, compared with the
    generation's published peak per chip; float32 elsewhere, for information."""
    import tensorflow as tf

    from helpers import timing
    from helpers.selftest.environment import tpu_generation

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
    per_chip = rate / chips
    fraction = per_chip / generation.peak_bf16_tflops
    evidence.update(
        tpu_generation=generation.name,
        chips=chips,
        tflops_per_chip=per_chip,
        published_peak_tflops_per_chip=generation.peak_bf16_tflops,
        fraction_of_peak=fraction,
        peak_source=generation.source,
    )
    notes = (f"peak and the {PEAK_FRACTION_TO_PASS:.0%} threshold are {UNVERIFIED}",)
    summary = (
        f"{per_chip:.1f} TFLOP/s per chip = {fraction:.0%} of the {generation.name}'s published "
        f"{generation.peak_bf16_tflops:g}"
    )
    return Outcome(
        "pass" if fraction >= PEAK_FRACTION_TO_PASS else "fail", summary, evidence, notes
    )


def mnist_shaped(images, count: int):
    """``count`` real digits (a ``data.Images``) enlarged to MNIST's 28x28 uint8 pixels, the set
    repeated to reach ``count``, and their labels: the classic recipe's data, offline."""
    from helpers import pipelines

    pixels = pipelines.to_photos(images.x_train, 28)
    order = np.resize(np.arange(len(pixels)), count)
    return pixels[order], images.y_train[order]


def recipes(replicas: int, pixels: np.ndarray, labels: np.ndarray, spe: int) -> list[dict]:
    """The stages from the classic Keras recipe to the collection's, each a dict with ``name``,
    ``change`` (over the stage before), ``input_dtype``, ``steps_per_execution`` and its
    ``dataset``; the first is the classic recipe, the last the collection's. Taught in 03 and
    06; notebook 00 runs the readiness check on the last one."""
    import tensorflow as tf

    from helpers import data

    global_batch = PER_REPLICA_BATCH * replicas
    floats = pixels.astype(np.float32) / 255  # the classic way: scaled on the host

    def classic(x):
        ds = tf.data.Dataset.from_tensor_slices((x, labels)).shuffle(CLASSIC_SHUFFLE)
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
    """The same Dense-128 classifier for every recipe, compiled in ``strategy.scope()``."""
    import keras

    from helpers import models

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
    self-test and the benchmark (``tools/bench``)."""
    from helpers import fitting

    return {
        stage["name"]: fitting.time_fit(
            recipe_model(stage, strategy), stage["dataset"], steps, epochs=epochs
        )
        for stage in stages
    }


def keras_recipes(context: Context) -> Outcome:
    """The classic Keras recipe against the collection's (notebooks 03 and 06), in examples per
    second of ``fit`` on the same model; in full mode each change's share too."""
    from helpers import fitting

    strategy = context.need_strategy()
    replicas = context.replicas
    global_batch = PER_REPLICA_BATCH * replicas
    pixels, labels = mnist_shaped(context.images(), context.size(4096, CLASSIC_SHUFFLE))
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
    summary = (
        f"collection {rates[names[-1]]:,.0f} vs classic {rates[names[0]]:,.0f} examples/s: "
        f"{ratio:.2f}x"
    )
    if not context.on_tpu:
        note = "on a CPU the ratio is for information; on a TPU the target is at least 2x"
        return Outcome("info", summary, evidence, (note,))
    notes = (f"the {RECIPE_SPEEDUP_TARGET:g}x target on a TPU is {UNVERIFIED}",)
    status = "pass" if ratio >= RECIPE_SPEEDUP_TARGET else "fail"
    return Outcome(status, summary, evidence, notes)
