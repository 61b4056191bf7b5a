"""``compile(steps_per_execution=N)`` against 1 in Keras ``fit`` (notebook 03_keras_compile_and_fit), where it runs."""

from __future__ import annotations

from bench.common import (
    Settings,
    comparison_fields,
    digits,
    error_reason,
    fit_comparison,
    replicas_text,
    row,
    say,
)

__all__ = ["compiled", "task_fit_steps_per_execution", "time_fits"]

TITLE = "steps_per_execution in fit"


def compiled(strategy, image_shape, steps_per_execution: int, input_dtype: str = "float32"):
    """The lessons' classifier compiled for ``fit`` in ``strategy.scope()``."""
    import keras

    from helpers import models

    with strategy.scope():
        model = models.build_classifier(image_shape, seed=0, input_dtype=input_dtype)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=steps_per_execution,
        )
    return model


def time_fits(models, ds, steps: int, repeats: int, labels=None) -> list:
    """``helpers.fitting.time_fit`` of each model: an untimed epoch (tracing, the input pipeline
    starting), then ``repeats`` timed epochs of ``steps`` steps. One ``fit`` call per model, not
    alternating calls: on 8 replicas each new ``fit`` call sets up its distributed input again,
    which took from seconds to over a minute here."""
    from helpers import fitting

    timings = []
    for model, label in zip(models, labels or [None] * len(models), strict=True):
        timed = fitting.time_fit(model, ds, steps, epochs=repeats)
        say(f"{label or model.name}, steps_per_execution={model.steps_per_execution}: {timed}")
        timings.append(timed)
    return timings


def task_fit_steps_per_execution(strategy, settings: Settings) -> list[dict]:
    """``helpers.fitting.steps_per_execution_for`` says what the strategy supports.

    Where it says 1 (a MirroredStrategy of 2+ replicas with collective all-reduce), the task
    checks that the failure is real (2 steps per execution) and reports it; should a Keras
    release fix it, the row is measured instead. With 2+ replicas it then measures the same fit
    on the same devices with ``ReductionToOneDevice``, the cross-device ops with which
    ``fitting`` says several steps per execution do run.
    """
    import tensorflow as tf

    from helpers import data, fitting

    images = digits()
    replicas = strategy.num_replicas_in_sync
    n = settings.steps_per_call
    fit_steps = settings.fit_steps // n * n  # whole executions only
    ds = data.make_dataset(images.x_train, images.y_train, settings.global_batch, replicas=replicas)
    base, cand = "steps_per_execution=1", f"steps_per_execution={n}"

    def measure(strat, key, setting):
        models = [compiled(strat, images.image_shape, spe) for spe in (1, n)]
        say(f"fit each: 1 warm-up + {settings.repeats} timed epochs of {fit_steps} steps")
        cmp = fit_comparison(*time_fits(models, ds, fit_steps, settings.repeats))
        return row(key, TITLE, setting, base, cand, **comparison_fields(cmp, "s/step", per=1))

    setting = f"Keras fit, {replicas_text(replicas)}, global batch {settings.global_batch}"
    choice = fitting.steps_per_execution_for(strategy, n)
    say(f"helpers.fitting chooses steps_per_execution={choice.value}: {choice.reason}")
    if choice.value > 1:
        return [measure(strategy, f"fit_spe_{replicas}", setting)]

    ops = fitting.cross_device_ops_name(strategy)
    setting += f", {ops or 'default cross-device ops'}"
    say(f"does fit run with steps_per_execution=2 on {replicas_text(replicas)} anyway?")
    try:
        compiled(strategy, images.image_shape, 2).fit(ds, epochs=1, steps_per_epoch=4, verbose=0)
    except Exception as err:  # the Keras 3 bug: report it, do not hide it
        reason = error_reason(err)
        say(f"not supported: {reason}")
        tried = "steps_per_execution=2 (the smallest > 1)"
        rows = [
            row(
                f"fit_spe_{replicas}",
                TITLE,
                setting,
                base,
                tried,
                status="not supported",
                reason=reason,
                choice=choice.reason,
            )
        ]
    else:
        say("it runs: this Keras no longer has the bug; measuring it")
        rows = [measure(strategy, f"fit_spe_{replicas}", setting)]
        rows[0]["note"] = f"helpers.fitting still chooses 1 here ({choice.reason}): outdated."

    devices = list(strategy.extended.worker_devices)
    safe = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    safe_choice = fitting.steps_per_execution_for(safe, n)
    say(f"same devices with ReductionToOneDevice: {safe_choice.reason}")
    safe_setting = (
        f"Keras fit, {replicas_text(replicas)}, global batch {settings.global_batch}, "
        "ReductionToOneDevice"
    )
    key = f"fit_spe_{replicas}_reduce_to_one"
    if safe_choice.value > 1:
        rows.append(measure(safe, key, safe_setting))
    else:
        rows.append(
            row(
                key,
                TITLE,
                safe_setting,
                base,
                cand,
                status="not supported",
                reason=safe_choice.reason,
            )
        )
    return rows
