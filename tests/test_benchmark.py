"""tools/benchmark.py and tools/bench/: the quick mode runs end to end and computes every ratio.

No timing thresholds: whatever the machine's speed, the checks are that each measurement ran,
that each ratio is the one its own recorded repetitions give, and that the report says what was
skipped or unsupported. The quick run takes about 2 minutes on 2 CPU cores.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bench import common, machine, report  # noqa: E402

from helpers import processes, timing  # noqa: E402

# fit_spe_8_reduce_to_one: helpers.fitting says several steps per execution run on 8 replicas
# with ReductionToOneDevice; this test fails if that stops being true.
TECHNIQUES = {"pipeline", "steps_per_call", "fit_spe_1", "fit_spe_8_reduce_to_one", "bf16_step"}
OVERHEAD = {"overhead_loop", "overhead_fit", "overhead_tiny"}
# The recipe stages of helpers.selftest.speed: on one device fit runs several steps per call,
# so the static input and the steps per call are two changes; on the simulated TPU (collective
# all-reduce) fit stays at one step per call, so the static input is the last change.
RECIPES = {
    "recipe_1",
    "recipe_1_uint8_input",
    "recipe_1_static_input",
    "recipe_1_collection",
    "recipe_8",
    "recipe_8_uint8_input",
    "recipe_8_collection",
}
PAIRED = TECHNIQUES | OVERHEAD | RECIPES
COUNTED = {"bf16_activations", "bf16_weights"}
ALL_ROWS = PAIRED | COUNTED | {"fit_spe_8", "notebooks", "tests"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run ``benchmark.py --quick`` once; return (exit code, stdout, report, markdown)."""
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "benchmark.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=processes.child_env(cpu_only=False),
    )
    report_path, md_path = out / "benchmark.json", out / "benchmark.md"
    if not report_path.exists():
        pytest.fail(f"no report written\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc, json.loads(report_path.read_text()), md_path.read_text()


def _rows(report):
    return {row["key"]: row for row in report["rows"]}


@pytest.mark.slow
def test_the_quick_benchmark_runs_every_measurement_end_to_end(quick):
    """What only a real run shows: it finishes, shows progress, fills a row per measurement
    with measured numbers, meets Keras' real behaviour and names the machine."""
    proc, report_, md = quick
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "[1/3]" in proc.stdout and "[3/3]" in proc.stdout and "repetition 1:" in proc.stdout
    rows = _rows(report_)
    assert set(rows) == ALL_ROWS
    assert not [r["title"] for r in report_["rows"] if r["status"] == "failed"]
    for key in PAIRED:
        assert (
            rows[key]["status"] == "measured"
            and rows[key]["runs"] == report_["settings"]["repeats"]
        )
        assert math.isfinite(rows[key]["ratio"]) and rows[key]["ratio"] > 0, key
    # On TensorFlow 2.19 to 2.21 with their Keras, fit with steps_per_execution > 1 fails under
    # collective all-reduce (tests/test_fitting.py checks the rule on each stack): should a
    # release fix it, this fails and helpers.fitting must change.
    assert rows["fit_spe_8"]["status"] == "not supported"
    assert "placeholder" in rows["fit_spe_8"]["reason"]
    assert rows["bf16_weights"]["baseline_value"] == rows["bf16_weights"]["candidate_value"]
    assert report_["hardware"]["cpu"] in md and report_["versions"]["TensorFlow"] in md
    assert md.count("skipped in --quick mode") == 2
    assert len([line for line in md.splitlines() if line.startswith("| ")]) == 1 + len(ALL_ROWS)


def _comparison(base, cand):
    return timing.Comparison(timing.Timing(tuple(base)), timing.Timing(tuple(cand)))


def test_paired_ratios_come_from_their_own_repetitions():
    base, cand = [2.0, 4.0, 3.0], [1.0, 1.0, 2.0]
    fields = common.comparison_fields(_comparison(base, cand), "s/step", per=10)
    assert fields["ratio"] == pytest.approx(statistics.median(base) / statistics.median(cand))
    assert (fields["ratio_low"], fields["ratio_high"], fields["runs"]) == (1.5, 4.0, 3)
    assert fields["baseline_value"] == pytest.approx(0.3)  # median 3 s over 10 steps


def test_unit_values_follow_from_the_seconds():
    assert common.convert(2.0, "examples/s", per=1000) == pytest.approx(500.0)
    assert common.convert(2.0, "s/step", per=50) == pytest.approx(0.04)


def test_a_recipes_changes_multiply_to_the_whole_recipe(monkeypatch):
    # task_recipes times each change against the stage before it, so the ratios telescope
    # epoch by epoch. Fake timings stand in for fit; the rows are the real code's.
    from types import SimpleNamespace

    from bench import recipes

    from helpers.selftest import speed

    per_step = {"classic": [4.0, 5.0], "uint8 input": [3.0, 4.0], "collection": [1.0, 1.5]}
    stages = [{"name": name, "change": f"to {name}"} for name in per_step]
    monkeypatch.setattr(speed, "recipes", lambda *args: stages)
    monkeypatch.setattr(
        speed,
        "time_recipes",
        lambda *a, **k: {
            n: SimpleNamespace(per_step=v, median=statistics.median(v)) for n, v in per_step.items()
        },
    )
    monkeypatch.setattr(recipes, "lesson_images", lambda n: (np.zeros((n, 28, 28)), np.zeros(n)))
    settings = SimpleNamespace(recipe_examples=64, recipe_steps=2, repeats=2)
    rows = {
        r["key"]: r for r in recipes.task_recipes(SimpleNamespace(num_replicas_in_sync=1), settings)
    }
    whole = rows["recipe_1"]
    changes = [rows["recipe_1_uint8_input"], rows["recipe_1_collection"]]
    assert list(whole["stages"]) == list(per_step)
    for epoch in range(2):
        product = math.prod(
            c["baseline_seconds"][epoch] / c["candidate_seconds"][epoch] for c in changes
        )
        assert product == pytest.approx(
            whole["baseline_seconds"][epoch] / whole["candidate_seconds"][epoch]
        )


# --- the report's pieces, without running anything ------------------------------------------


def test_ratios_read_as_words():
    assert report.format_ratio(2.0, "faster") == "**2.00x faster**"
    assert report.format_ratio(0.25, "faster") == "4.00x slower"
    assert report.format_ratio(0.5, "smaller") == "2.00x larger"
    assert report.format_ratio(1.001, "faster") == "1.00x (same)"


def test_a_median_whose_pairs_disagree_is_no_verdict():
    """The README's table once read "**1.07x faster**" beside "0.79x to 1.42x (crosses 1)"."""
    row = {"ratio": 1.07, "ratio_low": 0.79, "ratio_high": 1.42, "better": "faster"}
    assert not report.settled(row) and report.settled({**row, "ratio_low": 1.01})
    assert report.settled({"exact": True})
    assert report.format_ratio(1.07, "faster", settled=False) == "1.07x faster (unsettled)"
    assert report.format_ratio(0.9, "faster", settled=False) == "1.11x slower (unsettled)"
    assert report.format_ratio(1.001, "faster", settled=False) == "1.00x (unsettled)"
    entry = common.row("x", "t", "s", "b", "c", unit="s/step", baseline_value=1.0, **row)
    entry.update(candidate_value=0.93, runs=9)
    line = next(x for x in report.markdown(_report([entry])).splitlines() if x.startswith("| t "))
    assert "1.07x faster (unsettled)" in line and "**" not in line


@pytest.mark.parametrize(
    ("low", "median", "high", "said"),
    [
        (1.2, 1.3, 1.4, "meets the target of at most 1.5x in every pair"),
        (1.2, 1.4, 1.6, "meets the target of at most 1.5x by the medians, not in every pair"),
        (1.4, 1.6, 1.7, "misses the target of at most 1.5x by the medians, though some pairs"),
        (1.6, 1.7, 1.8, "misses the target of at most 1.5x in every pair"),
    ],
)
def test_a_target_is_judged_from_every_pair(low, median, high, said):
    # overhead = 1 / ratio: the lowest overhead is the highest ratio
    row = {"target": 1.5, "ratio": 1 / median, "ratio_low": 1 / high, "ratio_high": 1 / low}
    verdict = report.target_verdict(row)
    assert said in verdict and f"({low:.2f}x to {high:.2f}x over the pairs)" in verdict


def test_spread_of_a_slower_row_is_inverted_in_order():
    row = {"ratio": 0.5, "ratio_low": 0.25, "ratio_high": 0.8, "better": "faster"}
    assert report.format_spread(row) == "1.25x to 4.00x slower"
    row.update(ratio=2.0, ratio_low=1.5, ratio_high=3.0)
    assert report.format_spread(row) == "1.50x to 3.00x faster"
    row.update(ratio=1.2, ratio_low=0.9, ratio_high=3.0)
    assert report.format_spread(row) == "0.90x to 3.00x (crosses 1)"
    assert report.format_spread({"exact": True}) == "exact (counted)"


def test_values_have_units():
    assert report.format_value(0.0125, "s/step") == "12.5 ms/step"
    assert report.format_value(12345.6, "examples/s") == "12,346 examples/s"
    assert report.format_value(3 * 2**20, "bytes") == "3 MiB"
    assert report.format_value(512, "bytes") == "512 B"


def test_error_reason_keeps_the_telling_line():
    err = ValueError(
        "Graph execution error:\n\nDetected at node x\n"
        "  (0) INVALID_ARGUMENT:  You must feed a value for placeholder tensor "
        "'while/body/_1/while/cond/then/_627/Placeholder_2' with dtype int32\n"
    )
    reason = common.error_reason(err)
    assert reason.startswith("ValueError: (0) INVALID_ARGUMENT:")
    assert "must feed a value" in reason and "'...'" in reason
    assert common.error_reason(RuntimeError("")) == "RuntimeError: "


def test_rows_come_in_the_reports_order():
    keys = ["tests", "pipeline", "recipe_1_uint8_input", "recipe_8", "overhead_tiny", "unknown"]
    keys += ["overhead_loop", "bf16_weights", "fit_spe_8_reduce_to_one", "recipe_1"]
    assert sorted(keys, key=report.rank) == [
        "overhead_loop",
        "overhead_tiny",
        "recipe_8",
        "recipe_1_uint8_input",
        "recipe_1",
        "pipeline",
        "fit_spe_8_reduce_to_one",
        "bf16_weights",
        "tests",
        "unknown",
    ]


def test_a_failed_task_becomes_a_failed_row_with_its_error():
    processes = [
        {"replicas": 1, "tasks": {"pipeline": {"ok": False, "error": "OSError: disk full"}}},
        {"replicas": 8, "tasks": {}},
    ]
    rows = {r["key"]: r for r in report.collect_rows(processes)}
    assert rows["pipeline"]["status"] == "failed"
    assert rows["pipeline"]["reason"] == "OSError: disk full"
    assert list(rows) == ["pipeline"]


def test_worker_reports_a_failing_task_and_runs_the_next(run_python, tmp_path):
    result = tmp_path / "result.json"
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tools")!r})
        from bench import common, worker

        def boom(strategy, settings):
            raise RuntimeError("broken on purpose")

        def fine(strategy, settings):
            return [{{"replicas": strategy.num_replicas_in_sync}}]

        worker.TASKS.update(boom=boom, fine=fine)
        from pathlib import Path
        worker.run_worker(1, ["boom", "fine"], common.QUICK, Path({str(result)!r}))
        """
    ).stdout
    saved = json.loads(result.read_text())
    assert saved["tasks"]["boom"] == {
        "ok": False,
        "error": "RuntimeError: broken on purpose",
        "seconds": saved["tasks"]["boom"]["seconds"],
    }
    assert saved["tasks"]["fine"]["result"] == [{"replicas": 1}]
    assert "broken on purpose" in out  # the traceback is shown, not swallowed


def _report(rows: list[dict]) -> dict:
    return {
        "quick": False,
        "started": "today",
        "seconds": 1.0,
        "hardware": machine.hardware(),
        "versions": {"Python": "3.11.7"},
        "load_average": {"start": [1.0], "end": [2.0]},
        "rows": rows,
    }


def test_markdown_shows_every_kind_of_row():
    paired = common.row(
        "steps_per_call",
        "steps per call",
        "8 replicas",
        "1 step",
        "50 steps",
        unit="s/step",
        baseline_value=0.01,
        candidate_value=0.005,
        ratio=2.0,
        ratio_low=1.5,
        ratio_high=2.5,
        better="faster",
        runs=5,
    )
    unsupported = common.row(
        "fit_spe_8", "spe in fit", "8 replicas", "1", "2", status="not supported", reason="Bug: x"
    )
    skipped = common.row(
        "notebooks",
        "notebooks",
        "smoke",
        "",
        "",
        status="skipped",
        reason="skipped in --quick mode",
    )
    failed_suite = common.row(
        "tests",
        "tests",
        "pytest",
        "",
        "",
        unit="s",
        status="failed",
        value=900.0,
        detail="2 failed, 10 passed in 900s",
    )
    lines = report.markdown(_report([paired, unsupported, skipped, failed_suite])).splitlines()
    table = [line for line in lines if line.startswith("| ") and "measurement" not in line]
    assert len(table) == 4
    assert (
        "10 ms/step" in table[0] and "**2.00x faster**" in table[0] and "1.50x to 2.50x" in table[0]
    )
    assert "**not supported**" in table[1] and "Bug: x" in table[1]
    assert "**skipped**" in table[2]
    assert "900 s" in table[3] and "**failed**: 2 failed" in table[3]
    assert any("full mode" in line for line in lines[:2])
