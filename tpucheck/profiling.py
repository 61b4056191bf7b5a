"""Capture a profile of a few training steps and read it without TensorBoard. Write a
``.xplane.pb`` with :func:`profile_calls` (or :func:`capture` and :func:`step`, or
:func:`fit_callback`); :func:`extract` reads it, :func:`summarize` shares each call out (input
waits, ops, host work), :func:`diagnose` names what limits it (``python -m tpucheck profile``)."""

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
import types
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpucheck import _tf
from tpucheck.timing import to_host

# The step marker: a TraceMe of this name with a step_num stat is a step to the profiler's tools.
STEP_EVENT = "train"
# What Keras 3's TensorBoard(profile_batch=...) wraps each batch in, without the _r=1 of a root
# step marker (Keras 3.15): the steps of a profile without STEP_EVENT markers.
KERAS_BATCH_EVENT = "Profiled batch"
# A deciding share within this of its line is borderline: profiles of one run on a busy machine
# moved by more (lesson 11_profiling_a_training_step's run C: host 42%, then 33%).
BORDERLINE_MARGIN = 0.03
_INPUT_EVENT = re.compile(r"IteratorGetNext|GetNextFromShard|MultiDeviceIteratorGetNext")
# A replica taking its batch inside the call (GetNextFromShard0 fetches ahead, past the step that
# consumed it), tagged with the call's step id ("id") and loop iteration ("iter_num"): one pair per
# training step, whatever the thread (a retraced call takes its batches on new threads).
_BATCH_EVENT = "IteratorGetNextOp::DoCompute"
_BATCH_STATS = ("id", "iter_num")
_OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z0-9_]+)$")  # "<node>:<op type>"
# The lines diagnose() draws, as shares; its docstring says why each is where it is.
INPUT_BOUND_SHARE = 0.20  # input waits, of the call's time
HOST_BOUND_SHARE = 0.40  # the host's own work, of the call's time not spent waiting for input
HEALTHY_INPUT_SHARE = 0.05
HEALTHY_HOST_SHARE = 0.15


@contextlib.contextmanager
def capture(logdir: str | os.PathLike) -> Iterator[dict]:
    """Profile the ``with`` block into ``logdir``; the yielded dict's ``"xplane"`` is the file."""
    import tensorflow as tf

    logdir = os.fspath(logdir)
    pattern = os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")
    before = {path: os.stat(path).st_mtime_ns for path in glob.glob(pattern)}
    result: dict = {}
    tf.profiler.experimental.start(logdir)
    try:
        yield result
    finally:
        tf.profiler.experimental.stop()
    # Two captures in the same second share a run folder, and the second overwrites the first.
    new = sorted(p for p in glob.glob(pattern) if before.get(p) != os.stat(p).st_mtime_ns)
    if not new:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
    result["xplane"] = new[-1]


def profile_calls(
    logdir: str | os.PathLike, call, calls: int, *, warmup: int = 2
) -> tuple[str, dict]:
    """Profile ``calls`` calls of ``call(i)``, each marked as a step and fetched inside it;
    return ``(xplane path, extract(xplane path))``. Run ``call`` once before (no first trace in
    the profile); ``warmup`` unrecorded calls empty the prefetch buffers, which would hide waits."""
    for i in range(warmup):
        to_host(call(-1 - i))
    for attempt in (1, 2):
        with capture(logdir) as captured:
            for i in range(calls):
                with step(i):
                    to_host(call(i))
        try:
            return captured["xplane"], extract(captured["xplane"])
        except NoStepMarkers:
            if attempt == 2:  # seen once on a loaded machine: every op, no marker; redone once
                raise
            print(
                f"Notice: the profiler lost the step markers of {captured['xplane']}; profiling again."
            )


def step(number: int):
    """Mark one training step (a context manager), so the trace knows where steps begin and end."""
    import tensorflow as tf

    return tf.profiler.experimental.Trace(STEP_EVENT, step_num=int(number), _r=1)


