"""The speed checks of the TPU self-test: the reference script's input pipeline, the matmul rate
against the chip's published peak, and Keras' classic TPU recipe against the script's.

On a CPU their speeds say nothing about a TPU: the simulated TPU's replicas are the host's own
cores, shared with the input pipeline, and a call from the host costs little next to a step
computed there. So there the rate and recipe checks report ``info`` (measured, no verdict), and
:data:`ON_A_TPU` says what each figure means on a TPU. As in
:mod:`tpucheck.selftest.correctness`, each ``judge_*`` function decides from the evidence alone.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from tpucheck import timing
from tpucheck.selftest.base import Context, Outcome, judged
from tpucheck.selftest.environment import tpu_generation
from tpucheck.tpu_facts import BATCH_FOR_MXU as PER_REPLICA_BATCH

UNVERIFIED = "unverified on hardware"
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
    """The reference script's pipeline (``train_tpu.train_dataset``) on the sample's TFRecords:
    examples per second into one host, in batches of one size, the script's default per-replica
    batch. ``make_dataset`` replaces ``train_tpu.train_dataset`` (same arguments)."""
    import tensorflow as tf

    import train_tpu

    folder, data, replicas = context.prepare(), context.data(), context.replicas
    steps = max(1, context.size(1024, 4096) // (PER_REPLICA_BATCH * replicas))
    one_host = tf.distribute.InputContext(num_replicas_in_sync=replicas)
    make = make_dataset or train_tpu.train_dataset
    ds = make(folder, one_host, PER_REPLICA_BATCH, data, steps, context.size(2, 4))
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
    """Status and summary of :func:`input_pipeline` from its evidence: batches of one size pass;
    a batch dimension the element spec leaves open is a note."""
    sizes, batch, spec = (
        evidence["batch_sizes_seen"],
        evidence["batch_size"],
        evidence["batch_shape_in_spec"],
    )
    problems = []
    if sizes != [batch]:
        problems.append(
            f"batches of {', '.join(map(str, sizes))} examples, not one static shape with "
            f"{batch} (drop_remainder=True?)"
        )
    notes = [] if on_tpu else [ON_A_CPU]
    if spec[:1] == [None]:
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
    generation = tpu_generation(context.kind, replicas) if on_tpu else None
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
    """Status and summary of :func:`matmul_rate` on a TPU of known generation."""
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


def recipes(replicas: int, folder: str, data, pixels, labels, spe: int) -> list[dict]:
    """The stages from Keras' classic TPU recipe to the reference script's, each a dict with
    ``name``, ``change`` (over the stage before), ``steps_per_execution`` and its ``dataset`` of
    global batches: the classic tutorial's arrays (``pixels``, uint8, and ``labels``), then the
    script's TFRecord pipeline on ``folder`` (``data``: its data set), then ``spe`` steps per
    call (left out where ``spe`` is 1). Every stage trains the script's CNN."""
    import tensorflow as tf

    import train_tpu

    batch = PER_REPLICA_BATCH * replicas
    steps = len(pixels) // batch
    floats = np.divide(pixels, 255, dtype=np.float32)  # the classic way: scaled on the host
    classic = tf.data.Dataset.from_tensor_slices((floats, labels)).shuffle(_CLASSIC_SHUFFLE)
    one_host = tf.distribute.InputContext(num_replicas_in_sync=1)  # global batches, as classic
    script = train_tpu.train_dataset(folder, one_host, batch, data, steps, 1).repeat()
    pipeline = "the script's pipeline: TFRecords read in parallel, static batches, prefetch"
    stages = [
        {
            "name": "classic",
            "change": "float32 pixels from arrays, shuffle(60000), batches without "
            "drop_remainder, nothing prepared ahead, one step per call",
            "steps_per_execution": 1,
            "dataset": classic.batch(batch).repeat(),  # a last, smaller batch each pass
        },
        {"name": "static input", "change": pipeline, "steps_per_execution": 1, "dataset": script},
        {
            "name": "collection",
            "change": f"steps_per_execution={spe}, as the script chooses for the strategy",
            "steps_per_execution": spe,
            "dataset": script,
        },
    ]
    if spe == 1:  # one step per call on this strategy: the pipeline is the whole recipe
        del stages[1]
        stages[-1]["change"] = f"{pipeline}; steps_per_execution stays 1 on this strategy"
    return stages


