"""tpucheck.timing: synchronisation, warm-up, repetitions, alternation and the summaries.

A fake clock makes every timing exact, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FakeClock

from tpucheck import timing


class Pending:
    """Stands in for a device tensor: fetching it (``.numpy()``) takes ``cost`` seconds."""

    def __init__(self, clock, cost, value=1.0):
        self.clock, self.cost, self.value = clock, cost, value
        self.fetched = 0

    def numpy(self):
        self.clock.now += self.cost
        self.fetched += 1
        return np.float32(self.value)


def work(clock, log, name, call_cost, fetch_cost):
    """A callable that 'runs' for call_cost and returns a result that needs fetch_cost more."""

    def fn():
        log.append(name)
        clock.now += call_cost
        return Pending(clock, fetch_cost)

    return fn


def test_fetch_converts_nested_results():
    clock = FakeClock()
    a, b = Pending(clock, 0, 2.0), Pending(clock, 0, 3.0)
    out = timing.to_host({"loss": a, "parts": [b, "text"], "pair": (1, None)})
    assert out == {"loss": 2.0, "parts": [3.0, "text"], "pair": (1, None)}
    assert isinstance(out["parts"], list) and isinstance(out["pair"], tuple)
    assert a.fetched == b.fetched == 1


def test_fetch_real_tensor_returns_numpy():
    tf = pytest.importorskip("tensorflow")
    out = timing.to_host((tf.constant([1.0, 2.0]), {"x": tf.constant(3)}))
    assert isinstance(out[0], np.ndarray) and out[0].tolist() == [1.0, 2.0]
    assert out[1]["x"] == 3


def test_time_call_includes_the_fetch_and_skips_warmup(clock):
    log, seen = [], []
    fn = work(clock, log, "f", call_cost=1.0, fetch_cost=2.0)
    result = timing.time_call(fn, repeats=4, warmup=2, on_repeat=lambda i, s: seen.append((i, s)))
    assert len(log) == 6  # 2 warm-up calls + 4 timed ones
    assert result.seconds == (3.0, 3.0, 3.0, 3.0)  # the clock stopped after the fetch
    assert seen == [(0, 3.0), (1, 3.0), (2, 3.0), (3, 3.0)]


def test_warmup_time_is_not_counted(clock):
    costs = iter([100.0, 1.0, 2.0, 3.0])  # a slow first call, as when tracing

    def fn():
        clock.now += next(costs)

    result = timing.time_call(fn, repeats=3, warmup=1)
    assert result.seconds == (1.0, 2.0, 3.0)
    assert (result.median, result.low, result.high) == (2.0, 1.0, 3.0)


def test_compare_alternates_and_pairs_ratios(clock):
    log = []
    slow = work(clock, log, "base", call_cost=3.0, fetch_cost=1.0)
    fast = work(clock, log, "cand", call_cost=1.0, fetch_cost=1.0)
    pairs = []
    result = timing.compare(slow, fast, repeats=3, warmup=1, on_repeat=lambda *a: pairs.append(a))
    assert log == ["base", "cand", "base", "cand", "cand", "base", "base", "cand"]
    assert result.baseline.seconds == (4.0, 4.0, 4.0)
    assert result.candidate.seconds == (2.0, 2.0, 2.0)
    assert result.ratios == (2.0, 2.0, 2.0) and result.speedup == 2.0
    assert pairs == [(0, 4.0, 2.0), (1, 4.0, 2.0), (2, 4.0, 2.0)]
    assert str(result).startswith("2.00x")


def test_speedup_is_the_ratio_of_medians_and_pairs_give_the_spread(clock):
    base = iter([10.0, 4.0, 6.0])
    cand = iter([5.0, 4.0, 1.0])

    def b():
        clock.now += next(base)

    def c():
        clock.now += next(cand)

    result = timing.compare(b, c, repeats=3, warmup=0)
    assert result.ratios == (2.0, 1.0, 6.0)
    assert result.speedup == 6.0 / 4.0  # median 6 s against median 4 s
    assert "1.50x (spread 1.00x to 6.00x, 3 pairs)" == str(result)


def test_timing_text():
    t = timing.Timing((0.002, 0.004, 0.003))
    assert t.median == pytest.approx(0.003) and t.high == pytest.approx(0.004)
    assert "3.0 ms" in str(t) and "3 runs" in str(t)
    assert "s (spread" in str(timing.Timing((2.0,)))


@pytest.mark.parametrize(
    "seconds, match", [((), "at least one"), ((1.0, 0.0), "positive"), ((-1.0,), "positive")]
)
def test_timing_rejects_impossible_measurements(seconds, match):
    with pytest.raises(ValueError, match=match):
        timing.Timing(seconds)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"repeats": 0}, "repeats must be a positive integer"),
        ({"repeats": 2.5}, "repeats must be a positive integer"),
        ({"repeats": True}, "repeats must be a positive integer"),
        ({"warmup": -1}, "warmup must be a non-negative integer"),
    ],
)
def test_bad_counts_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.time_call(lambda: None, **kwargs)
    with pytest.raises(ValueError, match=match):
        timing.compare(lambda: None, lambda: None, **kwargs)
