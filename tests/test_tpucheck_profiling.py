"""tpucheck.profiling: the trace readers and the diagnosis on recorded profiles, the classifier on
chosen numbers.

``tests/data/tpucheck/profiles.json`` holds what ``profiling.extract`` read from real profiles on the
simulated TPU (``tests/data/tpucheck/record_profiles.py`` re-records it and says how each run is made):
notebook 11_profiling_a_training_step's model with one and with three training steps per call, the same with a loss scale
passed as a new Python number per call, a busy model (one step per call), a tiny model whose
calls are mostly the host's own work (one and ten steps per call), a pipeline that runs Python
on every example (``tf.py_function``), and token sequences padded per batch to a new length at
every call. The verdicts asserted below are what ``diagnose`` must say of them; the ones a
count of steps per call used to decide (a busy one-step run called "host-overhead") are here
so that such a rule fails these tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tpucheck import _tf, profiling
from tpucheck.profiling import ProfileSummary

RECORDED = json.loads((Path(__file__).parent / "data" / "tpucheck" / "profiles.json").read_text())
RUNS = [name for name, value in RECORDED.items() if isinstance(value, dict)]
# What diagnose must say of each recorded run, and the problems it must find.
EXPECTED = {
    "one_step": ("host-overhead", ("host-overhead", "input-bound")),
    "many_steps": ("compute-bound", ()),
    "retracing": ("retracing", ("retracing", "host-overhead")),
    "busy_one_step": ("compute-bound", ()),
    "tiny_one_step": ("host-overhead", ("host-overhead", "input-bound")),
    "tiny_many_steps": ("host-overhead", ("host-overhead",)),
    # Host work is most of what is left once the input is fixed: the next limit, as in one_step.
    "py_function_input": ("input-bound", ("input-bound", "host-overhead")),
    "shape_retracing": ("retracing", ("retracing", "host-overhead")),
}

# A compute-bound run: little input wait, busy ops, nothing traced.
BUSY = {"steps": 10, "mean_step_ms": 50.0, "input_share": 0.05, "compute_share": 0.75}
BUSY.update(batches_per_step=10.0, retraced_calls=0, slowest_ops={"MatMul": 30.0, "Add": 2.0})


def summary(**overrides) -> ProfileSummary:
    return ProfileSummary(**{**BUSY, **overrides})


def recorded(run: str) -> ProfileSummary:
    return profiling.summarize(RECORDED[run])


# --- The readers, on the recorded profiles ------------------------------------------------------


def test_every_recorded_run_has_an_expected_verdict():
    assert set(RUNS) == set(EXPECTED)
    assert all(RECORDED[run]["made"] for run in RUNS), "each run says how it was made"


@pytest.mark.parametrize("run", RUNS)
def test_recorded_profiles_summarise_consistently(run):
    data = RECORDED[run]
    s = profiling.summarize(data)
    assert s.steps == data["calls"]
    assert s.mean_step_ms > 0
    for share in (s.input_share, s.compute_share, s.host_share, s.host_share_without_input):
        assert 0.0 <= share <= 1.0
    assert s.input_share + s.compute_share + s.host_share == pytest.approx(1.0)
    assert s.host_ms_per_call == pytest.approx(s.host_share * s.mean_step_ms)
    assert s.input_ms_per_call == pytest.approx(s.input_share * s.mean_step_ms)
    assert s.slowest_ops and all(ms > 0 for ms in s.slowest_ops.values())
    assert s.data_stages, "the tf.data stages of the distributed pipeline were read"
    assert data["xplane_bytes"] > 10 * len(json.dumps(data)), "extract keeps little"


def test_training_steps_per_call_are_counted_from_the_batches_taken():
    counts = {run: recorded(run).batches_per_step for run in RUNS}
    assert counts["many_steps"] == RECORDED["steps_per_call"] > 1
    assert counts["tiny_many_steps"] == RECORDED["tiny_steps_per_call"] > 1
    others = {run: n for run, n in counts.items() if run not in ("many_steps", "tiny_many_steps")}
    assert set(others.values()) == {1.0}, others


def test_the_retracing_runs_traced_at_every_profiled_call():
    for run in ("retracing", "shape_retracing"):
        assert recorded(run).retraced_calls == RECORDED[run]["calls"] >= 2
    assert all(recorded(run).retraced_calls == 0 for run in RUNS if "retracing" not in run)


@pytest.mark.parametrize("run", RUNS)
def test_each_recorded_run_gets_its_verdict(run):
    verdict, findings = EXPECTED[run]
    diagnosis = profiling.diagnose(recorded(run))
    assert (diagnosis.verdict, diagnosis.findings) == (verdict, findings), (
        f"{run}: {recorded(run)} -> {diagnosis}"
    )


def test_a_busy_run_of_one_step_per_call_is_compute_bound_not_host_overhead():
    """The rule this replaces: one training step per call => host overhead, whatever the
    numbers. The busy run runs one step per call, and its ops take most of each call."""
    busy = recorded("busy_one_step")
    assert busy.batches_per_step == 1 and busy.compute_share > 0.5
    diagnosis = profiling.diagnose(busy)
    assert diagnosis.verdict == "compute-bound" and "host-overhead" not in str(diagnosis)
    for name in list(busy.slowest_ops)[:3]:
        assert name in diagnosis.reason, "the slowest ops are where to look next"
    # Its input waits (3%) lie near the 5% line of healthy: borderline, so no advice.
    assert diagnosis.borderline and diagnosis.fix == profiling.BORDERLINE_FIX


def test_host_work_decides_host_overhead_and_steps_per_call_choose_its_fix():
    one, many = recorded("tiny_one_step"), recorded("tiny_many_steps")
    assert one.host_share_without_input >= profiling.HOST_BOUND_SHARE
    assert profiling.diagnose(one).fix == profiling.FIXES["host-overhead"]
    assert profiling.diagnose(many).fix == profiling.HOST_WORK_IN_STEPS_FIX
    # What many steps per call bought, measured: less host time per training step.
    assert many.host_ms_per_call / many.batches_per_step < one.host_ms_per_call
    assert many.ms_per_training_step < one.ms_per_training_step


def test_python_in_the_pipeline_is_input_bound():
    slow = recorded("py_function_input")
    assert slow.input_share >= profiling.INPUT_BOUND_SHARE > recorded("many_steps").input_share
    diagnosis = profiling.diagnose(slow)
    assert "tf.py_function" in diagnosis.fix and "waited for input" in diagnosis.reason


def test_shares_are_measured_inside_the_steps_only():
    extracted = {
        "steps": [[0, 100], [200, 300]],
        "input": [[50, 150], [250, 260]],  # 50 + 10 inside the steps
        "compute": [[0, 60], [260, 300]],  # 60 + 40, of which 10 overlaps an input wait
        "batches": [10, 210, 400],
        "op_time_us": {"MatMul": 3000.0},
        "data_time_us": {"Map": 2000.0},
        "functions": {"step": {"calls": 2, "traced": 0}},
    }
    s = profiling.summarize(extracted)
    assert s.steps == 2 and s.mean_step_ms == pytest.approx(0.1)
    assert s.input_share == pytest.approx(60 / 200)
    assert s.compute_share == pytest.approx(90 / 200)
    assert s.host_share == pytest.approx(50 / 200)
    assert s.host_ms_per_call == pytest.approx(0.025)
    assert s.host_share_without_input == pytest.approx(50 / 140)
    assert s.batches_per_step == 1.0 and s.ms_per_training_step == pytest.approx(0.1)
    assert s.slowest_ops == {"MatMul": 3.0} and s.data_stages == {"Map": 2.0}
    assert math.isnan(profiling.summarize({**extracted, "batches": []}).ms_per_training_step)
    with pytest.raises(ValueError, match="no steps"):
        profiling.summarize({**extracted, "steps": []})


def _write_xplane(path, lines) -> Path:
    """A host plane of ``lines``: {line name: [event, ...]}, or [(line name, [event, ...]), ...]
    where threads share a name; an event is (name, start us, end us) or (name, start us, end us,
    {stat name: int})."""
    space = _tf.xplane_proto().XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids: dict[str, int] = {}
    stat_ids: dict[str, int] = {}
    for number, (line_name, events) in enumerate(
        dict(lines).items() if isinstance(lines, dict) else lines
    ):
        line = plane.lines.add(id=number, name=line_name, timestamp_ns=0)
        for name, start, end, *stats in events:
            if name not in ids:
                ids[name] = len(ids) + 1
                plane.event_metadata[ids[name]].id = ids[name]
                plane.event_metadata[ids[name]].name = name
            event = line.events.add(
                metadata_id=ids[name], offset_ps=start * 10**6, duration_ps=(end - start) * 10**6
            )
            for stat, value in (stats[0] if stats else {}).items():
                if stat not in stat_ids:
                    stat_ids[stat] = len(stat_ids) + 1
                    plane.stat_metadata[stat_ids[stat]].id = stat_ids[stat]
                    plane.stat_metadata[stat_ids[stat]].name = stat
                event.stats.add(metadata_id=stat_ids[stat], int64_value=value)
    path.write_bytes(space.SerializeToString())
    return path


def test_batches_are_counted_where_each_replica_takes_one_not_where_the_pipeline_fetches_ahead(
    tmp_path,
):
    pytest.importorskip("tensorflow")
    take = "IteratorGetNextOp::DoCompute"
    path = _write_xplane(
        tmp_path / "two_replicas.xplane.pb",
        {
            "python": [(profiling.STEP_EVENT, 0, 100), (profiling.STEP_EVENT, 200, 300)],
            # Each replica's iterator takes its batch inside the call, once per step.
            "tf_data_iterator_get_next/1": [(take, 10, 40), (take, 210, 240)],
            "tf_data_iterator_get_next/2": [(take, 12, 41), (take, 212, 241)],
            # The distributed iterator's thread fetched the second step's batch after that step
            # ended, as it did on a busy machine: no training step is lost or doubled for it.
            "tf_data_multi_device_iterator_0": [
                ("GetNextFromShard0", 50, 51),
                ("GetNextFromShard0", 350, 351),
            ],
        },
    )
    extracted = profiling.extract(path)
    assert extracted["batches"] == [10, 210]
    assert profiling.summarize(extracted).batches_per_step == 1


def test_training_steps_are_counted_per_call_and_loop_iteration_not_per_thread(tmp_path):
    """Run D of lesson 11_profiling_a_training_step, as TensorFlow 2.19 to 2.21 recorded it: two calls that each traced,
    of 1 and 2 steps. Each replica's take carries the call's step id and the loop iteration; the
    threads do not follow the replicas. With 8 replicas the takes fell on threads all named
    "python" and on threads of their own (a reader by thread name counted 4 or 6 steps per
    call); with 1 replica the second call's takes moved to a new thread (counted: 1)."""
    pytest.importorskip("tensorflow")
    take = "IteratorGetNextOp::DoCompute"
    marks = [(profiling.STEP_EVENT, 0, 1000), (profiling.STEP_EVENT, 1000, 2000)]
    # (call's step id, loop iteration, start): call 0 runs 1 step, call 1 runs 2
    steps = [(11, 0, 900), (22, 0, 1900), (22, 1, 1950)]

    def eight_replicas():  # odd replicas on two threads both named "python", even on their own
        python: list = [[], []]
        own: dict = {r: [] for r in range(0, 8, 2)}
        for n, (step_id, iteration, start) in enumerate(steps):
            for r in range(8):
                event = (take, start + r, start + r + 1, {"id": step_id, "iter_num": iteration})
                (python[n % 2] if r % 2 else own[r]).append(event)
        threads = [("python", marks), ("python", python[0]), ("python", python[1])]
        return threads + [(f"tf_data_iterator_get_next/{r}", e) for r, e in own.items()]

    eight = profiling.extract(_write_xplane(tmp_path / "8.xplane.pb", eight_replicas()))
    assert eight["batches"] == [900, 1900, 1950]
    assert profiling.summarize(eight).batches_per_step == 1.5
    one = [
        ("python", marks),
        ("tf_data_iterator_get_next/1", [(take, 900, 901, {"id": 11, "iter_num": 0})]),
        (
            "tf_data_iterator_get_next/2",  # a new thread for the retraced call's takes
            [
                (take, 1900, 1901, {"id": 22, "iter_num": 0}),
                (take, 1950, 1951, {"id": 22, "iter_num": 1}),
            ],
        ),
    ]
    extracted = profiling.extract(_write_xplane(tmp_path / "1.xplane.pb", one))
    assert extracted["batches"] == [900, 1900, 1950]
    assert profiling.summarize(extracted).batches_per_step == 1.5