def time_recipes(strategy, stages: list[dict], steps: int, epochs: int) -> dict:
    """Seconds per step of ``fit`` for each stage (see :func:`recipes`), one value per epoch
    after a first, untimed one (tracing, the pipeline starting); the script's CNN, built and
    compiled by its parts, for each."""
    import train_tpu

    timed = {}
    for stage in stages:
        model, optimizer = train_tpu.build(strategy, 1e-3, shape=(28, 28, 1), classes=10)
        train_tpu.compile_for_fit(strategy, model, optimizer, stage["steps_per_execution"])
        clock = []
        now = lambda epoch, logs, clock=clock: clock.append(time.perf_counter())  # noqa: E731
        tick = train_tpu.keras.callbacks.LambdaCallback(on_epoch_begin=now, on_epoch_end=now)
        kw = dict(epochs=1 + epochs, steps_per_epoch=steps, callbacks=[tick], verbose=0)
        model.fit(stage["dataset"], **kw)
        timed[stage["name"]] = [
            (b - a) / steps for a, b in zip(clock[2::2], clock[3::2], strict=True)
        ]
    return timed


def keras_recipes(context: Context) -> Outcome:
    """The classic Keras recipe against the reference script's, in examples per second of
    ``fit`` on the script's CNN; in full mode each change's share too."""
    import train_tpu

    strategy, replicas = context.need_strategy(), context.replicas
    batch = PER_REPLICA_BATCH * replicas
    (x, y), _ = context.arrays()
    # On a CPU the speeds are for information only and a step of the script's CNN takes seconds:
    # the quick version's sizes there, the full ones where they mean something.
    quick = context.smoke or not context.on_tpu
    count = max(1, (1024 if quick else 4096) // batch) * batch
    spe, steps = train_tpu.epoch_plan(
        count // batch, train_tpu.fit_steps_per_execution(strategy, 32)
    )
    stages = recipes(
        replicas, context.prepare(), context.data(), x[:count, ..., None], y[:count], spe
    )
    described = {s["name"]: s["change"] for s in stages}
    if quick:
        stages = [stages[0], stages[-1]]
    timed = time_recipes(strategy, stages, steps, epochs=1 if quick else 3)
    rates = {name: batch / statistics.median(seconds) for name, seconds in timed.items()}
    names = list(rates)
    ratio = rates[names[-1]] / rates[names[0]]
    evidence = {
        "examples_per_second": {name: round(rate) for name, rate in rates.items()},
        "recipes": described,
        "speedup": ratio,
        "images": count,
        "global_batch": batch,
        "steps_timed_per_epoch": steps,
        "steps_per_execution": spe,
        "on_a_tpu": ON_A_TPU["recipes"],
    }
    if len(names) > 2:  # full mode: what each change added to the one before
        pairs = zip(names, names[1:], strict=False)
        evidence["contribution"] = {
            later: rates[later] / rates[earlier] for earlier, later in pairs
        }
    if not context.on_tpu:
        summary = (
            f"the script's recipe {rates[names[-1]]:,.0f} vs the classic's {rates[names[0]]:,.0f} "
            f"examples/s: {ratio:.2f}x (info: on a CPU these speeds say nothing about a TPU)"
        )
        return Outcome("info", summary, evidence, (ON_A_CPU,))
    return judge_recipes(evidence)


def judge_recipes(evidence: dict) -> Outcome:
    """Status and summary of :func:`keras_recipes` on a TPU, from its evidence."""
    rates, ratio = evidence["examples_per_second"], evidence["speedup"]
    names = list(rates)
    measured = (
        f"the script's recipe {rates[names[-1]]:,.0f} vs the classic's {rates[names[0]]:,.0f} "
        f"examples/s: {ratio:.2f}x"
    )
    target = f"the {RECIPE_SPEEDUP_TARGET:g}x target"
    met, note = ratio >= RECIPE_SPEEDUP_TARGET, f"{target} on a TPU is {UNVERIFIED}"
    return _against_target(evidence, measured, met, (f"below {target}", f"meets {target}"), note)
