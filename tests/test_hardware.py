"""Hardware records decide every "verified on a TPU" word; the local lane runs here, for real.

The fixture tests/data/hardware-record-tpu.json is built from the schema as a Kaggle run on TPU
devices would write it (lessons 00_tpu_self_test to 05_bfloat16_mixed_precision passed, 06 failed, the self-test passed): it must turn
exactly the Kaggle route and those six lessons to "verified", and nothing else. The fixture
tests/data/hardware-record-tpu-quick.json is a quick run's (``--quick``: the route, lesson 01_tpu_detection_and_connection, the
self-test, passed): it must turn the Kaggle route, and nothing else, to "verified".
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import sync_notebooks  # noqa: E402
from hardware.driver import selftest_figures  # noqa: E402
from notebook_files import notebook_paths, settings  # noqa: E402

from hardware import __main__ as lane_command  # noqa: E402
from hardware import driver, records  # noqa: E402

FIXTURE = json.loads((ROOT / "tests" / "data" / "hardware-record-tpu.json").read_text())
PASSED = [r["notebook"] for r in FIXTURE["lessons"] if r["status"] == "passed"]
QUICK = json.loads((ROOT / "tests" / "data" / "hardware-record-tpu-quick.json").read_text())
KAGGLE_ROUTE_ONLY = {
    "Colab, TPU runtime": "no",
    "Kaggle, TPU VM v5e-8": "yes (Kaggle, 2026-01-03, commit 89abcde)",
    "Google Cloud TPU VM": "no",
}
# The quickest lesson in smoke mode (about 20 s), for the end-to-end run.
FAST_LESSON = "model_parallelism"


def route_rows(readme: str) -> dict[str, str]:
    """The route table's last column, by the platform's label."""
    start = readme.index(sync_notebooks.ROUTES_START)
    rows = readme[start : readme.index(sync_notebooks.ROUTES_END)].splitlines()
    return {
        row.split(" | ")[0].lstrip("| "): row.rstrip(" |").rsplit(" | ", 1)[1]
        for row in rows
        if row.startswith("| ") and "TPU |" not in row and row.count(" | ") == 5
    }


def readme_with(record_list: list[dict]) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return sync_notebooks.sync_readme(text, settings(), records=record_list)


def test_the_fixture_is_a_valid_record_from_tpus_that_counts():
    assert records.problems(FIXTURE) == []
    assert records.device_kind(FIXTURE) == "TPU" and records.counts(FIXTURE)


def test_a_tpu_record_verifies_exactly_its_route_and_the_lessons_that_passed():
    rows = route_rows(readme_with([FIXTURE]))
    assert rows == {
        "Colab, TPU runtime": "no",
        "Kaggle, TPU VM v5e-8": "yes (Kaggle, 2026-01-02, commit 0123456)",
        "Google Cloud TPU VM": "no",
    }
    for path in notebook_paths():
        verified = records.lesson_status(path.name, [FIXTURE]).startswith("verified on a TPU")
        assert verified == (path.name in PASSED), path.name
    page = records.page([FIXTURE])
    assert "2.50x the classic one" in page and "`0123456`" in page and "| 6 of 7 |" in page


@pytest.mark.parametrize(
    "change",
    [
        {"devices": [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(8)]},
        {"mode": "smoke"},
        {"python": "3.13.5"},
        {"tensorflow": "2.20.0"},
        {"tensorflow_distribution": "tensorflow-cpu"},
        {"platform": "local"},
    ],
    ids=["cpu-devices", "smoke", "other-python", "other-tensorflow", "cpu-build", "local"],
)
def test_a_record_off_the_route_or_off_a_tpu_verifies_nothing(change):
    record = {**FIXTURE, **change}
    assert records.problems(record) == []
    assert set(route_rows(readme_with([record])).values()) == {"no"}
    assert all(records.lesson_status(n, [record]) == records.NOT_YET for n in PASSED)


def test_a_failed_self_test_leaves_the_route_unverified_but_not_its_passed_lessons():
    record = {**FIXTURE, "selftest": {**FIXTURE["selftest"], "passed": False}}
    assert records.verified_routes([record]) == {}
    assert records.lesson_status(PASSED[0], [record]).startswith("verified on a TPU")


def test_a_quick_record_verifies_the_route_and_no_lesson_not_even_the_one_it_ran():
    assert records.problems(QUICK) == [] and records.device_kind(QUICK) == "TPU"
    assert records.verifies_route(QUICK) and not records.counts(QUICK)
    assert route_rows(readme_with([QUICK])) == KAGGLE_ROUTE_ONLY
    assert [r["notebook"] for r in QUICK["lessons"]] == ["01_tpu_detection_and_connection.ipynb"]
    assert all(records.lesson_status(p.name, [QUICK]) == records.NOT_YET for p in notebook_paths())
    page = records.page([QUICK])
    assert "| quick |" in page and "the route only (a quick run)" in page
    assert "| self-test: uint8_input | pass | 6.4 |" in page  # each check with its time
    assert "| reference script | passed |" in page


@pytest.mark.parametrize(
    "change",
    [
        {"selftest": {**QUICK["selftest"], "passed": False}},
        {"devices": [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(8)]},
        {"tensorflow": "2.20.0"},
    ],
    ids=["self-test-failed", "cpu-devices", "other-tensorflow"],
)
def test_a_quick_record_that_failed_or_is_off_a_tpu_verifies_nothing(change):
    record = {**QUICK, **change}
    assert set(route_rows(readme_with([record])).values()) == {"no"}
    assert "the route only" not in records.page([record])


def test_a_quick_record_does_not_hide_an_older_full_one():
    both = [FIXTURE, QUICK]
    assert (
        route_rows(readme_with(both))["Kaggle, TPU VM v5e-8"]
        == KAGGLE_ROUTE_ONLY["Kaggle, TPU VM v5e-8"]
    )  # the newest record that verifies the route names it
    assert records.lesson_status(PASSED[1], both).startswith("verified on a TPU")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"mode": "fast"}, "mode is not one of"),
        ({"steps": [{"step": "route", "status": "passed"}]}, "step row lacks seconds"),
    ],
)
def test_a_record_with_a_bad_mode_or_step_is_not_valid(change, problem):
    assert any(problem in found for found in records.problems({**QUICK, **change}))


def test_the_quick_driver_runs_the_route_lesson_01_the_self_test_and_the_script_hook(
    tmp_path, monkeypatch
):
    ran = []
    monkeypatch.setattr(driver, "streamed", lambda command, log, **kw: ran.append(command) or 0)
    route = {"step": "route", "status": "passed", "seconds": 1.0, "detail": "installed r"}
    monkeypatch.setattr(driver, "install", lambda platform, out: ("r", route))
    args = ["--platform", "kaggle", "--out", str(tmp_path), "--commit", "0" * 40, "--quick"]
    code = driver.main([*args, "--run-id", "kaggle-quick-test"])
    lessons, selftest = ran[0], ran[1]
    # lesson 01_tpu_detection_and_connection, in full
    assert "--only=tpu_detection_and_connection" in lessons and "--smoke" not in lessons
    assert selftest[1:4] == ["-m", "tpucheck", "selftest"] and "--smoke" not in selftest
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["mode"] == "quick" and records.problems(record) == []
    steps = {s["step"]: s for s in record["steps"]}
    assert list(steps)[:2] == ["route", "lessons"] and steps["connect"]["status"] == "did not run"
    assert ran[2][-2:] == ["train_tpu", "--smoke"]
    assert code == 1  # nothing ran for real here: no summary, no self-test report


def test_with_no_records_everything_says_not_yet_run_on_a_tpu():
    assert readme_with([]) == (ROOT / "README.md").read_text(encoding="utf-8")
    assert set(route_rows(readme_with([])).values()) == {"no"}
    assert records.NOT_YET in records.page([])
    assert records.load() == []  # no record is committed yet


def test_a_broken_record_stops_whoever_reads_it(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({**FIXTURE, "commit": "main"}))
    with pytest.raises(SystemExit, match="bad.json.*40-character"):
        records.load(tmp_path)


def test_the_self_tests_speed_figures_reach_the_record():
    report = {
        "checks": [
            {"key": "recipes", "evidence": {"speedup": 2.1, "examples_per_second": {"classic": 5}}},
            {"key": "matmul_rate", "evidence": {"tflops_total": 150.0}},
            {"key": "connect", "evidence": {}},
        ]
    }
    assert selftest_figures(report) == {
        "recipe_speedup": 2.1,
        "classic_examples_per_second": 5,
        "matmul_tflops": 150.0,
    }


# The self-test runs end to end in tests/test_tpucheck_selftest.py: here the driver runs its real
# command and report on two checks, connect (the devices) and matmul_rate (a speed figure).
TWO_CHECK_SELFTEST = (
    "import sys; from tpucheck import selftest; "
    "plan = [c for c in selftest.DEFAULT_CHECKS if c.key in ('connect', 'matmul_rate')]; "
    "sys.exit(selftest.main(sys.argv[1:], plan=plan))"
)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """``python -m tools.hardware local --smoke`` of one lesson, as ``make hardware`` runs it,
    the driver in this process and the self-test cut to two checks: (folder, status, output)."""
    tmp, started, real_run = tmp_path_factory.mktemp("local"), [], driver.streamed

    def start_driver(command, cwd):  # the lane's only subprocess
        assert command[:3] == [sys.executable, "-m", "tools.hardware.driver"] and cwd == ROOT
        started.append(command)
        driver.main(command[3:])

    def run(command, log, **kwargs):
        if command[1:4] == ["-m", "tpucheck", "selftest"]:
            command = [command[0], "-c", TWO_CHECK_SELFTEST, *command[4:]]
        return real_run(command, log, **kwargs)

    output = io.StringIO()
    args = ["local", "--smoke", "--only", FAST_LESSON, "--records", str(tmp / "records")]
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output):
        patch.setattr(lane_command, "subprocess", types.SimpleNamespace(run=start_driver))
        patch.setattr(driver, "streamed", run)
        code = lane_command.main([*args, "--out", str(tmp / "out")])
    assert len(started) == 1
    return tmp, code, output.getvalue()


@pytest.mark.slow
def test_the_local_lane_runs_the_driver_and_keeps_a_dry_run_record(local_run):
    tmp, code, output = local_run
    assert code == 0, output[-3000:]
    (stored,) = (tmp / "records").glob("local-*.json")
    assert output.strip().splitlines()[-1] == str(stored)
    record = json.loads(stored.read_text())
    assert records.problems(record) == [] and records.device_kind(record) == "CPU"
    assert not records.counts(record) and record["route"] is None
    assert [r["status"] for r in record["lessons"]] == ["passed"]
    assert record["selftest"]["passed"] and record["selftest"]["figures"]["matmul_tflops"] > 0
    (out,) = (tmp / "out").iterdir()
    for name in ("pip-freeze.txt", "devices.json", "self-test/tpu-self-test.json"):
        assert (out / name).exists(), name
    assert list((out / "lessons" / "executed").glob(f"??_{FAST_LESSON}.ipynb"))
    assert not (out / "install.log").exists()  # it installed nothing


def test_the_driver_starts_as_the_lane_and_the_host_script_start_it():
    """``python -m tools.hardware.driver``, which the fixture above calls in this process."""
    command = [sys.executable, "-m", "tools.hardware.driver", "--help"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--run-id" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_the_book_shows_a_dry_run_and_a_tpu_record(local_run, tmp_path):
    from book import build

    tmp, _, _ = local_run
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "kaggle-fixture.json").write_text(json.dumps(FIXTURE))
    run = tmp_path / "run"  # the stored lessons stand in for an executed run
    (run / "executed").mkdir(parents=True)
    for path in notebook_paths():
        (run / "executed" / path.name).write_bytes(path.read_bytes())
    (run / "summary.json").write_text(json.dumps({"header": "A stand-in run", "rows": []}))
    out = tmp_path / "book"
    args = ["--run", str(run), "--out", str(out), "--records", str(folder)]
    assert build.main([*args, "--records", str(tmp / "records")]) == 0
    html = out / "html"
    page = (html / "hardware.html").read_text()
    assert "nothing: a dry run on CPUs" in page and "0123456" in page
    assert "2.50x the classic one" in page
    first = (html / f"{PASSED[1][:-6]}.html").read_text()
    assert "verified on a TPU (Kaggle, 2026-01-02, commit 0123456)" in first
    assert records.NOT_YET in (html / f"{notebook_paths()[-1].stem}.html").read_text()
    assert "yes (Kaggle, 2026-01-02, commit 0123456)" in (html / "routes.html").read_text()