def fit_callback(logdir: str | os.PathLike, first: int = 2, last: int = 5):
    """A Keras callback profiling batches ``first`` to ``last`` of ``fit`` (one call each), each
    marked as a step, which Keras' TensorBoard callback leaves out; then ``callback.xplane``."""
    import keras

    class ProfileBatches(keras.callbacks.Callback):
        xplane: str | None = None

        def on_train_batch_begin(self, batch, logs=None):
            if self.xplane is None and first <= batch <= last:
                if batch == first:
                    self._profile = contextlib.ExitStack()
                    self._captured = self._profile.enter_context(capture(logdir))
                self._marker = step(batch)
                self._marker.__enter__()

        def on_train_batch_end(self, batch, logs=None):
            if self.xplane is None and first <= batch <= last:
                self._marker.__exit__(None, None, None)
                if batch == last:
                    self._profile.close()
                    self.xplane = self._captured["xplane"]

    return ProfileBatches()


@contextlib.contextmanager
def retracing_warning_hidden():
    """Hide TensorFlow's "triggered tf.function retracing" warning in the ``with`` block."""
    logger = logging.getLogger("tensorflow")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


class NoStepMarkers(ValueError):
    """A profile without the :func:`step` markers that say where each training step begins."""


def extract(xplane_path: str | os.PathLike) -> dict:
    """The host planes of a ``.xplane.pb`` as the JSON-ready dict :func:`summarize` works on
    (microseconds from the first step); ``"device_planes"`` names the TPU or GPU ones, unread."""
    proto = _tf.xplane_proto().XSpace()
    with open(xplane_path, "rb") as f:
        proto.ParseFromString(f.read())
    host = [p for p in proto.planes if p.name.startswith("/host:")]
    if not host:
        raise ValueError(f"no host plane in {xplane_path}")
    markers: dict[str, list] = {STEP_EVENT: [], KERAS_BATCH_EVENT: []}
    inputs, compute = [], []
    taken: dict[tuple, float] = {}  # (plane, step id, loop iteration) -> the first replica's take
    untagged = defaultdict(list)  # (plane, thread) -> takes, for events without those stats
    op_time, data_time = Counter(), Counter()  # op type, tf.data stage -> microseconds
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
                            untagged[plane.name, line.id].append(start)
                        else:
                            key = (plane.name, *key)
                            taken[key] = min(start, taken.get(key, start))
                elif name.startswith("Iterator::"):
                    stage = name.split("::")[-1].split("[")[0]
                    data_time[stage] += end - start
                elif compute_line and (match := _OP_EVENT.match(name)):
                    compute.append([start, end])
                    op_time[match["type"]] += end - start
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
    first, last = steps[0][0], steps[-1][1]

    def inside(intervals):  # whole microseconds: precise enough, and a third of the size
        return [
            [round(a - first), round(b - first)] for a, b in intervals if b > first and a < last
        ]

    def batches(starts):  # one take per training step inside the steps
        return [round(t - first) for t in sorted(starts) if first <= t <= last]

    return {
        "steps": inside(steps),
        "input": _merge(inside(inputs)),
        "compute": _merge(inside(compute)),
        # Each (step id, loop iteration) once, or without those stats the busiest thread's takes.
        "batches": batches(taken.values())
        if taken
        else max(map(batches, untagged.values()), key=len, default=[]),
        "op_time_us": _top(op_time),
        "data_time_us": _top(data_time),
        "functions": functions,
        "step_marker": marker,
        "planes": [p.name for p in host],
        "device_planes": [p.name for p in proto.planes if p.name.startswith("/device:")],
    }


def _stat(event, stat_names: Mapping, wanted: str):
    """The value (a number or a string) of the stat called ``wanted`` of ``event``, or None;
    repeated strings are stored once and referenced by id (``ref_value``)."""
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == wanted:
            kind = stat.WhichOneof("value")
            if kind == "ref_value":
                return stat_names.get(stat.ref_value, "")
            return getattr(stat, kind) if kind else None
    return None


