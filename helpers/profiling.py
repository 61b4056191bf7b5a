"""Capture a profile of a few training steps and read it without TensorBoard (notebook 11).

The TensorBoard profiler writes one ``<host>.xplane.pb`` file per capture: every TensorFlow
op, every ``tf.data`` stage and every ``tf.function`` call, with its start and duration, on
every thread of the host. This module turns that file into a handful of numbers a reader can
act on, and :func:`diagnose` turns the numbers into one of four verdicts:

- :func:`capture` profiles the block it wraps (``tf.profiler.experimental.start``/``stop``);
  :func:`step` marks one training step in it, the marker the profiler's tools look for;
  :func:`profile_calls` does both for a few calls of a function and extracts the result;
- :func:`extract` reads the ``.xplane.pb`` into a small JSON-ready dict (kilobytes, not
  megabytes), and :func:`summarize` computes from that dict only: the share of each step spent
  waiting for input, the share in which ops were computing, training steps per call, the
  ``tf.function`` calls that traced, the op types and ``tf.data`` stages that took the time;
- :func:`diagnose` says "retracing", "input-bound", "host-overhead" or "healthy" from a
  :class:`ProfileSummary` alone, with the numbers that decided it;
- :func:`profiler_tool` runs one of the profiler's own analyses (the XProf package's
  converters, e.g. ``"input_pipeline_analyzer"``) on the same file, as TensorBoard would.

The extracted dict is what the unit tests record, so the readers are tested on a real trace.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# The step marker: a TraceMe of this name with a step_num stat is a step to the profiler's tools.
STEP_EVENT = "train"
# Events that are the host or a replica waiting for the next batch of a tf.data iterator.
_INPUT_EVENT = re.compile(r"IteratorGetNext|GetNextFromShard|MultiDeviceIteratorGetNext")
# One replica taking its batch: counted per step to find how many training steps a call runs.
_BATCH_EVENT = re.compile(r"^(IteratorGetNextOp::DoCompute|GetNextFromShard0)$")
# An op execution on a compute thread is named "<node name>:<op type>".
_OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z0-9_]+)$")
# Thresholds of :func:`diagnose`, shares of the step time. See its docstring.
INPUT_BOUND_SHARE = 0.2
HOST_OVERHEAD_STEPS_PER_CALL = 1


@contextlib.contextmanager
def capture(logdir: str | os.PathLike) -> Iterator[dict]:
    """Profile the ``with`` block into ``logdir``; the yielded dict gets ``"xplane"`` after it.

    Keep the block short (a few steps, a second or two): the file grows with every op run.
    ``"xplane"`` is the path of the ``.xplane.pb`` written, the file every other function here
    and TensorBoard's Profile tab read (``tensorboard --logdir <logdir>``).
    """
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
    """Profile ``calls`` calls of ``call(i)``, each marked as one step; return the file and data.

    ``call(i)`` runs the i-th call (one step, or many steps in one ``tf.function`` call) and
    returns something to wait for, e.g. the loss: its value is fetched inside the step so the
    step ends when the work does. Run it once before, so the profile holds no first trace.
    ``warmup`` calls run just before the capture, unrecorded: they use up the batches that
    prefetch buffers filled while the program did something else, which would hide waits.
    Returns ``(xplane path, extract(xplane path))``.
    """
    from helpers import timing

    for i in range(warmup):
        timing.fetch(call(-1 - i))
    for attempt in (1, 2):
        with capture(logdir) as captured:
            for i in range(calls):
                with step(i):
                    timing.fetch(call(i))
        try:
            return captured["xplane"], extract(captured["xplane"])
        except NoStepMarkers:
            # Seen once, on a loaded 2-core machine, in a process that had run many other
            # tests: a profile with every op but none of the step markers. Said, and redone once.
            if attempt == 2:
                raise
            print(
                f"Notice: the profiler lost the step markers of {captured['xplane']}; profiling again."
            )


def _xplanes(logdir: str) -> list[str]:
    return glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))


def step(number: int):
    """Mark one training step (a context manager), so the trace knows where steps begin and end."""
    import tensorflow as tf

    return tf.profiler.experimental.Trace(STEP_EVENT, step_num=int(number), _r=1)


@contextlib.contextmanager
def retracing_warning_hidden():
    """Hide TensorFlow's "triggered tf.function retracing" warning for the ``with`` block.

    The lesson finds retracing in the profile; the warning would give the answer away (and it
    appears only after five retraces in a row, so it is no substitute for a profile).
    """
    logger = logging.getLogger("tensorflow")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


class NoStepMarkers(ValueError):
    """A profile without the ``step()`` markers that say where each training step begins."""


def _xplane_proto():
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # older layouts of the TensorFlow wheel
        from tsl.profiler.protobuf import xplane_pb2
    return xplane_pb2


def extract(xplane_path: str | os.PathLike) -> dict:
    """Read a ``.xplane.pb`` into the small dict :func:`summarize` works on (JSON-ready).

    Times are in microseconds from the first step marker. Only the host plane is read (on a
    CPU or GPU host the ops run there; a TPU's own planes are not read here).
    """
    proto = _xplane_proto().XSpace()
    with open(xplane_path, "rb") as f:
        proto.ParseFromString(f.read())
    host = [p for p in proto.planes if p.name.startswith("/host:")]
    if not host:
        raise ValueError(f"no host plane in {xplane_path}")
    steps, inputs, compute = [], [], []
    batches: dict[str, list] = {}
    op_time: dict[str, float] = {}
    data_time: dict[str, float] = {}
    functions: dict[str, dict] = {}
    # Every host plane: which one holds the steps (/host:CPU, /host:metadata, ...) is not
    # guaranteed to come first.
    for plane in host:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            origin = line.timestamp_ns * 1000  # picoseconds
            compute_line = line.name.startswith("tf_Compute")
            for event in line.events:
                name = names.get(event.metadata_id, "")
                start = (origin + event.offset_ps) / 1e6
                end = start + event.duration_ps / 1e6
                if name == STEP_EVENT:
                    steps.append([start, end])
                elif _INPUT_EVENT.search(name):
                    inputs.append([start, end])
                    if _BATCH_EVENT.match(name):
                        batches.setdefault(name, []).append(start)
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
    if not steps:
        seen = {p.name: sum(len(line.events) for line in p.lines) for p in proto.planes}
        raise NoStepMarkers(
            f"no step markers ({STEP_EVENT!r}) in {xplane_path}: wrap steps in step() "
            f"(events per plane: {seen})"
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
        # One event per training step: shard 0 of a distributed iterator, else the iterator.
        "batches": sorted(
            round(t - zero)
            for t in batches.get(
                "GetNextFromShard0", batches.get("IteratorGetNextOp::DoCompute", [])
            )
            if first <= t <= last
        ),
        "op_time_us": _top(op_time),
        "data_time_us": _top(data_time),
        "functions": functions,
    }


def _stat(event, stat_names: Mapping, wanted: str):
    """The string value of the stat called ``wanted`` of ``event``, or None."""
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == wanted:
            # Repeated strings are stored once and referenced by id.
            return stat_names.get(stat.ref_value, "") if stat.ref_value else stat.str_value
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
    """What a profile says about the steps it recorded (times in milliseconds, shares 0-1)."""

    steps: int
    mean_step_ms: float
    input_share: float  # of step time, the host or a replica waited for the next batch
    compute_share: float  # of step time, at least one op was computing
    batches_per_step: float  # training steps run inside one marked step (one call)
    retraced_calls: int  # tf.function calls inside the profile that traced a new graph
    # ms summed over every thread and every recorded call, so they can exceed the wall time
    slowest_ops: dict[str, float] = field(default_factory=dict)  # op type -> ms
    data_stages: dict[str, float] = field(default_factory=dict)  # tf.data stage -> ms

    @property
    def other_share(self) -> float:
        """The rest of the step: neither waiting for input nor computing (host work, dispatch)."""
        return max(0.0, 1.0 - self.input_share - self.compute_share)

    def __str__(self) -> str:
        return (
            f"{self.steps} profiled calls of {self.mean_step_ms:.1f} ms: input {self.input_share:.0%}, "
            f"compute {self.compute_share:.0%}, other {self.other_share:.0%}; "
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

    verdict: str  # "retracing", "input-bound", "host-overhead" or "healthy"
    reason: str
    fix: str
    # Every problem whose condition holds, the verdict first: on a simulated TPU the input
    # pipeline and the replicas share the CPU, so a run can wait for input and pay host
    # overhead at once.
    findings: tuple[str, ...] = ()

    def __str__(self) -> str:
        also = [f for f in self.findings if f != self.verdict]
        return f"{self.verdict}: {self.reason}. Fix: {self.fix}" + (
            f" (also: {', '.join(also)})" if also else ""
        )


FIXES = {
    "retracing": "pass values that change as tensors (tf.constant), not Python numbers",
    "input-bound": "parallel map, cache, prefetch and vectorise the tf.data pipeline (notebook 06)",
    "host-overhead": "run many steps per call: steps_per_execution in fit (notebook 03), "
    "a tf.range loop in one tf.function (notebook 04)",
    "healthy": "nothing to fix in this profile; look at the slowest ops next",
}


def diagnose(summary: ProfileSummary) -> Diagnosis:
    """Decide what limits the profiled steps from the numbers of ``summary`` only.

    The verdict is the first that holds, in this order; ``findings`` lists every one that holds:

    1. **retracing**: more than one ``tf.function`` call traced inside the profile (a warm
       run traces nothing; one trace can be a first call);
    2. **input-bound**: the steps waited for input for at least ``INPUT_BOUND_SHARE`` of their
       time;
    3. **host-overhead**: each call ran no more than ``HOST_OVERHEAD_STEPS_PER_CALL`` training
       step (counted from the batches the calls took): the host prepares and launches every
       call, a cost paid once per call, so one step per call pays it for every step. On a TPU
       the profile also shows the chip idle between calls; on a simulated TPU host and "device"
       share the CPU, so the step count per call is the evidence left;
    4. **healthy** otherwise.
    """
    s = summary
    holds = {
        "retracing": s.retraced_calls > 1,
        "input-bound": s.input_share >= INPUT_BOUND_SHARE,
        "host-overhead": s.batches_per_step <= HOST_OVERHEAD_STEPS_PER_CALL,
    }
    findings = tuple(name for name, held in holds.items() if held)
    if s.retraced_calls > 1:
        verdict, reason = "retracing", f"{s.retraced_calls} of {s.steps} calls traced a new graph"
    elif s.input_share >= INPUT_BOUND_SHARE:
        verdict, reason = "input-bound", f"{s.input_share:.0%} of each step waited for input"
    elif s.batches_per_step <= HOST_OVERHEAD_STEPS_PER_CALL:
        verdict, reason = (
            "host-overhead",
            f"each call ran {s.batches_per_step:g} training step, so the host's per-call work "
            f"({s.other_share:.0%} of the time here outside input and ops) is paid every step",
        )
    else:
        verdict, reason = (
            "healthy",
            f"input {s.input_share:.0%}, compute {s.compute_share:.0%}, "
            f"{s.batches_per_step:g} training steps per call, no retracing",
        )
    return Diagnosis(verdict, reason, FIXES[verdict], findings)


def profiler_tool(xplane_path: str | os.PathLike, tool: str):
    """Run one of the profiler's own analyses on ``xplane_path``; return its parsed JSON.

    ``tool`` is a TensorBoard Profile tab's tool, e.g. ``"input_pipeline_analyzer"``,
    ``"framework_op_stats"`` or ``"overview_page"``. Needs the ``xprof`` package (the
    profiler behind TensorBoard's Profile tab). Its C++ log lines are dropped.
    """
    import json

    from helpers import quiet

    with quiet._captured_stderr():
        from xprof.convert import _pywrap_profiler_plugin as plugin

        raw, ok = plugin.xspace_to_tools_data([os.fspath(xplane_path)], tool, {})
    if not ok:
        raise RuntimeError(f"the profiler's {tool!r} failed: {raw!r}"[:500])
    return json.loads(raw)
