"""Timing that a reader can trust: synchronised, warmed up, repeated (notebooks
03_keras_compile_and_fit to 06_input_pipelines). The clock stops once the result is on the host
(a TPU runs asynchronously), the first calls (tracing, compiling) run untimed, the median of
several repetitions is reported with their spread, and variants take turns (:func:`compare`:
A B, B A, ...) so that a slow spell of the machine hits them all."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpucheck.batches import positive_int


def to_host(result):
    """``result`` (or lists, tuples, dicts of it) on the host: ``.numpy()`` waits for the device."""
    if isinstance(result, dict):
        return {key: to_host(value) for key, value in result.items()}
    if isinstance(result, (list, tuple)):
        return type(result)(to_host(value) for value in result)
    if hasattr(result, "numpy"):
        return result.numpy()
    return result


@dataclass(frozen=True)
class Timing:
    """Seconds measured over repetitions; ``median``, ``low`` and ``high`` summarise them."""

    seconds: tuple[float, ...]

    def __post_init__(self):
        if not self.seconds:
            raise ValueError("a Timing needs at least one measurement")
        if any(not s > 0 for s in self.seconds):
            raise ValueError(f"measured times must be positive, got {self.seconds}")

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def low(self) -> float:
        return min(self.seconds)

    @property
    def high(self) -> float:
        return max(self.seconds)

    def __str__(self) -> str:
        return (
            f"{_seconds(self.median)} (spread {_seconds(self.low)} to {_seconds(self.high)}, "
            f"{len(self.seconds)} runs)"
        )


def time_call(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    on_repeat: Callable[[int, float], None] | None = None,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronised
    (:func:`to_host`); ``on_repeat(i, seconds)`` reports progress."""
    _check_counts(warmup, repeats=repeats)
    for _ in range(warmup):
        to_host(fn())
    seconds = []
    for i in range(repeats):
        seconds.append(_timed(fn))
        if on_repeat:
            on_repeat(i, seconds[-1])
    return Timing(tuple(seconds))


@dataclass(frozen=True)
class Comparison:
    """A baseline and a candidate timed alternately; ``ratios`` are baseline / candidate."""

    baseline: Timing
    candidate: Timing

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(
            b / c for b, c in zip(self.baseline.seconds, self.candidate.seconds, strict=True)
        )

    @property
    def speedup(self) -> float:
        """Median baseline time / median candidate time: above 1, the candidate is faster."""
        return self.baseline.median / self.candidate.median

    def __str__(self) -> str:
        r = self.ratios
        return f"{self.speedup:.2f}x (spread {min(r):.2f}x to {max(r):.2f}x, {len(r)} pairs)"


def compare(
    baseline: Callable[[], object],
    candidate: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    on_repeat: Callable[[int, float, float], None] | None = None,
) -> Comparison:
    """Time two callables that do the same work, warmed up, alternating their order in every
    repetition; ``on_repeat(i, baseline_seconds, candidate_seconds)`` reports progress."""
    _check_counts(warmup, repeats=repeats)
    for _ in range(warmup):
        to_host(baseline())
        to_host(candidate())
    base, cand = [], []
    for i in range(repeats):
        pair = [(base, baseline), (cand, candidate)]
        # Every other pair runs the candidate first, so drift does not favour one.
        for times, fn in reversed(pair) if i % 2 else pair:
            times.append(_timed(fn))
        if on_repeat:
            on_repeat(i, base[-1], cand[-1])
    return Comparison(Timing(tuple(base)), Timing(tuple(cand)))


def epoch_timer():
    """A Keras callback that records each epoch's wall-clock seconds in ``.seconds`` (Keras
    fetches an epoch's logs before ``on_epoch_end``); the first includes tracing and compiling."""
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)

    return EpochTimer()


def compare_timings(
    setups: Mapping[str, Callable[[], Callable[[], object]]],
    *,
    calls: int,
    warmup: int = 1,
    rounds: int = 3,
) -> dict[str, Timing]:
    """Seconds per call of several tasks taking turns in ``rounds``: the median of each round's
    :func:`time_call` of ``setups[name]()``, a fresh task (build new ``tf.data`` iterators there:
    an old one keeps preparing batches in the background)."""
    if not setups:
        raise ValueError("nothing to time")
    _check_counts(warmup, rounds=rounds, calls=calls)
    per_round: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, setup in setups.items():
            task = setup()
            measured = time_call(task, repeats=calls, warmup=warmup)
            per_round[name].append(measured.median)
            del task  # drop the iterator now: its background threads stop
    return {name: Timing(tuple(values)) for name, values in per_round.items()}


@dataclass(frozen=True)
class Throughput:
    """One pipeline's seconds per batch in each round, by the wall clock and in CPU time of the
    whole process (all its threads)."""

    batch_size: int
    wall_seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]

    @property
    def examples_per_second(self) -> float:
        """From the fastest round: time lost to other programs is never the pipeline's doing."""
        return self.batch_size / min(self.wall_seconds)

    @property
    def cpu_us_per_example(self) -> float:
        """Median CPU microseconds per example: the work done, whatever the cores or the load."""
        return 1e6 * statistics.median(self.cpu_seconds) / self.batch_size


def compare_throughput(
    pipelines: Mapping[str, object],
    *,
    seconds: float = 1.0,
    warmup: int = 2,
    rounds: int = 3,
) -> dict[str, Throughput]:
    """Each ``tf.data`` pipeline's throughput and CPU cost (06_input_pipelines); fill any
    ``cache()`` first (``pipelines.fill_caches``), or the first round times the filling. In each
    round the pipelines take turns, each with a fresh iterator, ``warmup`` untimed batches, then
    the batches it delivers in ``seconds`` (the same time for each, so a pause of the machine
    costs a fast pipeline no larger share than a slow one)."""
    if not pipelines:
        raise ValueError("no pipelines to measure")
    if not 0 < seconds < math.inf:
        raise ValueError(f"seconds must be a positive number, got {seconds!r}")
    _check_counts(warmup, rounds=rounds)
    sizes = {}
    for name, ds in pipelines.items():
        batch = next(iter(ds))  # (features, labels), or features: the batch size is their first
        sizes[name] = int((batch[0] if isinstance(batch, (tuple, list)) else batch).shape[0])
    wall: dict[str, list[float]] = {name: [] for name in pipelines}
    cpu: dict[str, list[float]] = {name: [] for name in pipelines}
    for _ in range(rounds):
        for name, ds in pipelines.items():
            iterator = iter(ds)
            for _ in range(warmup):
                next(iterator)
            count, cpu_start = 0, time.process_time()
            start = now = time.perf_counter()
            while now - start < seconds:
                next(iterator)
                count += 1
                now = time.perf_counter()
            wall[name].append((now - start) / count)
            cpu[name].append((time.process_time() - cpu_start) / count)
            del iterator  # its background threads stop before the next pipeline is timed
    return {
        name: Throughput(sizes[name], tuple(wall[name]), tuple(cpu[name])) for name in pipelines
    }


def _timed(fn) -> float:
    start = time.perf_counter()
    to_host(fn())
    return time.perf_counter() - start


def _check_counts(warmup, **counts) -> None:
    for name, value in counts.items():
        positive_int(name, value)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"
