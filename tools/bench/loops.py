"""Many training steps per ``tf.function`` call against one step per call (notebook 04_custom_training_loops)."""

from __future__ import annotations

from bench.common import Settings, comparison_fields, progress, row, say, steps, tiny_loop

__all__ = ["task_steps_per_call"]


def task_steps_per_call(strategy, settings: Settings) -> list[dict]:
    """The same traced function runs either 1 step per call (called N times) or N per call."""
    from helpers import timing

    n = settings.steps_per_call
    _, train_steps, iterator = tiny_loop(strategy, settings)
    one, many = steps(1), steps(n)

    def one_per_call():
        for _ in range(n):
            loss = train_steps(iterator, one)
        return loss

    say(f"warm-up (tracing), then {settings.repeats} x {n} steps each way")
    cmp = timing.compare(
        one_per_call,
        lambda: train_steps(iterator, many),
        repeats=settings.repeats,
        on_repeat=progress(f"1 vs {n} steps per call:", "s/step", n),
    )
    replicas = strategy.num_replicas_in_sync
    return [
        row(
            "steps_per_call",
            "training steps per tf.function call",
            f"custom loop, {replicas} replicas, global batch {settings.global_batch}",
            "1 step per call",
            f"{n} steps per call",
            **comparison_fields(cmp, "s/step", per=n),
        )
    ]