def test_merge_joins_overlaps_and_drops_empty_intervals():
    assert profiling._merge([[5, 9], [0, 3], [2, 4], [7, 7], [10, 12]]) == [
        [0, 4],
        [5, 9],
        [10, 12],
    ]


# --- The classifier, on chosen numbers ----------------------------------------------------------

HOST = profiling.HOST_BOUND_SHARE


@pytest.mark.parametrize(
    ("overrides", "verdict"),
    [
        ({}, "compute-bound"),
        ({"batches_per_step": 1.0}, "compute-bound"),  # one step per call decides nothing
        # one_step as first recorded: busy, one step per call, and once called host-overhead
        ({"input_share": 0.17, "compute_share": 0.59, "batches_per_step": 1.0}, "compute-bound"),
        ({"retraced_calls": 1}, "compute-bound"),  # one trace may be a first call
        ({"retraced_calls": 2}, "retracing"),
        ({"retraced_calls": 3, "input_share": 0.9, "compute_share": 0.05}, "retracing"),
        ({"input_share": 0.2, "compute_share": 0.7}, "input-bound"),
        ({"input_share": 0.19, "compute_share": 0.7}, "compute-bound"),
        # host work: 40% of the time not waiting for input is the line, 39% is under it
        ({"input_share": 0.0, "compute_share": 1 - HOST}, "host-overhead"),
        ({"input_share": 0.0, "compute_share": 0.61}, "compute-bound"),
        (
            {"input_share": 0.5, "compute_share": 0.5 * (1 - HOST)},
            "input-bound",
        ),  # both; input larger
        ({"input_share": 0.25, "compute_share": 0.1}, "host-overhead"),  # both; host larger
        ({"input_share": 0.04, "compute_share": 0.86}, "healthy"),  # host 10% of 96%
        ({"input_share": 0.05, "compute_share": 0.86}, "compute-bound"),  # input not small
        ({"input_share": 0.0, "compute_share": 0.85}, "compute-bound"),  # host 15%: not small
    ],
)
def test_diagnose_decides_from_the_shares(overrides, verdict):
    diagnosis = profiling.diagnose(summary(**overrides))
    assert diagnosis.verdict == verdict, diagnosis
    assert verdict in str(diagnosis)


