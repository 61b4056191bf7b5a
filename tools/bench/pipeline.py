"""The optimised input pipeline against the naive one, examples per second (notebook 06_input_pipelines)."""

from __future__ import annotations

import math
import tempfile

from bench.common import Settings, comparison_fields, digits, progress, row, say

__all__ = ["task_pipeline"]


def task_pipeline(strategy, settings: Settings) -> list[dict]:
    from helpers import pipelines, timing

    images = digits()
    stages = list(pipelines.STAGES)
    naive, best = stages[0], stages[-1]
    batches, size = settings.pipeline_batches, settings.pipeline_batch
    with tempfile.TemporaryDirectory() as folder:
        say(f"writing {len(images.x_train)} PNG-encoded {settings.photo_size}px photos")
        photos = pipelines.to_photos(images.x_train, settings.photo_size)
        files = pipelines.write_tfrecords(photos, images.y_train, folder, num_shards=8)
        iterators = {
            stage: iter(pipelines.build_pipeline(files, size, stage, out_size=settings.crop_size))
            for stage in (naive, best)
        }

        def draw(stage):
            def fn():
                for _ in range(batches):
                    batch = next(iterators[stage])
                return batch

            return fn

        # The warm-up draws at least one full pass, so the cache is full before timing. Many
        # batches per repetition keep small the head start a prefetching pipeline gets by
        # filling its buffer while the other one is being timed.
        passes = batches * size / len(images.x_train)
        say(f"warm-up, then {settings.repeats} x {batches} batches of {size} each way")
        cmp = timing.compare(
            draw(naive),
            draw(best),
            repeats=settings.repeats,
            warmup=max(1, math.ceil(1 / passes)),
            on_repeat=progress("naive vs optimised:", "examples/s", batches * size),
        )
    return [
        row(
            "pipeline",
            "input pipeline throughput",
            f"TFRecords, PNG {settings.photo_size}px, crop {settings.crop_size}px, batch {size}",
            f'"{naive}" stage',
            f'"{best}" stage',
            **comparison_fields(cmp, "examples/s", per=batches * size),
        )
    ]
