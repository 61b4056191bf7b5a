"""Capture a profile of a few training steps and read it without TensorBoard.

The profiler writes one ``<host>.xplane.pb`` per capture: every op, ``tf.data`` stage and
``tf.function`` call, with its start and duration, on every thread. :func:`capture` and
:func:`step` (or :func:`profile_calls`, or :func:`fit_callback` in ``fit``) record marked steps;
:func:`extract` reads the file into a small JSON-ready dict, :func:`summarize` computes the
shares of each call (waiting for input, ops computing, the host's own work), the training steps
per call and the calls that traced; :func:`diagnose` turns them into "retracing",
"input-bound", "host-overhead", "compute-bound" or "healthy", with the numbers that decided it.
:func:`profiler_tool` runs one of XProf's own analyses on the same file; :func:`main` is
``python -m tpucheck profile LOGDIR``. The tests read dicts extracted from real profiles.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The step marker: a TraceMe of this name with a step_num stat is a step to the profiler's tools.
STEP_EVENT = "train"
# What Keras 3's TensorBoard(profile_batch=...) wraps each batch in, without the _r=1 of a root
# step marker (Keras 3.15): the steps of a profile without STEP_EVENT markers.
KERAS_BATCH_EVENT = "Profiled batch"
# A deciding share within this of its line is borderline: profiles of one run on a busy machine
# moved by more (lesson 11_profiling_a_training_step's run C: host 42%, then 33%).
BORDERLINE_MARGIN = 0.03
_INPUT_EVENT = re.compile(r"IteratorGetNext|GetNextFromShard|MultiDeviceIteratorGetNext")
# A replica taking its batch inside the call (not GetNextFromShard0: the host's thread fetches
# ahead, past the step that consumed it). TensorFlow tags it with the call's step id ("id") and the
# iteration of the loop it runs in ("iter_num", 0 outside a loop): one pair per training step, the
# same for every replica. The thread it runs on says nothing: a retraced call takes its batches on
# new threads, and many threads share a name ("python").
_BATCH_EVENT = "IteratorGetNextOp::DoCompute"
_BATCH_STATS = ("id", "iter_num")
_OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z0-9_]+)$")  # "<node>:<op type>"
# The lines diagnose() draws, as shares; its docstring says why each is where it is.
INPUT_BOUND_SHARE = 0.20  # input waits, of the call's time
HOST_BOUND_SHARE = 0.40  # the host's own work, of the call's time not spent waiting for input
HEALTHY_INPUT_SHARE = 0.05  # "healthy" needs input waits below this share of the call
HEALTHY_HOST_SHARE = 0.15  # and host work below this share of the time not waiting for input


@contextlib.contextmanager
def capture(logdir: str | os.PathLike) -> Iterator[dict]:
    """Profile the ``with`` block (a few steps: the file grows with every op) into ``logdir``;
    the yielded dict's ``"xplane"`` is then the ``.xplane.pb`` written."""
    import tensorflow as tf

    logdir = os.fspath(logdir)
    # Two captures in the same second share a run folder, and the second overwrites the first.
    before = {path: os.stat(path).st_mtime_ns for path in _xplanes(logdir)}
    result: dict = {}
    tf.profiler.experimental.start(logdir)
    try:
        yield result
    finally:
        tf.profiler.experimental.stop()
    new = sorted(p for p in _xplanes(logdir) if before.get(p) != os.stat(p).st_mtime_ns)
    if not new:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
    result["xplane"] = new[-1]


def profile_calls(
    logdir: str | os.PathLike, call, calls: int, *, warmup: int = 2
) -> tuple[str, dict]:
    """Profile ``calls`` calls of ``call(i)`` (one step, or many in one call), each marked as a
    step and fetched inside it; return ``(xplane path, extract(xplane path))``. Run it once
    before (no first trace in the profile); ``warmup`` unrecorded calls just before use up what
    prefetch buffers filled meanwhile, which would hide waits."""
    for i in range(warmup):
        _fetch(call(-1 - i))
    for attempt in (1, 2):
        with capture(logdir) as captured:
            for i in range(calls):
                with step(i):
                    _fetch(call(i))
        try:
            return captured["xplane"], extract(captured["xplane"])
        except NoStepMarkers:
            if attempt == 2:  # seen once on a loaded machine: every op, no marker; redone once
                raise
            print(
                f"Notice: the profiler lost the step markers of {captured['xplane']}; profiling again."
            )


