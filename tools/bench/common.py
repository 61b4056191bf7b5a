"""What every measurement shares: the settings of each mode, report rows, progress output, and
the training setups (the digits, the lessons' Fashion-MNIST, the custom loop of notebook 04_custom_training_loops)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import manifest  # tools/manifest.py: each lesson's settings

__all__ = [
    "comparison_fields",
    "convert",
    "custom_loop",
    "digits",
    "error_reason",
    "fit_comparison",
    "lesson_images",
    "progress",
    "replicas_text",
    "row",
    "say",
    "Settings",
    "steps",
    "tiny_loop",
]

# The lessons' workload: the per-replica batch notebook 03_keras_compile_and_fit trains with, read from the manifest
# (make sync writes the same value into its parameters cell).
LESSON = "03_keras_compile_and_fit"
LESSON_PER_REPLICA = manifest.lesson_settings(manifest.load()[LESSON])["PER_REPLICA_BATCH"]


@dataclass(frozen=True)
class Settings:
    """How much work each measurement does: the defaults are the full mode's."""

    repeats: int = 9  # timed repetitions of each comparison
    global_batch: int = 256  # the tiny workload's training batch, split over the replicas
    steps_per_call: int = 50  # steps per tf.function call (custom loop) and per fit execution
    fit_steps: int = 200  # steps in each timed fit() epoch
    lesson_steps: int = 32  # steps per timed repetition at the lessons' workload
    recipe_examples: int = 60_000  # Fashion-MNIST examples for the recipes (the classic's 60,000)
    recipe_steps: int = 64  # steps per timed fit epoch of each recipe: whole calls of 32 steps
    bf16_hidden: int = 1024  # hidden width of the mixed-precision model: big enough to compute
    pipeline_batches: int = 48  # batches drawn per timed pipeline repetition
    pipeline_batch: int = 128
    photo_size: int = 96  # the digits are enlarged to this many pixels and PNG-encoded
    crop_size: int = 64  # and cropped back to this size by the augmentation
    notebooks_and_tests: bool = True  # time the notebooks' smoke run and the unit tests


FULL = Settings()
# Quick mode checks that every measurement runs and every ratio is computed, not the numbers
# themselves: the least work that still gives each comparison three timed repetitions.
_QUICK_WORK = dict(repeats=3, steps_per_call=10, fit_steps=32, lesson_steps=6)
_QUICK_DATA = dict(recipe_examples=4096, recipe_steps=32, pipeline_batches=8)
QUICK = dataclasses.replace(FULL, notebooks_and_tests=False, **_QUICK_WORK, **_QUICK_DATA)


def say(text: str) -> None:
    print(f"    {text}", flush=True)


def convert(seconds: float, unit: str, per: float) -> float:
    """Seconds for ``per`` units of work -> the row's unit (per-step time or a rate)."""
    return per / seconds if unit.endswith("/s") else seconds / per


def progress(label: str, unit: str, per: float):
    """An ``on_repeat`` callback for helpers.timing: prints each repetition in ``unit``."""
    from bench.report import format_value

    def show(i, *seconds):
        values = " vs ".join(format_value(convert(s, unit, per), unit) for s in seconds)
        say(f"{label} repetition {i + 1}: {values}")

    return show


def row(key: str, title: str, setting: str, baseline: str, candidate: str, **fields) -> dict:
    out = {
        "key": key,
        "title": title,
        "setting": setting,
        "baseline": baseline,
        "candidate": candidate,
        "status": "measured",
        "note": "",
    }
    out.update(fields)
    return out


def comparison_fields(cmp, unit: str, per: float) -> dict:
    """Row fields of a helpers.timing.Comparison whose repetitions each did ``per`` units of work.

    Values are shown in ``unit``: seconds per unit ("s/step") or units per second
    ("examples/s"). The ratio is always median baseline time / median candidate time: above 1,
    the candidate is faster; the ratios of the pairs give the spread.
    """
    ratios = cmp.ratios
    return {
        "unit": unit,
        "baseline_value": convert(cmp.baseline.median, unit, per),
        "candidate_value": convert(cmp.candidate.median, unit, per),
        "baseline_seconds": list(cmp.baseline.seconds),
        "candidate_seconds": list(cmp.candidate.seconds),
        "ratio": cmp.speedup,
        "ratio_low": min(ratios),
        "ratio_high": max(ratios),
        "better": "faster",
        "runs": len(ratios),
    }


def fit_comparison(baseline, candidate):
    """Two ``fitting.FitTiming`` (seconds per step, one per epoch) as a timing.Comparison: the
    pairs are epoch 1 with epoch 1 and so on (each model ran in its own ``fit`` call)."""
    from helpers import timing

    return timing.Comparison(timing.Timing(baseline.per_step), timing.Timing(candidate.per_step))


def error_reason(err: BaseException, limit: int = 240) -> str:
    """A one-line reason from an error: its type and the most telling line of its message.

    TensorFlow's graph errors start with "Graph execution error:" and say what went wrong
    further down; the first line that names the problem is kept.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    telling = [
        line
        for line in lines
        if re.search(r"must feed|placeholder|not supported|INVALID_ARGUMENT", line)
    ]
    line = (telling or lines or [""])[0]
    line = re.sub(r"'[^']{30,}'", "'...'", line)  # long graph node names say nothing
    return f"{type(err).__name__}: {line}"[:limit]


def replicas_text(n: int) -> str:
    return f"{n} replica" + ("s" if n != 1 else "")


def digits():
    from helpers import data

    return data.digits()  # offline and small: the same data on every machine


def lesson_images(count: int):
    """``count`` Fashion-MNIST images (uint8 ``[N, 28, 28, 1]``) and int32 labels: the lessons'
    data, read by the reference script's part "data" (offline from Debian's package)."""
    import numpy as np

    import train_tpu

    (x, y), _ = train_tpu.load_fashion_mnist()
    order = np.resize(np.arange(len(x)), count)  # repeated when more are asked for
    return x[order][..., None], y[order].astype(np.int32)


def steps(n: int):
    """The step count as a tensor: one traced function serves every count (no retracing)."""
    import tensorflow as tf

    return tf.constant(n)


def custom_loop(strategy, x, y, global_batch: int, *, hidden: int = 128):
    """The custom training loop of notebook 04_custom_training_loops on ``strategy``: ``(model, train_steps,
    iterator)``, the model taking ``x``'s dtype (uint8 pixels are scaled in the model)."""
    import keras

    from helpers import data, loops, models

    replicas = strategy.num_replicas_in_sync
    ds = data.make_dataset(x, y, global_batch, replicas=replicas)
    input_dtype = "uint8" if x.dtype.name == "uint8" else "float32"
    with strategy.scope():
        model = models.build_classifier(x.shape[1:], hidden=hidden, seed=0, input_dtype=input_dtype)
        optimizer = keras.optimizers.Adam(1e-3)
    loops.build_optimizer(strategy, optimizer, model)
    train_steps = loops.make_train_steps(strategy, model, optimizer, global_batch)
    return model, train_steps, iter(strategy.experimental_distribute_dataset(ds))


_SHARED: dict = {}  # the tiny training setup shared by the tasks of one process (traced once)


def tiny_loop(strategy, settings: Settings):
    """The digits (8x8) loop at the tiny batch, shared by the tasks of one process: tracing a
    step for 8 replicas takes many seconds on a small CPU."""
    key = strategy.num_replicas_in_sync
    if key not in _SHARED:
        images = digits()
        _SHARED[key] = custom_loop(strategy, images.x_train, images.y_train, settings.global_batch)
    return _SHARED[key]
