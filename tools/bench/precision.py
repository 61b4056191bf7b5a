"""``mixed_bfloat16`` against ``float32``: step time and memory (notebook 05_bfloat16_mixed_precision)."""

from __future__ import annotations

import functools
import math

from bench.common import (
    Settings,
    comparison_fields,
    custom_loop,
    digits,
    progress,
    replicas_text,
    row,
    say,
    steps,
)

__all__ = ["task_mixed_bfloat16"]


def task_mixed_bfloat16(strategy, settings: Settings) -> list[dict]:
    from helpers import precision, timing

    images = digits()
    n = settings.steps_per_call
    batch = images.x_train[: settings.global_batch]
    runs = {}
    for policy in ("float32", "mixed_bfloat16"):
        with precision.global_policy(policy):  # restored afterwards, even on an error
            model, train_steps, iterator = custom_loop(
                strategy,
                images.x_train,
                images.y_train,
                settings.global_batch,
                hidden=settings.bf16_hidden,
            )
            runs[policy] = {
                "step": functools.partial(train_steps, iterator, steps(n)),
                "weights": precision.weight_bytes(model),
                "activations": sum(precision.activation_bytes(model, batch).values()),
            }
    f32, bf16 = runs["float32"], runs["mixed_bfloat16"]
    say(f"warm-up, then {settings.repeats} x {n} steps each way")
    cmp = timing.compare(
        f32["step"],
        bf16["step"],
        repeats=settings.repeats,
        on_repeat=progress("float32 vs mixed_bfloat16:", "s/step", n),
    )
    features = math.prod(images.image_shape)
    setting = (
        f"custom loop, {replicas_text(strategy.num_replicas_in_sync)}, "
        f"MLP {features}-{settings.bf16_hidden}-10, batch {settings.global_batch}"
    )
    rows = [
        row(
            "bf16_step",
            "mixed_bfloat16: step time",
            setting,
            "float32",
            "mixed_bfloat16",
            **comparison_fields(cmp, "s/step", per=n),
        )
    ]
    for what, text in (("activations", "activation memory"), ("weights", "weight memory")):
        base, cand = f32[what], bf16[what]
        rows.append(
            row(
                f"bf16_{what}",
                f"mixed_bfloat16: {text}",
                setting + (", one batch" if what == "activations" else ""),
                "float32",
                "mixed_bfloat16",
                unit="bytes",
                baseline_value=base,
                candidate_value=cand,
                ratio=base / cand,
                ratio_low=base / cand,
                ratio_high=base / cand,
                better="smaller",
                runs=1,
                exact=True,
            )
        )
    return rows