def _fetch(result) -> None:
    """Wait for ``result``: fetch every tensor in it to the host."""
    import tensorflow as tf

    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)


def _xplanes(logdir: str) -> list[str]:
    return glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))


def step(number: int):
    """Mark one training step (a context manager), so the trace knows where steps begin and end."""
    import tensorflow as tf

    return tf.profiler.experimental.Trace(STEP_EVENT, step_num=int(number), _r=1)


def fit_callback(logdir: str | os.PathLike, first: int = 2, last: int = 5):
    """A Keras callback that profiles batches ``first`` to ``last`` of ``fit``, each marked as a
    step (the root marker Keras' TensorBoard callback leaves out; no ``tensorboard`` package
    needed); ``callback.xplane`` is then the file. A batch is one call: steps_per_execution."""
    import keras
    import tensorflow as tf

    logdir = os.fspath(logdir)

    class ProfileBatches(keras.callbacks.Callback):
        xplane: str | None = None
        _marker = None

        def on_train_batch_begin(self, batch, logs=None):
            if batch == first and self.xplane is None:
                self._before = set(_xplanes(logdir))
                tf.profiler.experimental.start(logdir)
            if first <= batch <= last and self.xplane is None:
                self._marker = step(batch)
                self._marker.__enter__()

        def on_train_batch_end(self, batch, logs=None):
            if self._marker is not None:
                self._marker.__exit__(None, None, None)
                self._marker = None
                if batch == last:
                    tf.profiler.experimental.stop()
                    new = sorted(set(_xplanes(logdir)) - self._before)
                    self.xplane = new[-1] if new else None

    return ProfileBatches()


@contextlib.contextmanager
def retracing_warning_hidden():
    """Hide TensorFlow's "triggered tf.function retracing" warning (after five retraces in a
    row: no substitute for a profile) for the ``with`` block."""
    logger = logging.getLogger("tensorflow")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


class NoStepMarkers(ValueError):
    """A profile without the :func:`step` markers that say where each training step begins."""


def _xplane_proto():
    from tpucheck import _tf

    return _tf.xplane_proto()


def extract(xplane_path: str | os.PathLike) -> dict:
    """Read a ``.xplane.pb`` into the small dict :func:`summarize` works on (JSON-ready; times in
    microseconds from the first step). Only the host planes are read (``"planes"``);
    ``"device_planes"`` names the TPU or GPU planes the file also holds."""
    proto = _xplane_proto().XSpace()
    with open(xplane_path, "rb") as f:
        proto.ParseFromString(f.read())
    host = [p for p in proto.planes if p.name.startswith("/host:")]
    if not host:
        raise ValueError(f"no host plane in {xplane_path}")
    markers: dict[str, list] = {STEP_EVENT: [], KERAS_BATCH_EVENT: []}
    inputs, compute = [], []
    taken: dict[tuple, float] = {}  # (plane, step id, loop iteration) -> the first replica's take
    untagged: dict[tuple, list] = {}  # (plane, thread) -> takes, for events without those stats
    op_time: dict[str, float] = {}
    data_time: dict[str, float] = {}
    functions: dict[str, dict] = {}
    for plane in host:  # every one: which holds the steps is not guaranteed to come first
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            origin = line.timestamp_ns * 1000  # picoseconds
            compute_line = line.name.startswith("tf_Compute")
            for event in line.events:
                name = names.get(event.metadata_id, "")
                start = (origin + event.offset_ps) / 1e6
                end = start + event.duration_ps / 1e6
                if name in markers:
                    markers[name].append([start, end])
                elif _INPUT_EVENT.search(name):
                    inputs.append([start, end])
                    if name == _BATCH_EVENT:
                        key = tuple(_stat(event, stat_names, s) for s in _BATCH_STATS)
                        if None in key:
                            untagged.setdefault((plane.name, line.id), []).append(start)
                        else:
                            key = (plane.name, *key)
                            taken[key] = min(start, taken.get(key, start))
                elif name.startswith("Iterator::"):
                    stage = name.split("::")[-1].split("[")[0]
                    data_time[stage] = data_time.get(stage, 0.0) + (end - start)
                elif compute_line and (match := _OP_EVENT.match(name)):
                    compute.append([start, end])
                    kind = match["type"]
                    op_time[kind] = op_time.get(kind, 0.0) + (end - start)
                mode = _stat(event, stat_names, "tf_function_call")
                if mode is not None:  # one call of a tf.function: "traced-..." when it traced
                    call = functions.setdefault(name, {"calls": 0, "traced": 0})
                    call["calls"] += 1
                    call["traced"] += int(mode.startswith("traced"))
    marker = STEP_EVENT if markers[STEP_EVENT] else KERAS_BATCH_EVENT
    steps = markers[marker]
    if not steps:
        seen = {p.name: sum(len(line.events) for line in p.lines) for p in proto.planes}
        raise NoStepMarkers(
            f"no step markers ({STEP_EVENT!r}, or Keras' {KERAS_BATCH_EVENT!r}) in "
            f"{xplane_path}: mark each step with tpucheck.profiling.step(n), or profile fit with "
            f"Keras' TensorBoard(profile_batch=...) (events per plane: {seen})"
        )
    steps.sort()
    zero = steps[0][0]
    first, last = steps[0][0], steps[-1][1]

    def inside(intervals):  # whole microseconds: precise enough, and a third of the size
        return [[round(a - zero), round(b - zero)] for a, b in intervals if b > first and a < last]

    return {
        "steps": inside(steps),
        "input": _merge(inside(inputs)),
        "compute": _merge(inside(compute)),
        "batches": _batches(taken, untagged, first, last, zero),
        "op_time_us": _top(op_time),
        "data_time_us": _top(data_time),
        "functions": functions,
        "step_marker": marker,
        "planes": [p.name for p in host],
        "device_planes": [p.name for p in proto.planes if p.name.startswith("/device:")],
    }


