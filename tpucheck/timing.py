"""Timing that a reader can trust: synchronised, warmed up, repeated (notebooks 03_keras_compile_and_fit to 06_input_pipelines).

Three rules make a timing of TensorFlow code mean something:

- **synchronise**: a call may return before the device has finished (TPUs and GPUs run
  asynchronously), so the clock stops only after the result has been fetched to the host;
- **warm up**: the first call of a ``tf.function`` traces and compiles it, which can take longer
  than hundreds of steps; warm-up calls are run and thrown away;
- **repeat**: other programs share the machine, so one measurement is noise; report the median
  of several repetitions and their spread (min to max).

To compare two variants, :func:`compare` alternates them (A B, B A, A B ...) so that a slow spell
of the machine hits both, and reports the ratio of their medians with the spread of the ratios
of each pair; :func:`compare_timings` and :func:`compare_throughput` let several tasks or
``tf.data`` pipelines take turns (notebook 06_input_pipelines). :func:`epoch_timer` is the same clock for Keras ``fit``, one reading per epoch.
The lessons' timings come from this module.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpucheck.batches import positive_int

__all__ = [
    "compare",
    "compare_throughput",
    "compare_timings",
    "Comparison",
    "epoch_timer",
    "to_host",
    "Throughput",
    "time_call",
    "Timing",
]


def to_host(result):
    """Bring ``result`` to the host and return it as numpy / Python values.

    Walks lists, tuples and dicts; anything with a ``.numpy()`` method (TensorFlow tensors,
    per-replica values' components) is converted, which waits for the device to finish.
    """
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

    def per(self, units: float) -> Timing:
        """Seconds per unit of work (e.g. per step when each repetition ran ``units`` steps)."""
        if not units > 0:
            raise ValueError(f"units must be positive, got {units}")
        return Timing(tuple(s / units for s in self.seconds))

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
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each synchronised.

    Each call's result goes through :func:`to_host` before the clock stops. ``on_repeat(i,
    seconds)`` is called after each timed repetition (progress output).
    """
    _check_counts(repeats, warmup)
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
        """Median baseline time / median candidate time: above 1, the candidate is faster.

        The ratio of the two medians agrees with the medians a reader sees side by side; the
        paired ratios (``ratios``) give its spread.
        """
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
    """Time two callables that do the same work, alternating their order in every repetition.

    Both are warmed up first. ``on_repeat(i, baseline_seconds, candidate_seconds)`` reports
    progress.
    Taught in notebook 04.
    """
    _check_counts(repeats, warmup)
    for _ in range(warmup):
        to_host(baseline())
        to_host(candidate())
    base, cand = [], []
    for i in range(repeats):
        if i % 2:  # every other pair runs the candidate first, so drift does not favour one
            cand.append(_timed(candidate))
            base.append(_timed(baseline))
        else:
            base.append(_timed(baseline))
            cand.append(_timed(candidate))
        if on_repeat:
            on_repeat(i, base[-1], cand[-1])
    return Comparison(Timing(tuple(base)), Timing(tuple(cand)))


def epoch_timer():
    """A Keras callback that records each epoch's wall-clock seconds in ``.seconds``.

    Keras fetches an epoch's logs before ``on_epoch_end``, so the device work is finished when
    the clock stops. The first epoch includes tracing and compiling; compare the later ones.
    Taught in notebook 05.
    """
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []
            self._start = 0.0

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
    """Seconds per call of several tasks, measured in one run, the tasks taking turns.

    ``setups[name]()`` returns the task to time (a function of no arguments). It is called
    afresh at the start of every round, so build new ``tf.data`` iterators there: an iterator
    keeps preparing batches in the background, and an old one would hand its stock to the next
    timing, or steal CPU while another task is timed. In each round each task runs ``warmup``
    untimed calls and ``calls`` timed ones (:func:`time_call`); the result holds
    one value per round, the median seconds per call of that round. Taking turns means a burst
    of load from other programs hits every task, not one.
    Taught in notebook 06.
    """
    if not setups:
        raise ValueError("nothing to time")
    positive_int("rounds", rounds)
    per_round: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, setup in setups.items():
            task = setup()
            measured = time_call(task, repeats=calls, warmup=warmup)
            per_round[name].append(measured.median)
            del task  # drop the iterator now: its background threads stop
    return {name: Timing(tuple(values)) for name, values in per_round.items()}


def _batch_size(batch) -> int:
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.shape[0])


@dataclass(frozen=True)
class Throughput:
    """One pipeline measured over several rounds: seconds per batch, by the wall clock and in
    CPU time of the whole process (all its threads), one value of each per round.
    """

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
    """Measure each ``tf.data`` pipeline's throughput and CPU cost in one run (notebook 06_input_pipelines).

    Fill any ``cache()`` first (``pipelines.fill_caches``), or the first round times the filling.
    For ``rounds`` rounds the pipelines take turns: each gets
    a fresh iterator (an old one would have prepared batches in the background while another
    pipeline was timed), ``warmup`` untimed batches, then as many batches as it can deliver in
    ``seconds``. Every pipeline is timed for the same duration, so a pause of the machine costs
    a fast pipeline no larger share of its measurement than a slow one.

    Two clocks run during the timed batches. The wall clock gives examples per second, which
    parallelism improves and other programs on the machine spoil. The process's CPU time gives
    the work done per example, which parallelism does not change (it spreads the same work over
    more cores) but caching and vectorising reduce, and which barely depends on the load.
    Taught in notebook 06.
    """
    if not pipelines:
        raise ValueError("no pipelines to measure")
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"seconds must be a positive number, got {seconds!r}")
    for label, value, low in (("warmup", warmup, 0), ("rounds", rounds, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{label} must be an integer >= {low}, got {value!r}")
    sizes: dict[str, int] = {}
    for name, ds in pipelines.items():
        sizes[name] = _batch_size(next(iter(ds)))
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


def _check_counts(repeats, warmup) -> None:
    positive_int("repeats", repeats)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"
