"""The classic Keras TPU recipe against the collection's (notebooks 03_keras_compile_and_fit and 06_input_pipelines), in examples per
second of ``fit``, with what each change contributes.

The stages, the model and the timing are the TPU self-test's (``helpers.selftest.speed``): the
classic recipe (Dense 128, 128 per replica, float32 pixels shuffled in a 60,000-element buffer,
one step per call, no cache), then uint8 input, then static cached prefetched batches, then
several steps per call where the strategy runs them.
"""

from __future__ import annotations

from bench.common import Settings, comparison_fields, fit_comparison, lesson_images, row, say

__all__ = ["task_recipes"]


def task_recipes(strategy, settings: Settings) -> list[dict]:
    from helpers import fitting
    from helpers.selftest import speed

    replicas = strategy.num_replicas_in_sync
    global_batch = speed.PER_REPLICA_BATCH * replicas
    pixels, labels = lesson_images(settings.recipe_examples)
    choice = fitting.steps_per_execution_for(strategy, 32)
    stages = speed.recipes(replicas, pixels, labels, choice.value)
    n = settings.recipe_steps
    say(
        f"{len(stages)} stages, global batch {global_batch}, {len(pixels):,} examples: each "
        f"1 warm-up + {settings.repeats} timed epochs of {n} steps"
    )
    timed = speed.time_recipes(strategy, stages, n, epochs=settings.repeats)
    for stage in stages:
        say(f"{stage['name']}: {global_batch / timed[stage['name']].median:,.0f} examples/s")
    setting = (
        f"Keras fit, 28x28 Fashion-MNIST, Dense 128, {speed.PER_REPLICA_BATCH} per replica x "
        f"{replicas} = {global_batch}, {len(pixels):,} examples"
    )
    first, last = stages[0]["name"], stages[-1]["name"]
    cmp = fit_comparison(timed[first], timed[last])
    rows = [
        row(
            f"recipe_{replicas}",
            f"Keras recipe, {'simulated TPU' if replicas > 1 else 'one device'}",
            setting,
            "classic recipe",
            "this collection's recipe",
            **comparison_fields(cmp, "examples/s", per=global_batch),
            stages={stage["name"]: stage["change"] for stage in stages},
        )
    ]
    for before, stage in zip(stages, stages[1:], strict=False):
        cmp = fit_comparison(timed[before["name"]], timed[stage["name"]])
        rows.append(
            row(
                f"recipe_{replicas}_{stage['name'].replace(' ', '_')}",
                "Keras recipe: one change",
                stage["change"],
                f'"{before["name"]}"',
                f'"{stage["name"]}"',
                **comparison_fields(cmp, "examples/s", per=global_batch),
            )
        )
    return rows
