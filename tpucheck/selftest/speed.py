"""The speed checks of the TPU self-test: the reference script's input pipeline, the matmul rate
against the chip's published peak, and Keras' classic TPU recipe against the script's. On a CPU
the rate and recipe checks report ``info``; :data:`ON_A_TPU` says what each figure means on a TPU.
"""

from __future__ import annotations

import math
import time

import numpy as np

from tpucheck import timing
from tpucheck.selftest.base import Context, Outcome, judged
from tpucheck.selftest.environment import UNVERIFIED, accelerator
from tpucheck.tpu_facts import BATCH_FOR_MXU as PER_REPLICA_BATCH
from tpucheck.tpu_facts import generation_of

PEAK_FRACTION_TO_PASS = 0.25  # a large bf16 matmul below a quarter of peak means something is off
RECIPE_SPEEDUP_TARGET = 2.0  # what the script's recipe should gain over the classic on a TPU
_CLASSIC_SHUFFLE = 60_000  # the classic MNIST tutorial's shuffle buffer: the whole training set
ON_A_CPU = (
    "on a CPU this speed says nothing about a TPU: the simulated TPU's replicas are this host's "
    "cores, shared with the input pipeline, and a call from the host costs little next to a step"
)
# What each speed figure means on a TPU: the report's notes say it beside the figures.
ON_A_TPU = {
    "input_pipeline": "examples per second that one host's copy of the script's pipeline "
    "yields: on a TPU it must exceed the training rate (the recipes check's), or the TPU waits",
    "matmul_rate": "TFLOP/s of chained bfloat16 matmuls per chip against the generation's "
    f"published peak: below {PEAK_FRACTION_TO_PASS:.0%} of it something else takes the chip",
    "recipes": "examples per second of fit with the classic tutorial's input (float32 arrays, "
    "partial batches, one step per call) and with the reference script's (its TFRecord pipeline, "
    f"static batches, many steps per call): on a TPU the script's should be at least "
    f"{RECIPE_SPEEDUP_TARGET:g}x the classic ({UNVERIFIED})",
}


def input_pipeline(context: Context, *, make_dataset=None) -> Outcome:
    """``train_tpu.train_dataset`` on the sample's TFRecords: examples per second into one host,
    in batches of one size. ``make_dataset`` replaces ``train_tpu.train_dataset``."""
    import tensorflow as tf

    import train_tpu

    steps = max(1, context.size(1024, 4096) // (PER_REPLICA_BATCH * context.replicas))
    one_host = tf.distribute.InputContext(num_replicas_in_sync=context.replicas)
    make, epochs = make_dataset or train_tpu.train_dataset, context.size(2, 4)
    ds = make(context.data_dir, one_host, PER_REPLICA_BATCH, context.data, steps, epochs)
    batches = iter(ds)
    sizes = {int(next(batches)[0].shape[0])}  # the files opened: what a first step waits for
    start, examples = time.perf_counter(), 0
    for x, _ in batches:
        sizes.add(int(x.shape[0]))
        examples += int(x.shape[0])
    evidence = {
        "examples_per_second": round(examples / (time.perf_counter() - start)),
        "batch_size": PER_REPLICA_BATCH,
        "batch_sizes_seen": sorted(sizes),
        "batch_shape_in_spec": [None if d is None else int(d) for d in ds.element_spec[0].shape],
        "examples": examples,
        "on_a_tpu": ON_A_TPU["input_pipeline"],
    }
    return judge_input_pipeline(evidence, on_tpu=context.on_tpu)


def judge_input_pipeline(evidence: dict, on_tpu: bool = False) -> Outcome:
    """Batches of one size pass; a batch dimension the element spec leaves open is a note."""
    sizes, batch = evidence["batch_sizes_seen"], evidence["batch_size"]
    problems = []
    if sizes != [batch]:
        problems.append(
            f"batches of {', '.join(map(str, sizes))} examples, not one static shape with "
            f"{batch} (drop_remainder=True?)"
        )
    notes = [] if on_tpu else [ON_A_CPU]
    if evidence["batch_shape_in_spec"][:1] == [None]:
        notes.append(
            "the element spec leaves the batch dimension open (None) though every batch is "
            "full: TPUStrategy then compiles with its dynamic padder (unverified on hardware); "
            "tf.ensure_shape after parsing makes it static"
        )
    rate = f"{evidence['examples_per_second']:,.0f} examples/s"
    success = f"batches of {batch} examples, all; {rate}" + ("" if on_tpu else " (info: on a CPU)")
    return judged(problems, success, evidence, notes)


def matmul_rate(context: Context) -> Outcome:
    """Chained square matmuls on every replica, in TFLOP/s: bfloat16 on a TPU, compared with the
    generation's published peak per chip; float32 elsewhere, for information."""
    import tensorflow as tf

    strategy, replicas, on_tpu = context.need_strategy(), context.replicas, context.on_tpu
    dtype = tf.bfloat16 if on_tpu else tf.float32
    n = context.size(2048, 4096) if on_tpu else context.size(512, 1024)
    chain = 16 if on_tpu else context.size(4, 2)  # about a second per call on 2 CPU cores
    start, step = np.random.default_rng(9).standard_normal((2, n, n), dtype=np.float32)
    with strategy.scope():  # one copy per replica, on its device: no host copy per call
        x0 = tf.Variable(tf.cast(start, dtype), trainable=False)
        w = tf.Variable(tf.cast(step / math.sqrt(n), dtype), trainable=False)  # keeps |x| steady

    @tf.function
    def multiply():
        def replica():
            x = x0.read_value()
            for _ in range(chain):
                x = tf.matmul(x, w)
            return tf.reduce_sum(tf.cast(x, tf.float32))

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica), axis=None)

    seconds = timing.time_call(multiply, repeats=context.size(3, 5)).median
    rate = replicas * chain * 2 * n**3 / seconds / 1e12
    evidence = {
        "dtype": dtype.name,
        "matrix": n,
        "matmuls_per_replica_per_call": chain,
        "replicas": replicas,
        "seconds_per_call": seconds,
        "tflops_total": rate,
        "on_a_tpu": ON_A_TPU["matmul_rate"],
    }
    generation = generation_of(accelerator(context.kind)[0]) if on_tpu else None
    if generation is None:
        where = "this TPU's generation is unknown" if on_tpu else f"a {context.kind or 'CPU'}"
        summary = f"{rate * 1e3:,.1f} GFLOP/s {dtype.name} on {where}: no published peak to compare"
        return Outcome("info", summary, evidence, () if on_tpu else (ON_A_CPU,))
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
    fraction, line = evidence["fraction_of_peak"], f"{PEAK_FRACTION_TO_PASS:.0%}"
    rate = (
        f"{evidence['tflops_per_chip']:.1f} TFLOP/s per chip = {fraction:.0%} of the "
        f"{evidence['tpu_generation']}'s published {evidence['published_peak_tflops_per_chip']:g}"
    )
    met = fraction >= PEAK_FRACTION_TO_PASS
    problems = [] if met else [f"{rate}, below the {line} this check needs"]
    note = f"peak and the {line} threshold are {UNVERIFIED}"
    return judged(problems, f"{rate}, at least {line} needed", evidence, (note,))