def test_the_verdict_does_not_follow_the_steps_per_call():
    for numbers in (
        {},
        {"input_share": 0.0, "compute_share": 0.3},
        {"input_share": 0.6, "compute_share": 0.3},
    ):
        verdicts = {
            profiling.diagnose(summary(**numbers, batches_per_step=n)).verdict for n in (1, 10)
        }
        assert len(verdicts) == 1, (numbers, verdicts)


def test_findings_list_every_problem_crossed_the_verdict_first():
    both = profiling.diagnose(summary(input_share=0.3, compute_share=0.2))
    assert both.findings == ("host-overhead", "input-bound") and both.verdict == "host-overhead"
    assert "(also: input-bound)" in str(both)
    tie = profiling.diagnose(summary(input_share=0.4, compute_share=0.2))
    assert tie.findings == ("input-bound", "host-overhead"), "on a tie, input first"
    all_three = profiling.diagnose(summary(retraced_calls=2, input_share=0.3, compute_share=0.1))
    assert all_three.findings == ("retracing", "host-overhead", "input-bound")
    for calm in (summary(), summary(input_share=0.01, compute_share=0.95)):
        diagnosis = profiling.diagnose(calm)
        assert diagnosis.findings == () and "also" not in str(diagnosis)


def test_reasons_carry_the_numbers_that_decided():
    host = profiling.diagnose(summary(input_share=0.1, compute_share=0.3, mean_step_ms=20.0))
    assert "host work took 60% of each 20.0 ms call (12.0 ms, 67% of the time" in host.reason
    assert host.fix == profiling.HOST_WORK_IN_STEPS_FIX  # 10 steps per call already
    one = profiling.diagnose(summary(input_share=0.1, compute_share=0.3, batches_per_step=1.0))
    assert one.fix == profiling.FIXES["host-overhead"] and "1 training step(s)" in one.reason
    fed = profiling.diagnose(summary(input_share=0.5, compute_share=0.4))
    assert "50% of each 50.0 ms call waited for input (25.0 ms)" in fed.reason
    busy = profiling.diagnose(summary(input_share=0.1, compute_share=0.7))  # far from lines
    assert "the ops computed 70% of each 50.0 ms call" in busy.reason
    assert "MatMul 30.0 ms" in busy.reason and busy.fix == profiling.FIXES["compute-bound"]
    healthy = profiling.diagnose(summary(input_share=0.01, compute_share=0.95))
    assert "the rest is small (input 1%, host 4%)" in healthy.reason
    assert healthy.fix == profiling.FIXES["healthy"]


