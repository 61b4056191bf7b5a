"""The simulated TPU's overhead: 8 replicas on this CPU against one device, side by side in one
process, at the lessons' own workload (notebook 03_keras_compile_and_fit's per-replica batch, from the manifest)
and at the tiny workload the other rows use (the 8x8 digits at global batch 256)."""

from __future__ import annotations

from bench.common import (
    LESSON_PER_REPLICA,
    Settings,
    comparison_fields,
    custom_loop,
    digits,
    fit_comparison,
    lesson_images,
    progress,
    replicas_text,
    row,
    say,
    steps,
    tiny_loop,
)
from bench.fit import compiled, time_fits

__all__ = ["task_overhead"]

TITLE = "simulated-TPU overhead"
TARGETS = {"overhead_loop": 1.5, "overhead_fit": 2.5}  # at most this many times one device's time


def _verdict(fields: dict, target: float | None) -> dict:
    """The overhead (replicas' time / one device's time) and, where there is one, the target;
    the report judges the target from every pair (``bench.report.target_verdict``)."""
    out = {"overhead": 1 / fields["ratio"]}
    if target is not None:
        out["target"] = target
    return out


def _loop_row(key, setting, baseline_loop, replicas_loop, n, repeats, target=None) -> dict:
    from helpers import timing

    _, one_steps, one_iter = baseline_loop
    _, many_steps, many_iter = replicas_loop
    count = steps(n)
    cmp = timing.compare(
        lambda: one_steps(one_iter, count),
        lambda: many_steps(many_iter, count),
        repeats=repeats,
        on_repeat=progress("1 device vs replicas:", "s/step", n),
    )
    fields = comparison_fields(cmp, "s/step", per=n)
    return row(key, TITLE, setting, "1 device", "replicas", **fields, **_verdict(fields, target))


def task_overhead(strategy, settings: Settings) -> list[dict]:
    """Custom loop and ``fit``: the same global batch on one device and on the replicas."""
    import tensorflow as tf

    from helpers import data, fitting, loops

    replicas = strategy.num_replicas_in_sync
    lesson_batch = LESSON_PER_REPLICA * replicas
    x, y = lesson_images(8 * lesson_batch)
    # the first CPU device, as notebook 04_custom_training_loops compares with
    single = loops.reference_strategy()
    who = f"{replicas_text(replicas)} vs 1 device"
    rows = []

    n = settings.lesson_steps
    say(f"custom loop, global batch {lesson_batch}: warm-up, then {settings.repeats} x {n} steps")
    rows.append(
        _loop_row(
            "overhead_loop",
            f"custom loop, 28x28 uint8 images, Dense 128, global batch {lesson_batch} "
            f"({LESSON_PER_REPLICA} per replica), {who}",
            custom_loop(single, x, y, lesson_batch),
            custom_loop(strategy, x, y, lesson_batch),
            n,
            settings.repeats,
            TARGETS["overhead_loop"],
        )
    )

    choice = fitting.steps_per_execution_for(strategy, min(32, n))
    fit_steps = fitting.whole_executions(n, choice.value)  # Keras runs whole calls
    say(f"fit, global batch {lesson_batch}, steps_per_execution={choice.value}: {choice.reason}")
    ds = data.make_dataset(x, y, lesson_batch, replicas=replicas)
    # One device as notebook 03_keras_compile_and_fit times it: the default strategy, no scope around the model.
    models = [
        compiled(where, x.shape[1:], choice.value, input_dtype="uint8")
        for where in (tf.distribute.get_strategy(), strategy)
    ]
    labels = ["1 device", replicas_text(replicas)]
    cmp = fit_comparison(*time_fits(models, ds, fit_steps, settings.repeats, labels))
    fields = comparison_fields(cmp, "s/step", per=1)
    rows.append(
        row(
            "overhead_fit",
            TITLE,
            f"Keras fit as notebook 03_keras_compile_and_fit teaches it (uint8 input, static batches, "
            f"steps_per_execution={choice.value}), global batch {lesson_batch}, {who}",
            "1 device",
            "replicas",
            **fields,
            **_verdict(fields, TARGETS["overhead_fit"]),
        )
    )

    images = digits()
    n = settings.steps_per_call
    tiny = settings.global_batch
    say(f"custom loop, tiny model, global batch {tiny}: {settings.repeats} x {n} steps")
    rows.append(
        _loop_row(
            "overhead_tiny",
            f"custom loop, 8x8 digits, Dense 128, global batch {tiny} "
            f"({tiny // replicas} per replica), {who}",
            custom_loop(single, images.x_train, images.y_train, tiny),
            tiny_loop(strategy, settings),
            n,
            settings.repeats,
        )
    )
    return rows