def _fit_rate(strategy, steps_per_execution: int, dataset, batch: int, steps: int, epochs: int):
    """Examples per second of ``fit`` on the script's CNN: the median of ``epochs`` timed after
    a first, untimed one (tracing, the pipeline starting)."""
    import train_tpu

    model, optimizer = train_tpu.build(strategy, 1e-3, shape=(28, 28, 1), classes=10)
    train_tpu.compile_for_fit(strategy, model, optimizer, steps_per_execution)
    clock = []
    now = lambda epoch, logs: clock.append(time.perf_counter())  # noqa: E731
    tick = train_tpu.keras.callbacks.LambdaCallback(on_epoch_begin=now, on_epoch_end=now)
    model.fit(dataset, epochs=1 + epochs, steps_per_epoch=steps, callbacks=[tick], verbose=0)
    return batch * steps / float(np.median(np.subtract(clock[3::2], clock[2::2])))


def keras_recipes(context: Context) -> Outcome:
    """Examples per second of ``fit`` on the script's CNN with the classic Keras recipe and with
    the reference script's: its TFRecord pipeline and its steps per call."""
    import tensorflow as tf

    import train_tpu

    strategy, replicas = context.need_strategy(), context.replicas
    batch = PER_REPLICA_BATCH * replicas
    (x, y), _ = context.arrays
    # On a CPU the speeds are for information only and a step of the script's CNN takes seconds:
    # the quick version's sizes there, the full ones where they mean something.
    quick = context.smoke or not context.on_tpu
    count, epochs = max(1, (1024 if quick else 4096) // batch) * batch, 1 if quick else 3
    wanted = train_tpu.fit_steps_per_execution(strategy, 32)
    spe, steps = train_tpu.epoch_plan(count // batch, wanted)
    floats = np.divide(x[:count, ..., None], 255, dtype=np.float32)  # classic: scaled on the host
    classic = tf.data.Dataset.from_tensor_slices((floats, y[:count])).shuffle(_CLASSIC_SHUFFLE)
    one_host = tf.distribute.InputContext(num_replicas_in_sync=1)  # global batches, as classic
    data, folder = context.data, context.data_dir
    script = train_tpu.train_dataset(folder, one_host, batch, data, count // batch, 1).repeat()
    rates = {  # the classic's batches are partial
        "classic": _fit_rate(strategy, 1, classic.batch(batch).repeat(), batch, steps, epochs),
        "collection": _fit_rate(strategy, spe, script, batch, steps, epochs),
    }
    evidence = {
        "examples_per_second": {name: round(rate) for name, rate in rates.items()},
        "recipes": {
            "classic": "float32 pixels from arrays, shuffle(60000), batches without "
            "drop_remainder, nothing prepared ahead, one step per call",
            "collection": "the script's pipeline: TFRecords read in parallel, static batches, "
            f"prefetch; steps_per_execution={spe}, as the script chooses for the strategy",
        },
        "speedup": rates["collection"] / rates["classic"],
        "images": count,
        "global_batch": batch,
        "steps_timed_per_epoch": steps,
        "steps_per_execution": spe,
        "on_a_tpu": ON_A_TPU["recipes"],
    }
    if not context.on_tpu:
        on_a_cpu = "(info: on a CPU these speeds say nothing about a TPU)"
        return Outcome("info", f"{_recipes_measured(evidence)} {on_a_cpu}", evidence, (ON_A_CPU,))
    return judge_recipes(evidence)


def _recipes_measured(evidence: dict) -> str:
    rates = evidence["examples_per_second"]
    return (
        f"the script's recipe {rates['collection']:,.0f} vs the classic's "
        f"{rates['classic']:,.0f} examples/s: {evidence['speedup']:.2f}x"
    )


def judge_recipes(evidence: dict) -> Outcome:
    measured, target = _recipes_measured(evidence), f"the {RECIPE_SPEEDUP_TARGET:g}x target"
    met = evidence["speedup"] >= RECIPE_SPEEDUP_TARGET
    problems = [] if met else [f"{measured}, below {target}"]
    note = f"{target} on a TPU is {UNVERIFIED}"
    return judged(problems, f"{measured}, meets {target}", evidence, (note,))