def _batches(taken: Mapping, untagged: Mapping, first: float, last: float, zero: float) -> list:
    """One time per training step inside the steps: each (step id, loop iteration) once, or,
    in a trace without those stats, the takes of the busiest thread."""

    def inside(starts):
        return [round(t - zero) for t in sorted(starts) if first <= t <= last]

    if taken:
        return inside(taken.values())
    return max((inside(starts) for starts in untagged.values()), key=len, default=[])


def _stat(event, stat_names: Mapping, wanted: str):
    """The value (a number or a string) of the stat called ``wanted`` of ``event``, or None.

    Repeated strings are stored once and referenced by id (``ref_value``)."""
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == wanted:
            kind = stat.WhichOneof("value")
            if kind == "ref_value":
                return stat_names.get(stat.ref_value, "")
            return getattr(stat, kind) if kind else None
    return None


def _top(times: Mapping[str, float], keep: int = 12) -> dict[str, float]:
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:keep]
    return {name: round(value, 1) for name, value in ranked}


def _merge(intervals: list) -> list:
    """Union of ``[start, end]`` intervals, sorted and non-overlapping (keeps the dict small)."""
    merged: list = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _covered(intervals: list, start: float, end: float) -> float:
    """Time inside ``[start, end]`` covered by merged ``intervals``."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)


@dataclass(frozen=True)
class ProfileSummary:
    """What a profile says about its marked calls (each may run several training steps): times
    in milliseconds, shares 0 to 1."""

    steps: int  # profiled calls (marked steps)
    mean_step_ms: float  # wall time of one call
    input_share: float  # of the call's time, the host or a replica waited for the next batch
    compute_share: float  # of the call's time, at least one op was computing (not waiting)
    batches_per_step: float  # training steps run inside one call, counted from batches taken
    retraced_calls: int  # tf.function calls inside the profile that traced a new graph
    # ms summed over every thread and every recorded call, so they can exceed the wall time
    slowest_ops: dict[str, float] = field(default_factory=dict)  # op type -> ms
    data_stages: dict[str, float] = field(default_factory=dict)  # tf.data stage -> ms
    planes: tuple[str, ...] = ()  # the planes read: the host's
    device_planes: tuple[str, ...] = ()  # device planes in the file (a TPU's), not read

    @property
    def evidence(self) -> str:
        """Which planes the numbers come from, and what that means for a TPU."""
        tpu_planes = [p for p in self.device_planes if "TPU" in p]
        if not tpu_planes:
            return (
                "read from the host plane only (no TPU device planes in this profile): what "
                "the host did, not how busy a TPU was; unverified on a TPU"
            )
        return (
            f"read from the host plane only; the profile also holds {len(tpu_planes)} TPU "
            "device plane(s), which this reader does not read: their idle time and infeed "
            "are in TensorBoard's Profile tab"
        )

    @property
    def host_share(self) -> float:
        """The rest of the call, no op computing and no input wait: the host's own work."""
        return max(0.0, 1.0 - self.input_share - self.compute_share)

    @property
    def host_ms_per_call(self) -> float:
        return self.host_share * self.mean_step_ms

    @property
    def host_share_without_input(self) -> float:
        """The host's share of the call once the input is fixed: what decides host overhead."""
        working = 1.0 - self.input_share
        return self.host_share / working if working > 0 else 0.0

    @property
    def ms_per_training_step(self) -> float:
        return self.mean_step_ms / self.batches_per_step if self.batches_per_step else math.nan

    def __str__(self) -> str:
        return (
            f"{self.steps} profiled calls of {self.mean_step_ms:.1f} ms: input "
            f"{self.input_share:.0%}, compute {self.compute_share:.0%}, host "
            f"{self.host_share:.0%} ({self.host_ms_per_call:.1f} ms per call); "
            f"{self.batches_per_step:g} training step(s) per call; "
            f"{self.retraced_calls} call(s) traced"
        )