def test_the_lines_are_where_the_docstring_says():
    assert profiling.INPUT_BOUND_SHARE == 0.20 and profiling.HOST_BOUND_SHARE == 0.40
    assert profiling.HEALTHY_INPUT_SHARE == 0.05 and profiling.HEALTHY_HOST_SHARE == 0.15
    doc = profiling.diagnose.__doc__
    for said in ("(20%)", "(40%)", "(5%,", "(15% of", "48%", "openxla/xprof"):
        assert said in doc, said
    # With no problem crossed, the ops take at least this share: the docstring's 48%.
    floor = (1 - profiling.INPUT_BOUND_SHARE) * (1 - profiling.HOST_BOUND_SHARE)
    assert floor == pytest.approx(0.48)


def test_a_fresh_profile_of_a_retracing_function(tmp_path):
    tf = pytest.importorskip("tensorflow")

    @tf.function
    def scaled(x, scale):
        return tf.reduce_sum(x * scale)

    scaled(tf.ones([4]), 0.5)  # the first trace, before the profile
    with profiling.retracing_warning_hidden():
        path, extracted = profiling.profile_calls(
            tmp_path, lambda i: scaled(tf.ones([4]), 1.0 + i), 3, warmup=0
        )
    assert Path(path).name.endswith(".xplane.pb")
    assert extracted["functions"]["scaled"] == {"calls": 3, "traced": 3}
    assert profiling.diagnose(profiling.summarize(extracted)).verdict == "retracing"
    # The profiler's own converter (xprof, pinned on every stack) reads the same file.
    ops = profiling.profiler_tool(path, "framework_op_stats")
    names = [row["c"][3]["v"] for row in ops[0]["rows"]]
    assert any("Sum" in name or "mul" in name.lower() for name in names), names[:10]


