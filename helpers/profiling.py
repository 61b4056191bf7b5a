"""Capture a profile of a few training steps and read it without TensorBoard (notebook 11_profiling_a_training_step).

The TensorBoard profiler writes one ``<host>.xplane.pb`` file per capture: every TensorFlow
op, every ``tf.data`` stage and every ``tf.function`` call, with its start and duration, on
every thread of the host. This module turns that file into a handful of numbers a reader can
act on, and :func:`diagnose` turns the numbers into one of five verdicts:

- :func:`capture` profiles the block it wraps (``tf.profiler.experimental.start``/``stop``);
  :func:`step` marks one training step in it, the marker the profiler's tools look for;
  :func:`profile_calls` does both for a few calls of a function and extracts the result;
- :func:`extract` reads the ``.xplane.pb`` into a small JSON-ready dict (kilobytes, not
  megabytes), and :func:`summarize` computes from that dict only: the share of each call spent
  waiting for input, the share in which ops were computing, the rest (the host's own work),
  training steps per call, the ``tf.function`` calls that traced, the op types and ``tf.data``
  stages that took the time;
- :func:`diagnose` says "retracing", "input-bound", "host-overhead", "compute-bound" or
  "healthy" from a :class:`ProfileSummary` alone, with the numbers that decided it; its
  thresholds are the named constants below, justified in its docstring;
- :func:`profiler_tool` runs one of the profiler's own analyses (the XProf package's
  converters, e.g. ``"input_pipeline_analyzer"``) on the same file, as TensorBoard would.

The extracted dict is what the unit tests record, so the readers are tested on real traces.
TensorFlow (and XProf) are imported inside the functions that need them, so that
``import helpers`` stays fast and works where TensorFlow is missing (see ``helpers``).
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from helpers import quiet, timing

__all__ = [
    "FIXES",
    "HEALTHY_HOST_SHARE",
    "HEALTHY_INPUT_SHARE",
    "HOST_BOUND_SHARE",
    "BORDERLINE_MARGIN",
    "HOST_WORK_IN_STEPS_FIX",
    "INPUT_BOUND_SHARE",
    "KERAS_BATCH_EVENT",
    "STEP_EVENT",
    "Diagnosis",
    "NoStepMarkers",
    "ProfileSummary",
    "capture",
    "diagnose",
    "extract",
    "fit_callback",
    "profile_calls",
    "profiler_tool",
    "retracing_warning_hidden",
    "step",
    "summarize",
]

# The step marker: a TraceMe of this name with a step_num stat is a step to the profiler's tools.
STEP_EVENT = "train"
# What Keras 3's TensorBoard callback wraps each profiled batch of fit() in (profile_batch=...):
# Trace("Profiled batch", step_num=batch), without the _r=1 of a root step marker
# (keras/src/backend/tensorflow/tensorboard.py, Keras 3.15). The reader takes it as a step when a
# profile has no STEP_EVENT marker.
KERAS_BATCH_EVENT = "Profiled batch"
# A verdict whose deciding share lies within this many points of its line is called borderline:
# profiles of the same run move by more than that on a busy machine (notebook 11_profiling_a_training_step's aside: run C's
# host share read 42% and then 33% of the time not waiting for input).
BORDERLINE_MARGIN = 0.03
# Events that are the host or a replica waiting for the next batch of a tf.data iterator.
_INPUT_EVENT = re.compile(r"IteratorGetNext|GetNextFromShard|MultiDeviceIteratorGetNext")
# A replica taking its batch inside the call: each iterator (one per replica) has its own line
# of these, one event per training step. Counted on one line to find how many training steps a
# call runs. Not GetNextFromShard0: a distributed iterator's background thread fetches ahead, so
# on a busy machine its event can fall after the step that consumed it.
_BATCH_EVENT = "IteratorGetNextOp::DoCompute"
# An op execution on a compute thread is named "<node name>:<op type>".
_OP_EVENT = re.compile(r"^(?P<node>[^:]+):(?P<type>[A-Za-z0-9_]+)$")
# The lines :func:`diagnose` draws, as shares (0 to 1); its docstring says why each is where it
# is.
INPUT_BOUND_SHARE = 0.20  # input waits, of the call's time
HOST_BOUND_SHARE = 0.40  # the host's own work, of the call's time not spent waiting for input
HEALTHY_INPUT_SHARE = 0.05  # "healthy" needs input waits below this share of the call
HEALTHY_HOST_SHARE = 0.15  # and host work below this share of the time not waiting for input


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
    Returns ``(xplane path, extract(xplane path))``. Notebook 11_profiling_a_training_step writes these lines by hand for
    its first profile (tests/test_lesson_code_profiling_a_training_step.py reads both alike).
    Taught in notebook 11.
    """
    for i in range(warmup):
        timing.to_host(call(-1 - i))
    for attempt in (1, 2):
        with capture(logdir) as captured:
            for i in range(calls):
                with step(i):
                    timing.to_host(call(i))
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
    """Mark one training step (a context manager), so the trace knows where steps begin and end.

    Taught in notebook 11.
    """
    import tensorflow as tf

    return tf.profiler.experimental.Trace(STEP_EVENT, step_num=int(number), _r=1)