def summarize(extracted: Mapping) -> ProfileSummary:
    """Compute a :class:`ProfileSummary` from the dict :func:`extract` returns."""
    steps = extracted["steps"]
    if not steps:
        raise ValueError("the profile has no steps")
    total = sum(b - a for a, b in steps)
    waited = sum(_covered(extracted["input"], a, b) for a, b in steps)
    # Input waits are not computing, even when a replica's op is waiting inside one.
    busy = sum(_covered(extracted["compute"], a, b) for a, b in steps)
    both = sum(
        _covered(_intersect(extracted["input"], extracted["compute"]), a, b) for a, b in steps
    )
    return ProfileSummary(
        steps=len(steps),
        mean_step_ms=total / len(steps) / 1e3,
        input_share=waited / total,
        compute_share=(busy - both) / total,
        batches_per_step=_per_call(extracted),
        retraced_calls=sum(f["traced"] for f in extracted["functions"].values()),
        slowest_ops={k: v / 1e3 for k, v in extracted["op_time_us"].items()},
        data_stages={k: v / 1e3 for k, v in extracted["data_time_us"].items()},
        planes=tuple(extracted.get("planes", ())),
        device_planes=tuple(extracted.get("device_planes", ())),
    )


def _per_call(extracted: Mapping) -> float:
    """Batches taken per marked step: the training steps one call ran."""
    steps, batches = extracted["steps"], extracted["batches"]
    return sum(sum(a <= t <= b for t in batches) for a, b in steps) / len(steps)


def _intersect(first: list, second: list) -> list:
    out, i, j = [], 0, 0
    while i < len(first) and j < len(second):
        start, end = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        if start < end:
            out.append([start, end])
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True)
class Diagnosis:
    """A verdict of :func:`diagnose` and the numbers that decided it."""

    verdict: str  # "retracing", "input-bound", "host-overhead", "compute-bound" or "healthy"
    reason: str  # the numbers that decided it
    fix: str
    findings: tuple[str, ...] = ()  # every problem whose line was crossed, the verdict first
    borderline: tuple[str, ...] = ()  # each line a deciding share is within BORDERLINE_MARGIN of
    evidence: str = ""  # which planes the numbers come from (ProfileSummary.evidence)

    @property
    def label(self) -> str:
        """The verdict as printed: with " (borderline)" when a deciding share is near its line."""
        return f"{self.verdict} (borderline)" if self.borderline else self.verdict

    def __str__(self) -> str:
        also = [f for f in self.findings if f != self.verdict]
        text = f"{self.label}: {self.reason}. Fix: {self.fix}" + (
            f" (also: {', '.join(also)})" if also else ""
        )
        if self.borderline:
            text += f". Borderline: {'; '.join(self.borderline)}"
        return text + (f". Evidence: {self.evidence}" if self.evidence else "")