def test_the_profile_command_reads_a_log_directory_and_says_what_limits_the_steps(tmp_path):
    """``python -m tpucheck profile LOGDIR`` on what tf.profiler writes around a user's own
    steps (each marked, as TensorBoard's profiler wants): the newest file, the shares, a
    verdict; with no profile under the folder, exit status 2 and the reason."""
    tf = pytest.importorskip("tensorflow")

    @tf.function
    def train_step(x):
        return tf.reduce_sum(tf.matmul(x, x))

    x = tf.ones([128, 128])
    train_step(x)  # traced before the profile, as a warm run is
    logdir = tmp_path / "logs"
    tf.profiler.experimental.start(str(logdir))
    for i in range(4):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            train_step(x).numpy()
    tf.profiler.experimental.stop()

    def command(folder):
        return subprocess.run(
            [sys.executable, "-m", "tpucheck", "profile", str(folder)],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip

    done = command(logdir)
    assert done.returncode == 0, done.stderr[-2000:]
    where, summary, diagnosis = done.stdout.splitlines()[:3]
    assert where.startswith(str(logdir)) and where.endswith(".xplane.pb")
    assert summary.startswith("4 profiled calls of ") and "0 call(s) traced" in summary
    assert diagnosis.split(" ")[0].rstrip(":") in profiling.FIXES, diagnosis
    assert "Evidence: read from the host plane only" in diagnosis
    (tmp_path / "empty").mkdir()
    empty = command(tmp_path / "empty")
    assert empty.returncode == 2 and "No profile (.xplane.pb) under" in empty.stderr


def test_extract_needs_step_markers(tmp_path):
    tf = pytest.importorskip("tensorflow")
    with profiling.capture(tmp_path) as captured:
        tf.reduce_sum(tf.ones([3])).numpy()
    with pytest.raises(ValueError, match="step markers"):
        profiling.extract(captured["xplane"])


def test_a_profile_that_lost_its_step_markers_is_taken_again_once(tmp_path, monkeypatch, capsys):
    tf = pytest.importorskip("tensorflow")
    real, seen = profiling.extract, []

    def loses_the_first(path):
        seen.append(path)
        if len(seen) == 1:
            raise profiling.NoStepMarkers("lost")
        return real(path)

    monkeypatch.setattr(profiling, "extract", loses_the_first)
    _, extracted = profiling.profile_calls(tmp_path, lambda i: tf.constant(float(i)), 2, warmup=0)
    assert len(seen) == 2 and len(extracted["steps"]) == 2
    assert "lost the step markers" in capsys.readouterr().out
    monkeypatch.setattr(
        profiling,
        "extract",
        lambda path: (_ for _ in ()).throw(profiling.NoStepMarkers("lost again")),
    )
    with pytest.raises(profiling.NoStepMarkers, match="lost again"):
        profiling.profile_calls(tmp_path, lambda i: tf.constant(float(i)), 2, warmup=0)


# --- Verdicts that say what they rest on -------------------------------------------------------


def test_a_verdict_one_point_from_its_line_is_borderline():
    # Host work 14% of the time not waiting for input: "healthy", one point under its 15% line.
    near = summary(input_share=0.01, compute_share=0.99 * 0.86)
    assert round(near.host_share_without_input, 2) == 0.14
    diagnosis = profiling.diagnose(near)
    assert diagnosis.verdict == "healthy" and diagnosis.borderline, diagnosis
    assert str(diagnosis).startswith("healthy (borderline): ")
    assert diagnosis.label == "healthy (borderline)"  # what a summary table shows, as printed
    assert "1.0 points under the 15% line of healthy" in str(diagnosis)
    assert diagnosis.fix == profiling.BORDERLINE_FIX  # no advice a rerun may contradict
    far = profiling.diagnose(summary(input_share=0.01, compute_share=0.97))
    assert far.verdict == "healthy" and not far.borderline and "borderline" not in str(far)
    assert far.label == "healthy"


def test_a_verdict_near_the_host_line_gives_no_advice_on_either_side():
    # Lesson 11_profiling_a_training_step's run B once read "compute-bound (borderline) ... more
    # steps per call would gain little", and more steps per call then took 23% off each step.
    for compute, verdict in ((0.59, "host-overhead"), (0.61, "compute-bound")):  # host 41%, 39%
        diagnosis = profiling.diagnose(summary(input_share=0.0, compute_share=compute))
        assert diagnosis.verdict == verdict and diagnosis.borderline, diagnosis
        assert diagnosis.fix == profiling.BORDERLINE_FIX and "steps per call" not in diagnosis.fix


def test_every_verdict_says_it_read_the_host_plane_only_and_claims_nothing_for_a_tpu():
    for run in RUNS:
        text = str(profiling.diagnose(recorded(run)))
        assert "read from the host plane only (no TPU device planes" in text, text
        assert "unverified on a TPU" in text and "carr" not in text, text
    tpu = profiling.diagnose(summary(device_planes=("/device:TPU:0", "/device:TPU:1")))
    assert "also holds 2 TPU device plane(s), which this reader does not read" in str(tpu)


def _fit_model():
    import keras
    import numpy as np
    import tensorflow as tf

    x = np.random.default_rng(0).random((512, 16), np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(32, drop_remainder=True)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model, ds.prefetch(2)


def test_a_fit_profile_is_read_like_a_custom_loops(tmp_path):
    import keras
    import tensorflow as tf
    from keras.src.backend.tensorflow import tensorboard as keras_tensorboard

    model, ds = _fit_model()
    callback = profiling.fit_callback(tmp_path / "marked", first=2, last=5)
    model.fit(ds, steps_per_epoch=8, epochs=1, verbose=0, callbacks=[callback])
    marked = profiling.extract(callback.xplane)
    assert marked["step_marker"] == profiling.STEP_EVENT and len(marked["steps"]) == 4
    assert profiling.summarize(marked).batches_per_step == 1  # one batch per fit() call
    assert marked["planes"] and not marked["device_planes"]

    # What Keras' TensorBoard callback does with profile_batch (its batch trace, without _r=1;
    # the callback itself also needs the tensorboard package for its summaries).
    class KerasBatchTrace(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 2:
                tf.profiler.experimental.start(str(tmp_path / "keras"))
            if 2 <= batch <= 5:
                self.trace = keras_tensorboard.start_batch_trace(batch)

        def on_train_batch_end(self, batch, logs=None):
            if 2 <= batch <= 5:
                keras_tensorboard.stop_batch_trace(self.trace)
            if batch == 5:
                tf.profiler.experimental.stop()

    model.fit(ds, steps_per_epoch=8, epochs=1, verbose=0, callbacks=[KerasBatchTrace()])
    (path,) = (tmp_path / "keras").glob("plugins/profile/*/*.xplane.pb")
    keras_run = profiling.extract(path)
    assert keras_run["step_marker"] == profiling.KERAS_BATCH_EVENT == "Profiled batch"
    assert len(keras_run["steps"]) == 4 and profiling.summarize(keras_run).batches_per_step == 1