def fit_callback(logdir: str | os.PathLike, first: int = 2, last: int = 5):
    """A Keras callback that profiles batches ``first`` to ``last`` of ``fit``, each one a step.

    It starts the profiler at batch ``first`` of the first epoch, wraps every batch in
    :func:`step` (the root step marker, ``_r=1``, that Keras' own TensorBoard callback leaves
    out) and stops after batch ``last``; ``callback.xplane`` is then the file written. It needs
    no ``tensorboard`` package. Each batch is one call of ``fit``'s training function
    (``steps_per_execution`` steps).
    Taught in notebook 11.
    """
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
    """Hide TensorFlow's "triggered tf.function retracing" warning for the ``with`` block.

    The lesson finds retracing in the profile; the warning would give the answer away (and it
    appears only after five retraces in a row, so it is no substitute for a profile).
    Taught in notebook 11.
    """
    logger = logging.getLogger("tensorflow")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


class NoStepMarkers(ValueError):
    """A profile without the ``step()`` markers that say where each training step begins.

    Raised by :func:`extract`; :func:`profile_calls` takes the profile again once.
    Used in notebook 11_profiling_a_training_step.
    """


def _xplane_proto():
    from helpers import tf_internals

    return tf_internals.xplane_proto()


def extract(xplane_path: str | os.PathLike) -> dict:
    """Read a ``.xplane.pb`` into the small dict :func:`summarize` works on (JSON-ready).

    Times are in microseconds from the first step marker. Steps are the ``STEP_EVENT``
    markers (:func:`step`), else the ``KERAS_BATCH_EVENT`` ones Keras' TensorBoard callback
    writes around each profiled batch of ``fit``. Only the host planes are read (on a CPU or
    GPU host the ops run there); ``"planes"`` names them, and ``"device_planes"`` the planes of
    TPU or GPU devices the file also holds, which nothing here reads.
    Taught in notebook 11.
    """
    proto = _xplane_proto().XSpace()
    with open(xplane_path, "rb") as f:
        proto.ParseFromString(f.read())
    host = [p for p in proto.planes if p.name.startswith("/host:")]
    if not host:
        raise ValueError(f"no host plane in {xplane_path}")
    markers: dict[str, list] = {STEP_EVENT: [], KERAS_BATCH_EVENT: []}
    inputs, compute = [], []
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
                if name in markers:
                    markers[name].append([start, end])
                elif _INPUT_EVENT.search(name):
                    inputs.append([start, end])
                    if name == _BATCH_EVENT:
                        batches.setdefault(f"{plane.name}/{line.name}", []).append(start)
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
            f"{xplane_path}: wrap steps in step() (events per plane: {seen})"
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
        # One event per training step: the busiest iterator's line (each replica's has as many).
        "batches": max(
            (
                [round(t - zero) for t in sorted(times) if first <= t <= last]
                for times in batches.values()
            ),
            key=len,
            default=[],
        ),
        "op_time_us": _top(op_time),
        "data_time_us": _top(data_time),
        "functions": functions,
        "step_marker": marker,
        "planes": [p.name for p in host],
        "device_planes": [p.name for p in proto.planes if p.name.startswith("/device:")],
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
    """What a profile says about the calls it recorded (times in milliseconds, shares 0 to 1).

    One recorded call is one marked step: one call of the training function, which may run
    several training steps. Returned by :func:`summarize`.
    """

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
    def tpu_planes(self) -> tuple[str, ...]:
        """The file's TPU device planes: only they could show what a TPU itself did."""
        return tuple(p for p in self.device_planes if "TPU" in p)

    @property
    def evidence(self) -> str:
        """Which planes the numbers come from, and what that means for a TPU."""
        if not self.tpu_planes:
            return (
                "read from the host plane only (no TPU device planes in this profile): what "
                "the host did, not how busy a TPU was; unverified on a TPU"
            )
        return (
            f"read from the host plane only; the profile also holds {len(self.tpu_planes)} TPU "
            "device plane(s), which this reader does not read: their idle time and infeed "
            "are in TensorBoard's Profile tab"
        )

    @property
    def host_share(self) -> float:
        """The rest of the call: no op computing and no input wait, so the host's own work
        (Python, tracing, launching the call and each of its ops)."""
        return max(0.0, 1.0 - self.input_share - self.compute_share)

    @property
    def host_ms_per_call(self) -> float:
        """The host's own work in each call, in milliseconds."""
        return self.host_share * self.mean_step_ms

    @property
    def host_share_without_input(self) -> float:
        """The host's share of the time a call did not wait for input: its share of the call
        once the input is fixed. :func:`diagnose` decides host overhead from it."""
        working = 1.0 - self.input_share
        return self.host_share / working if working > 0 else 0.0

    @property
    def ms_per_training_step(self) -> float:
        """Wall time per training step: the call's time over the steps it ran (nan if none)."""
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
    """Compute a :class:`ProfileSummary` from the dict :func:`extract` returns.

    Taught in notebook 11.
    """
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
    # Every problem whose line was crossed, the verdict first (empty for "compute-bound" and
    # "healthy"): on a simulated TPU the input pipeline and the replicas share the CPU, so a run
    # can wait for input and pay host overhead at once.
    findings: tuple[str, ...] = ()
    # Each line the deciding shares sit within BORDERLINE_MARGIN of, said in words (empty: none).
    borderline: tuple[str, ...] = ()
    evidence: str = ""  # which planes the numbers come from (ProfileSummary.evidence)

    def __str__(self) -> str:
        also = [f for f in self.findings if f != self.verdict]
        head = f"{self.verdict} (borderline)" if self.borderline else self.verdict
        text = f"{head}: {self.reason}. Fix: {self.fix}" + (
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
# A borderline verdict advises nothing: a rerun may land on the other side of its line, whose
# advice differs (lesson 11_profiling_a_training_step's run B, "compute-bound (borderline)", once
# advised against more steps per call, which then took 23% off each step).
BORDERLINE_FIX = (
    "none from a borderline verdict: profile more calls, or again, and act on the verdict that "
    "holds; meanwhile the fixes of both sides of the line are candidates, to be measured"
)
# The host-overhead fix when each call already runs several training steps.
HOST_WORK_IN_STEPS_FIX = (
    "each call already runs several training steps, so the host's work is inside them "
    "(launching every op on every replica, Python in the step): give each op more work with a "
    "larger per-replica batch and keep Python out of the step; on a TPU, XLA compiles the whole "
    "step into one program, so profile there before acting (unverified on hardware)"
)


def diagnose(summary: ProfileSummary) -> Diagnosis:
    """Decide what limits the profiled calls from the numbers of ``summary`` only.

    Three problems each have a line; ``findings`` lists every one crossed, the verdict first:

    1. **retracing**: more than one ``tf.function`` call traced inside the profile (a warm
       run traces nothing; one trace can be a first call). Tracing is host work, so such a run
       also crosses the host line; the traces are its cause, so this verdict comes first.
    2. **input-bound**: input waits took at least ``INPUT_BOUND_SHARE`` (20%) of each call.
       20% is where XProf's input pipeline analysis calls a step "highly input-bound"
       (openxla/xprof, ``xprof/convert/op_stats_to_input_pipeline_analysis.cc``), and the fixes
       change the pipeline only, not the model.
    3. **host-overhead**: the host's own work in each call (time in which no op computed and
       nothing waited for input) took at least ``HOST_BOUND_SHARE`` (40%) of the call's time
       not spent waiting for input, i.e. of the call once the input is fixed. Removing work of
       that share would make a call at most 1 / (1 - 0.4), about 1.7x, faster: the order of
       what many steps per call gain in notebook 04_custom_training_loops. Below the line the ops take the larger
       part. The line also keeps clear of what the simulated TPU pays in every run, busy or
       not: launching each op on 8 replicas took 20% and 33% of the time not waiting for input
       in the busy runs of ``tests/data/profiles.json`` (``busy_one_step``, ``many_steps``),
       21% to 35% in other recordings. Where the line lies on a TPU is unverified on
       hardware. The training steps per call do not decide this verdict; they choose its fix:
       one step per call, run many; several already, :data:`HOST_WORK_IN_STEPS_FIX`.

    When input-bound and host-overhead both hold, the verdict is the one that takes the larger
    share of the call: removing it saves more. When none holds, the ops took at least
    (1 - 0.2) x (1 - 0.4) = 48% of each call, the largest part, and the verdict says how busy:

    4. **healthy**: input waits under ``HEALTHY_INPUT_SHARE`` (5%, XProf's line for "moderately
       input-bound") and host work under ``HEALTHY_HOST_SHARE`` (15% of the time not waiting,
       XProf's line for a step "highly" bound by "All Others" time, where Python overhead
       shows): nothing outside the ops is left to fix;
    5. **compute-bound** otherwise: the ops are the limit, with some input or host time left;
       the slowest op types (``summary.slowest_ops``) are the next place to look.

    A verdict is **borderline** when a share that decided it lies within ``BORDERLINE_MARGIN``
    (3 points) of its line: ``borderline`` says which, a rerun may well cross it, and its fix
    advises nothing (:data:`BORDERLINE_FIX`). Every
    verdict says which planes it was read from (``evidence``): on a CPU, the host's only.
    Taught in notebook 11.
    """
    s = summary
    shares = {"input-bound": s.input_share, "host-overhead": s.host_share}
    crossed = {
        "input-bound": s.input_share >= INPUT_BOUND_SHARE,
        "host-overhead": s.host_share_without_input >= HOST_BOUND_SHARE,
    }
    # Largest share first; on a tie input comes first (its fixes leave the model alone).
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
    lines = (
        ("input waits", s.input_share, "of the call", INPUT_BOUND_SHARE, "input-bound"),
        ("input waits", s.input_share, "of the call", HEALTHY_INPUT_SHARE, "healthy"),
        (
            "host work",
            s.host_share_without_input,
            "of the time not waiting for input",
            HOST_BOUND_SHARE,
            "host-overhead",
        ),
        (
            "host work",
            s.host_share_without_input,
            "of the time not waiting for input",
            HEALTHY_HOST_SHARE,
            "healthy",
        ),
    )
    near = []
    for what, share, of, line, name in lines:
        if name == "healthy" and not healthy_lines:
            continue
        gap = share - line
        if abs(gap) < BORDERLINE_MARGIN:
            side = "over" if gap >= 0 else "under"
            near.append(
                f"{what} {share:.0%} {of}, {abs(gap) * 100:.1f} points {side} the {line:.0%} "
                f"line of {name}"
            )
    return tuple(near)


def profiler_tool(xplane_path: str | os.PathLike, tool: str):
    """Run one of the profiler's own analyses on ``xplane_path``; return its parsed JSON.

    ``tool`` is a TensorBoard Profile tab's tool, e.g. ``"input_pipeline_analyzer"``,
    ``"framework_op_stats"`` or ``"overview_page"``. Needs the ``xprof`` package (the
    profiler behind TensorBoard's Profile tab). Its C++ log lines are dropped.
    Taught in notebook 11.
    """
    with quiet._captured_stderr():
        # Here, not at the top: xprof is optional, and its import writes C++ log lines.
        from xprof.convert import _pywrap_profiler_plugin as plugin

        raw, ok = plugin.xspace_to_tools_data([os.fspath(xplane_path)], tool, {})
    if not ok:
        raise RuntimeError(f"the profiler's {tool!r} failed: {raw!r}"[:500])
    return json.loads(raw)