# What to do about each verdict.
FIXES = {
    "retracing": "pass values that change as tensors (tf.constant), not Python numbers, and keep "
    "shapes static: drop_remainder=True, pad to fixed lengths (padded_shapes), or give the "
    "tf.function an input_signature with None where a size really changes",
    "input-bound": "parallel map, cache, prefetch and vectorise the tf.data pipeline (notebook "
    "06), and keep Python (tf.py_function, from_generator) out of it (notebook 10_tpu_readiness_check)",
    "host-overhead": "run many steps per call: steps_per_execution in fit (notebook 03_keras_compile_and_fit), "
    "a tf.range loop in one tf.function (notebook 04_custom_training_loops)",
    "compute-bound": "the ops take the largest part: start with the slowest op types, then "
    "bfloat16 (notebook 05_bfloat16_mixed_precision), a per-replica batch and layer "
    "widths in multiples of 128 that fill the TPU's matrix tiles (notebook 10_tpu_readiness_check)",
    "healthy": "nothing outside the ops to fix in this profile; for more speed, the ops "
    "themselves: the slowest op types, bfloat16 (notebook 05_bfloat16_mixed_precision), tile-filling sizes (notebook 10_tpu_readiness_check)",
}
# A borderline verdict advises nothing: a rerun may land across its line (11_profiling_a_training_step's run B, once
# "compute-bound (borderline)", then took 23% off each step with more steps per call).
BORDERLINE_FIX = (
    "none from a borderline verdict: profile more calls, or again, and act on the verdict that "
    "holds; meanwhile the fixes of both sides of the line are candidates, to be measured"
)
HOST_WORK_IN_STEPS_FIX = (
    "each call already runs several training steps, so the host's work is inside them "
    "(launching every op on every replica, Python in the step): give each op more work with a "
    "larger per-replica batch and keep Python out of the step; on a TPU, XLA compiles the whole "
    "step into one program, so profile there before acting (unverified on hardware)"
)


def diagnose(summary: ProfileSummary) -> Diagnosis:
    """Decide what limits the profiled calls from the numbers of ``summary`` only.

    Three problems each have a line; ``findings`` lists every one crossed, the verdict first:

    1. **retracing**: more than one ``tf.function`` call traced inside the profile (one can be
       a first call). Tracing is host work too; it is the cause, so this verdict comes first.
    2. **input-bound**: input waits took at least ``INPUT_BOUND_SHARE`` (20%) of each call,
       where XProf calls a step "highly input-bound" (openxla/xprof,
       ``op_stats_to_input_pipeline_analysis.cc``); the fixes change the pipeline only.
    3. **host-overhead**: the host's own work (no op computing, nothing waiting for input) took
       at least ``HOST_BOUND_SHARE`` (40%) of the call's time not spent waiting for input.
       Removing it would make a call at most 1 / (1 - 0.4), about 1.7x, faster, the order of
       what many steps per call gain (04_custom_training_loops); the line keeps clear of what
       the simulated TPU pays in every run (20% to 35% of that time in the busy recordings of
       ``tests/data/tpucheck/profiles.json``); on a TPU unverified on hardware. Steps per call
       choose its fix, not the verdict: one, run many; several, :data:`HOST_WORK_IN_STEPS_FIX`.

    When both of the last two hold, the larger share of the call decides. When none holds, the
    ops took at least (1 - 0.2) x (1 - 0.4) = 48% of each call, and the verdict says how busy:
    4. **healthy**: input waits under ``HEALTHY_INPUT_SHARE`` (5%, XProf's "moderately
       input-bound") and host work under ``HEALTHY_HOST_SHARE`` (15% of the time not waiting,
       XProf's "highly" bound by "All Others" time): nothing outside the ops to fix;
    5. **compute-bound** otherwise: the slowest op types are the next place to look.

    A verdict is **borderline** when a deciding share lies within ``BORDERLINE_MARGIN`` of its
    line: its fix advises nothing (:data:`BORDERLINE_FIX`). ``evidence`` says which planes were
    read: on a CPU, the host's only.
    """
    s = summary
    shares = {"input-bound": s.input_share, "host-overhead": s.host_share}
    crossed = {
        "input-bound": s.input_share >= INPUT_BOUND_SHARE,
        "host-overhead": s.host_share_without_input >= HOST_BOUND_SHARE,
    }
    # The larger share first; on a tie input (its fixes leave the model alone).
    problems = sorted((name for name, held in crossed.items() if held), key=lambda n: -shares[n])
    if s.retraced_calls > 1:
        problems.insert(0, "retracing")
    call = f"each {s.mean_step_ms:.1f} ms call"
    near = _near_lines(s, healthy_lines=not problems)  # those lines decide only without problems
    if not problems:
        small = (
            s.input_share < HEALTHY_INPUT_SHARE and s.host_share_without_input < HEALTHY_HOST_SHARE
        )
        verdict = "healthy" if small else "compute-bound"
        rest = f"input {s.input_share:.0%}, host {s.host_share:.0%}"
        ops = ", ".join(f"{name} {ms:.1f} ms" for name, ms in list(s.slowest_ops.items())[:3])
        reason = f"the ops computed {s.compute_share:.0%} of {call}, " + (
            f"and the rest is small ({rest})" if small else f"the largest part ({rest})"
        )
        if ops:
            reason += f"; slowest op types (summed over threads and calls): {ops}"
        fix = BORDERLINE_FIX if near else FIXES[verdict]
        return Diagnosis(verdict, reason, fix, (), near, s.evidence)
    verdict, fix = problems[0], FIXES[problems[0]]
    if verdict == "retracing":
        reason = (
            f"{s.retraced_calls} of {s.steps} calls traced a new graph; host work took "
            f"{s.host_share:.0%} of {call}"
        )
    elif verdict == "input-bound":
        reason = (
            f"{s.input_share:.0%} of {call} waited for input "
            f"({s.input_share * s.mean_step_ms:.1f} ms); the ops computed {s.compute_share:.0%}"
        )
    else:
        reason = (
            f"host work took {s.host_share:.0%} of {call} ({s.host_ms_per_call:.1f} ms, "
            f"{s.host_share_without_input:.0%} of the time not spent waiting for input), the "
            f"ops {s.compute_share:.0%}; {s.batches_per_step:g} training step(s) per call"
        )
        if s.batches_per_step > 1:
            fix = HOST_WORK_IN_STEPS_FIX
    if near:
        fix = BORDERLINE_FIX
    return Diagnosis(verdict, reason, fix, tuple(problems), near, s.evidence)