def _top(times: Counter, keep: int = 12) -> dict[str, float]:
    return {name: round(value, 1) for name, value in times.most_common(keep)}


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


@dataclass(frozen=True)
class ProfileSummary:
    """What a profile says about its marked calls: times in milliseconds, shares 0 to 1."""

    steps: int  # profiled calls (marked steps)
    mean_step_ms: float  # wall time of one call
    input_share: float  # of the call's time, the host or a replica waited for the next batch
    compute_share: float  # of the call's time, at least one op was computing (not waiting)
    batches_per_step: float  # training steps run inside one call, counted from batches taken
    retraced_calls: int  # tf.function calls inside the profile that traced a new graph
    # ms summed over every thread and every recorded call, so they can exceed the wall time
    slowest_ops: dict[str, float] = field(default_factory=dict)  # op type -> ms
    data_stages: dict[str, float] = field(default_factory=dict)  # tf.data stage -> ms
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
    def input_ms_per_call(self) -> float:
        return self.input_share * self.mean_step_ms

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

    def covered(intervals: list) -> float:  # time inside the steps covered by merged intervals
        return sum(
            max(0, min(b, end) - max(a, start)) for start, end in steps for a, b in intervals
        )

    total = sum(b - a for a, b in steps)
    waited = covered(extracted["input"])
    # Input waits are not computing, even when a replica's op is waiting inside one.
    busy = covered(_merge(extracted["input"] + extracted["compute"])) - waited
    taken = sum(a <= t <= b for a, b in steps for t in extracted["batches"])
    return ProfileSummary(
        steps=len(steps),
        mean_step_ms=total / len(steps) / 1e3,
        input_share=waited / total,
        compute_share=busy / total,
        batches_per_step=taken / len(steps),  # the training steps one call ran
        retraced_calls=sum(f["traced"] for f in extracted["functions"].values()),
        slowest_ops={k: v / 1e3 for k, v in extracted["op_time_us"].items()},
        data_stages={k: v / 1e3 for k, v in extracted["data_time_us"].items()},
        device_planes=tuple(extracted.get("device_planes", ())),
    )


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
        text = f"{self.label}: {self.reason}. Fix: {self.fix}"
        text += f" (also: {', '.join(also)})" if also else ""
        text += f". Borderline: {'; '.join(self.borderline)}" if self.borderline else ""
        return text + (f". Evidence: {self.evidence}" if self.evidence else "")


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

    ``findings``: every line crossed, the verdict first: **retracing** (more than one call
    traced; one can be a first call), then the larger of **input-bound** (input waits of at
    least (20%) of the call: XProf's "highly input-bound", openxla/xprof
    ``op_stats_to_input_pipeline_analysis.cc``) and **host-overhead** (host work of at least
    (40%) of the time not waiting for input: removing it makes a call at most 1.7x faster, as
    many steps per call do in 04_custom_training_loops, clear of the 20% to 35% the simulated
    TPU pays in ``tests/data/tpucheck/profiles.json``; unverified on a TPU). With none, the ops
    took at least 48% of each call: **healthy** with input waits under ``HEALTHY_INPUT_SHARE`` (5%,
    XProf's "moderately input-bound") and host work under ``HEALTHY_HOST_SHARE`` (15% of the
    time not waiting, XProf's "highly" bound by "All Others"), else **compute-bound**. A
    deciding share within ``BORDERLINE_MARGIN`` of its line makes it **borderline**: no advice.
    """
    s = summary
    inputs = ("input waits", s.input_share, "of the call")
    host = ("host work", s.host_share_without_input, "of the time not waiting for input")
    lines = [
        (*inputs, INPUT_BOUND_SHARE, "input-bound"),
        (*host, HOST_BOUND_SHARE, "host-overhead"),
    ]
    crossed = (name for _, share, _, line, name in lines if share >= line)
    # The larger share of the call first; on a tie input (its fixes leave the model alone).
    shares = {"input-bound": s.input_share, "host-overhead": s.host_share}
    problems = sorted(crossed, key=lambda n: -shares[n])
    if s.retraced_calls > 1:
        problems.insert(0, "retracing")
    small = s.input_share < HEALTHY_INPUT_SHARE and s.host_share_without_input < HEALTHY_HOST_SHARE
    verdict = problems[0] if problems else "healthy" if small else "compute-bound"
    fix = FIXES[verdict]
    call = f"each {s.mean_step_ms:.1f} ms call"
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
    elif verdict == "host-overhead":
        reason = (
            f"host work took {s.host_share:.0%} of {call} ({s.host_ms_per_call:.1f} ms, "
            f"{s.host_share_without_input:.0%} of the time not spent waiting for input), the "
            f"ops {s.compute_share:.0%}; {s.batches_per_step:g} training step(s) per call"
        )
        if s.batches_per_step > 1:
            fix = HOST_WORK_IN_STEPS_FIX
    else:
        rest = f"input {s.input_share:.0%}, host {s.host_share:.0%}"
        reason = f"the ops computed {s.compute_share:.0%} of {call}, " + (
            f"and the rest is small ({rest})" if small else f"the largest part ({rest})"
        )
        if s.slowest_ops:
            ops = ", ".join(f"{name} {ms:.1f} ms" for name, ms in list(s.slowest_ops.items())[:3])
            reason += f"; slowest op types (summed over threads and calls): {ops}"
    if not problems:  # the lines of "healthy" decide only without one
        lines += [(*inputs, HEALTHY_INPUT_SHARE, "healthy"), (*host, HEALTHY_HOST_SHARE, "healthy")]
    near = tuple(
        f"{what} {share:.0%} {of}, {abs(share - line) * 100:.1f} points "
        f"{'over' if share >= line else 'under'} the {line:.0%} line of {name}"
        for what, share, of, line, name in lines
        if abs(share - line) < BORDERLINE_MARGIN
    )
    if near:
        fix = BORDERLINE_FIX
    return Diagnosis(verdict, reason, fix, tuple(problems), near, s.evidence)


def profiler_tool(xplane_path: str | os.PathLike, tool: str):
    """The parsed JSON of one of the profiler's own analyses (a Profile tab's tool, e.g.
    ``"framework_op_stats"``) of ``xplane_path``. Needs ``xprof``."""
    with captured_stderr():  # xprof's import writes C++ log lines
        from xprof.convert import _pywrap_profiler_plugin as plugin

        raw, ok = plugin.xspace_to_tools_data([os.fspath(xplane_path)], tool, {})
    if not ok:
        raise RuntimeError(f"the profiler's {tool!r} failed: {raw!r}"[:500])
    return json.loads(raw)


def main(argv: list[str] | None = None) -> int:
    """``python -m tpucheck profile LOGDIR``: summarize and diagnose the newest ``.xplane.pb``
    under ``LOGDIR`` (or that file); exit status 2 when there is no profile to read."""
    parser = argparse.ArgumentParser(
        prog="python -m tpucheck profile", description="Read a profile and diagnose it."
    )
    parser.add_argument("logdir", help="a log directory with plugins/profile/..., or a .xplane.pb")
    where = Path(parser.parse_args(argv).logdir)
    found = where.rglob("*.xplane.pb")
    xplane = where if where.is_file() else max(found, key=lambda p: p.stat().st_mtime, default=None)
    if xplane is None:
        print(f"No profile (.xplane.pb) under {where}.", file=sys.stderr)
        return 2
    try:
        summary = summarize(extract(xplane))
    except ValueError as err:  # NoStepMarkers too
        print(f"{xplane}: {err}", file=sys.stderr)
        return 2
    print(f"{xplane}\n{summary}\n{diagnose(summary)}")
    return 0


@contextlib.contextmanager
def captured_stderr() -> Iterator[types.SimpleNamespace]:
    """Capture file descriptor 2 (where C++ writes) in the ``with`` block, then in ``.text``."""
    captured = types.SimpleNamespace(text="")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            captured.text = file.read().decode("utf-8", "replace")
