"""helpers.profiling: the trace readers on recorded profiles, the classifier on chosen numbers.

``tests/data/profiles.json`` holds what ``profiling.extract`` read from three real profiles on
the simulated TPU (``tests/data/record_profiles.py`` re-records it): one training step per
call, several steps per call, and a step that retraces at every call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import profiling
from helpers.profiling import ProfileSummary

RECORDED = json.loads((Path(__file__).parent / "data" / "profiles.json").read_text())


# A healthy run: little input wait, busy ops, many steps per call, nothing traced.
HEALTHY = {"steps": 10, "mean_step_ms": 50.0, "input_share": 0.05, "compute_share": 0.8}
HEALTHY.update(batches_per_step=10.0, retraced_calls=0)


def summary(**overrides) -> ProfileSummary:
    return ProfileSummary(**{**HEALTHY, **overrides})


@pytest.mark.parametrize("run", ["one_step", "many_steps", "retracing"])
def test_recorded_profiles_summarise_consistently(run):
    recorded = RECORDED[run]
    s = profiling.summarize(recorded)
    assert s.steps == recorded["calls"]
    assert s.mean_step_ms > 0
    for share in (s.input_share, s.compute_share, s.other_share):
        assert 0.0 <= share <= 1.0
    assert s.input_share + s.compute_share <= 1.0 + 1e-9
    assert s.slowest_ops and all(ms > 0 for ms in s.slowest_ops.values())
    assert s.data_stages, "the tf.data stages of the distributed pipeline were read"
    assert recorded["xplane_bytes"] > 10 * len(json.dumps(recorded)), "extract keeps little"


def test_training_steps_per_call_are_counted_from_the_batches_taken():
    assert profiling.summarize(RECORDED["one_step"]).batches_per_step == 1
    many = profiling.summarize(RECORDED["many_steps"])
    assert many.batches_per_step == RECORDED["steps_per_call"]


def test_recorded_runs_get_their_planted_verdicts():
    verdicts = {
        run: profiling.diagnose(profiling.summarize(RECORDED[run])).verdict
        for run in ("one_step", "many_steps", "retracing")
    }
    assert verdicts == {
        "one_step": "host-overhead",
        "many_steps": "healthy",
        "retracing": "retracing",
    }
    retracing = profiling.summarize(RECORDED["retracing"])
    assert retracing.retraced_calls == RECORDED["retracing"]["calls"]
    assert profiling.summarize(RECORDED["one_step"]).retraced_calls == 0


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
    assert s.other_share == pytest.approx(50 / 200)
    assert s.batches_per_step == 1.0
    assert s.slowest_ops == {"MatMul": 3.0} and s.data_stages == {"Map": 2.0}
    with pytest.raises(ValueError, match="no steps"):
        profiling.summarize({**extracted, "steps": []})


def test_merge_joins_overlaps_and_drops_empty_intervals():
    assert profiling._merge([[5, 9], [0, 3], [2, 4], [7, 7], [10, 12]]) == [
        [0, 4],
        [5, 9],
        [10, 12],
    ]


@pytest.mark.parametrize(
    ("overrides", "verdict"),
    [
        ({}, "healthy"),
        ({"retraced_calls": 1}, "healthy"),  # one trace may be a first call
        ({"retraced_calls": 2}, "retracing"),
        ({"retraced_calls": 3, "input_share": 0.9, "batches_per_step": 1}, "retracing"),
        ({"input_share": profiling.INPUT_BOUND_SHARE}, "input-bound"),
        ({"input_share": profiling.INPUT_BOUND_SHARE - 0.01}, "healthy"),
        ({"input_share": 0.6, "batches_per_step": 1.0}, "input-bound"),
        ({"batches_per_step": 1.0}, "host-overhead"),
        ({"batches_per_step": 2.0}, "healthy"),
    ],
)
def test_diagnose_decides_from_the_numbers_in_order(overrides, verdict):
    diagnosis = profiling.diagnose(summary(**overrides))
    assert diagnosis.verdict == verdict
    assert diagnosis.fix == profiling.FIXES[verdict]
    assert verdict in str(diagnosis)


def test_findings_list_every_problem_that_holds_the_verdict_first():
    both = profiling.diagnose(summary(input_share=0.25, batches_per_step=1.0))
    assert both.findings == ("input-bound", "host-overhead") and both.verdict == "input-bound"
    assert "(also: host-overhead)" in str(both)
    all_three = profiling.diagnose(summary(retraced_calls=2, input_share=0.5, batches_per_step=1))
    assert all_three.findings == ("retracing", "input-bound", "host-overhead")
    healthy = profiling.diagnose(summary(batches_per_step=5.0))
    assert healthy.findings == () and healthy.verdict == "healthy" and "also" not in str(healthy)


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