def _near_lines(s: ProfileSummary, healthy_lines: bool) -> tuple[str, ...]:
    """Each line of :func:`diagnose` that a share of ``s`` lies within BORDERLINE_MARGIN of (the
    lines of "healthy" only with ``healthy_lines``: they decide nothing once a problem holds)."""
    inputs = ("input waits", s.input_share, "of the call")
    host = ("host work", s.host_share_without_input, "of the time not waiting for input")
    lines = [
        (*inputs, INPUT_BOUND_SHARE, "input-bound"),
        (*host, HOST_BOUND_SHARE, "host-overhead"),
    ]
    if healthy_lines:
        lines += [(*inputs, HEALTHY_INPUT_SHARE, "healthy"), (*host, HEALTHY_HOST_SHARE, "healthy")]
    near = []
    for what, share, of, line, name in lines:
        gap = share - line
        if abs(gap) < BORDERLINE_MARGIN:
            side = "over" if gap >= 0 else "under"
            near.append(
                f"{what} {share:.0%} {of}, {abs(gap) * 100:.1f} points {side} the {line:.0%} "
                f"line of {name}"
            )
    return tuple(near)


def profiler_tool(xplane_path: str | os.PathLike, tool: str):
    """Run one of the profiler's own analyses (a Profile tab's tool: ``"framework_op_stats"``,
    ``"input_pipeline_analyzer"``, ...) on ``xplane_path``; its parsed JSON. Needs ``xprof``;
    its C++ log lines are dropped."""
    with captured_stderr():  # xprof is optional, and its import writes C++ log lines
        from xprof.convert import _pywrap_profiler_plugin as plugin

        raw, ok = plugin.xspace_to_tools_data([os.fspath(xplane_path)], tool, {})
    if not ok:
        raise RuntimeError(f"the profiler's {tool!r} failed: {raw!r}"[:500])
    return json.loads(raw)


def main(argv: list[str] | None = None) -> int:
    """``python -m tpucheck profile LOGDIR``: read the newest ``.xplane.pb`` under ``LOGDIR`` (a
    log directory TensorBoard's profiler or ``tf.profiler`` wrote, or the file itself) and print
    what it shows and the diagnosis. Exit status 2 when there is no profile to read."""
    parser = argparse.ArgumentParser(
        prog="python -m tpucheck profile", description="Read a profile and diagnose it."
    )
    parser.add_argument("logdir", help="a log directory with plugins/profile/..., or a .xplane.pb")
    where = Path(parser.parse_args(argv).logdir)
    found = sorted(where.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    xplane = where if where.is_file() else (found[-1] if found else None)
    if xplane is None:
        print(f"No profile (.xplane.pb) under {where}.", file=sys.stderr)
        return 2
    try:
        summary = summarize(extract(xplane))
    except (NoStepMarkers, ValueError) as err:
        print(f"{xplane}: {err}", file=sys.stderr)
        return 2
    print(f"{xplane}\n{summary}\n{diagnose(summary)}")
    return 0


class captured_stderr:  # noqa: N801 - used as a context manager, like contextlib's
    """Send file descriptor 2 (where C++ writes) to a temporary file for the ``with`` block;
    ``.text`` is what was written."""

    def __enter__(self):
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        return False
