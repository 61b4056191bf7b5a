"""The Kaggle lane (``python -m tools.hardware kaggle``) driving the real ``kaggle`` client.

Each test starts the stand-in of ``tests/kaggle_standin.py`` on 127.0.0.1:80 (root only), runs
the lane as a user would, and checks what it printed, what it stored and what Kaggle received.
They run on the main stack only (``slow``): one port 80, one stand-in at a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kaggle_standin import KaggleStandIn, Scenario

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from hardware import records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "data" / "hardware-record-tpu.json").read_text())
QUICK = json.loads((ROOT / "tests" / "data" / "hardware-record-tpu-quick.json").read_text())
TOKEN = "KGAT_standin_0123456789abcdef"
LOG = [
    {
        "stream_name": "stdout",
        "time": 1.0,
        "data": "      02_building_in_strategy_scope.ipynb ...\n",
    },
    {"stream_name": "stdout", "time": 9.0, "data": "      03_keras_compile_and_fit.ipynb ...\n"},
    {"stream_name": "stderr", "time": 99.0, "data": "ResourceExhaustedError: out of HBM\n"},
]

# Importing the client creates its config folder without exist_ok: two test workers importing it
# at once race (FileExistsError). Create the folder it would pick first.
if not os.environ.get("KAGGLE_CONFIG_DIR") and not (Path.home() / ".kaggle").exists():
    (Path.home() / ".config" / "kaggle").mkdir(parents=True, exist_ok=True)
pytest.importorskip("kaggle", reason="the kaggle client needs Python 3.11 or newer")
needs_port_80 = pytest.mark.skipif(
    os.geteuid() != 0, reason="the kaggle client sends to localhost:80 only; binding it needs root"
)
pytestmark = [pytest.mark.slow, needs_port_80]


def outputs(failed: str = "", record: bool = True, run_id: str = "", fixture: dict = FIXTURE):
    """What the kernel leaves in /kaggle/working: the record and the runner's summary."""

    def make(commit: str, pushed_run_id: str) -> dict[str, bytes]:
        rows = [dict(r) for r in fixture["lessons"] if r["status"] == "passed"]
        for row in rows:
            row["status"] = "FAILED" if row["notebook"].startswith(failed or "-") else "passed"
        rec = {**fixture, "commit": commit, "run_id": run_id or pushed_run_id, "lessons": rows}
        files = {"hardware-run/lessons/summary.json": json.dumps({"rows": rows}).encode()}
        if record:
            files["hardware-run/record.json"] = json.dumps(rec).encode()
        return files

    return make


def lane(
    tmp_path: Path,
    scenario: Scenario,
    *args: str,
    env: dict | None = None,
    signal_at=None,
    extra_env: dict | None = None,
):
    """Run the lane against a stand-in; (exit status, output, stand-in)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_")}
    base.update(
        HOME=str(tmp_path / "home"),
        KAGGLE_API_ENVIRONMENT="LOCALHOST",
        FIELD_GUIDE_REPO=str(ROOT),  # a repository that has this commit
        **(env if env is not None else {"KAGGLE_API_TOKEN": TOKEN}),
        **(extra_env or {}),
    )
    command = [sys.executable, "-m", "tools.hardware", "kaggle", "--poll", "0.05"]
    command += ["--stale-grace", "0.6", "--records", str(tmp_path / "records")]
    command += ["--out", str(tmp_path / "out"), *args]
    with KaggleStandIn(scenario) as kaggle:
        # A shell's background job (`make test &`) starts with Ctrl-C ignored, and a Python child
        # then installs no KeyboardInterrupt handler: the lane gets back the default a user has.
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=base,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        if signal_at:
            signal_at(kaggle, proc)
        try:
            output, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the lane did not end within 90 s:\n{proc.communicate()[0]}")
    return proc.returncode, output, kaggle


def everything_written(tmp_path: Path, output: str, kaggle: KaggleStandIn) -> str:
    """What the lane printed and wrote, and every request body but the token check's own."""
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    bodies = [r["body"] for r in kaggle.received if not r["path"].endswith("/IntrospectToken")]
    return "\n".join([output, json.dumps(bodies), *written])


def test_a_run_pushes_a_private_tpu_kernel_and_keeps_its_record(tmp_path):
    # Right after the push the status still describes the previous session (PR #1177).
    statuses = ["COMPLETE", "COMPLETE", "QUEUED", "RUNNING", "RUNNING", "COMPLETE"]
    scenario = Scenario(token=TOKEN, statuses=statuses, outputs=outputs())
    code, output, kaggle = lane(tmp_path, scenario)
    assert code == 0, output
    (push,) = kaggle.calls("SaveKernel")
    assert push["machineShape"] == "TpuV5E8"
    assert push["enableInternet"] is True and push["isPrivate"] is True
    assert push["kernelType"] == "script" and push["language"] == "python"
    assert "dockerImage" not in push and "dockerImagePinningType" not in push
    assert "dockerImageVersionId" not in push["text"]
    assert push["slug"].startswith("fieldguide/tpu-field-guide-hw-")
    assert kaggle.status_calls == len(statuses)  # it waited past the stale COMPLETE
    stored = list((tmp_path / "records").glob("kaggle-*.json"))
    assert len(stored) == 1 and output.strip().splitlines()[-1] == str(stored[0])
    record = json.loads(stored[0].read_text())
    assert record["commit"] in push["text"] and record["run_id"] in push["text"]
    assert "QUEUED after" in output and "RUNNING after" in output
    assert TOKEN not in everything_written(tmp_path, output, kaggle)


def test_a_legacy_key_works_and_stays_secret(tmp_path):
    key = "legacykey0123456789"
    scenario = Scenario(legacy=("fieldguide", key), outputs=outputs())
    env = {"KAGGLE_USERNAME": "fieldguide", "KAGGLE_KEY": key}
    code, output, kaggle = lane(tmp_path, scenario, env=env)
    assert code == 0, output
    assert key not in everything_written(tmp_path, output, kaggle)


def test_no_credentials_stops_within_5_seconds_naming_what_to_set(tmp_path):
    began = time.monotonic()
    code, output, kaggle = lane(tmp_path, Scenario(), env={})
    assert time.monotonic() - began < 5
    assert code == 2 and not kaggle.received
    for name in ("KAGGLE_API_TOKEN", "~/.kaggle/access_token", "KAGGLE_USERNAME", "KAGGLE_KEY"):
        assert name in output
    assert "kaggle.com/settings" in output
    assert output.strip().splitlines()[-1] == "No record: no Kaggle credentials."
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("scenario", "said", "pushed"),
    [
        (Scenario(token="another"), "Kaggle refused the API token in KAGGLE_API_TOKEN", 0),
        (Scenario(token=TOKEN, used_seconds=20 * 3600), "20.0 h of 20.0 h used", 0),
        (
            Scenario(token=TOKEN, push_error="Maximum batch TPU session count of 1 reached"),
            "A TPU session is already running",
            1,
        ),
        (
            Scenario(token=TOKEN, push_error="Notebook text exceeds the size limit"),
            'Kaggle refused the push: "Notebook text exceeds the size limit"',
            1,
        ),
    ],
    ids=["token-refused", "quota-spent", "session-running", "push-refused"],
)
def test_faults_before_the_run_say_why_and_exit_2(tmp_path, scenario, said, pushed):
    code, output, kaggle = lane(tmp_path, scenario)
    assert code == 2 and said in output, output
    assert len(kaggle.calls("SaveKernel")) == pushed
    assert output.strip().splitlines()[-1].startswith("No record: ")
    assert "Traceback" not in output and not (tmp_path / "records").exists()


def test_a_kernel_in_error_names_the_failing_lesson_and_its_log(tmp_path):
    scenario = Scenario(
        token=TOKEN,
        statuses=["RUNNING", "ERROR"],
        failure_message="Your notebook hit an error",
        outputs=outputs(failed="03", record=False),
        log=LOG,
    )
    code, output, _ = lane(tmp_path, scenario)
    assert code == 2, output
    assert "ERROR (Your notebook hit an error)" in output
    assert "Failing lesson: 03_keras_compile_and_fit.ipynb" in output
    assert "ResourceExhaustedError: out of HBM" in output  # the log's last lines


def test_a_record_with_a_failed_lesson_exits_1(tmp_path):
    code, output, _ = lane(tmp_path, Scenario(token=TOKEN, outputs=outputs(failed="04")))
    assert code == 1 and "Failed: 04_custom_training_loops.ipynb" in output
    assert output.strip().splitlines()[-1].endswith(".json")


def test_past_the_wall_clock_limit_the_kernel_is_deleted(tmp_path):
    scenario = Scenario(token=TOKEN, statuses=["RUNNING"], outputs=outputs())
    code, output, kaggle = lane(tmp_path, scenario, "--limit-hours", "0.0004")
    assert code == 2 and kaggle.deleted == [kaggle.calls("SaveKernel")[0]["slug"]]
    assert "was deleted" in output


def interrupt_when(received: str, times: int = 1):
    """A ``signal_at`` that sends Ctrl-C once the stand-in has received ``received`` ``times``."""

    def interrupt(kaggle, proc):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(received in r["path"] for r in list(kaggle.received)) >= times:
                break
            time.sleep(0.05)
        time.sleep(0.2)  # the request is under way
        proc.send_signal(signal.SIGINT)

    return interrupt


def test_ctrl_c_says_what_still_runs_and_how_to_collect_it(tmp_path):
    interrupt = interrupt_when("/GetKernelSessionStatus", times=2)

    scenario = Scenario(token=TOKEN, statuses=["RUNNING"], outputs=outputs())
    code, output, kaggle = lane(tmp_path, scenario, signal_at=interrupt)
    slug = kaggle.calls("SaveKernel")[0]["slug"]
    assert code == 2 and f"The kernel {slug} is still running" in output
    assert f"python -m tools.hardware kaggle --collect {slug}" in output
    assert not kaggle.deleted and "Traceback" not in output


def test_outputs_of_an_earlier_run_are_not_taken_for_this_one(tmp_path):
    scenario = Scenario(token=TOKEN, statuses=["COMPLETE"], outputs=outputs(run_id="kaggle-old"))
    code, output, _ = lane(tmp_path, scenario)
    assert code == 2 and "the outputs came from another run" in output


def test_collect_fetches_the_record_of_a_run_started_earlier(tmp_path):
    earlier = outputs()("0123456789abcdef0123456789abcdef01234567", "kaggle-earlier-run")
    scenario = Scenario(token=TOKEN, statuses=["RUNNING", "COMPLETE"], files=earlier)
    code, output, kaggle = lane(tmp_path, scenario, "--collect", "fieldguide/tpu-field-guide-hw-1")
    assert code == 0 and not kaggle.calls("SaveKernel"), output
    assert (
        json.loads(Path(output.strip().splitlines()[-1]).read_text())["run_id"]
        == "kaggle-earlier-run"
    )


# --- what Kaggle really does (issue 47): each of these failed on the lane before it ---------------


def no_secret_and_no_traceback(tmp_path, output, kaggle, secret=TOKEN):
    assert "Traceback" not in output
    assert secret not in everything_written(tmp_path, output, kaggle)


@pytest.mark.parametrize(
    ("refusal", "said"), [("inactive", "(inactive)"), ("401", "(HTTP 401: Unauthenticated)")]
)
def test_a_refused_token_is_named_with_where_to_make_a_new_one(tmp_path, refusal, said):
    code, output, kaggle = lane(tmp_path, Scenario(token="another", token_refusal=refusal))
    assert code == 2 and not kaggle.calls("SaveKernel"), output
    assert f"Kaggle refused the API token in KAGGLE_API_TOKEN {said}" in output
    assert "https://www.kaggle.com/settings/api" in output
    assert "No Kaggle credentials found" not in output and "API failed" not in output
    assert output.strip().splitlines()[-1] == "No record: Kaggle refused the API token."
    no_secret_and_no_traceback(tmp_path, output, kaggle)


def test_a_wrong_legacy_key_is_named_before_any_push(tmp_path):
    scenario = Scenario(legacy=("fieldguide", "the-right-key"), outputs=outputs())
    env = {"KAGGLE_USERNAME": "fieldguide", "KAGGLE_KEY": "a-wrong-key-0123"}
    code, output, kaggle = lane(tmp_path, scenario, env=env)
    assert code == 2 and not kaggle.calls("SaveKernel"), output
    assert "Kaggle refused the legacy key in KAGGLE_KEY for user fieldguide" in output
    assert "https://www.kaggle.com/settings/api" in output and "API failed" not in output
    assert output.strip().splitlines()[-1] == "No record: Kaggle refused the legacy key."
    no_secret_and_no_traceback(tmp_path, output, kaggle, secret="a-wrong-key-0123")


def test_transient_failures_while_polling_and_downloading_are_retried(tmp_path):
    faults = {"GetKernelSessionStatus": [500, "drop", 429, "hang"], "download": [503, "drop"]}
    scenario = Scenario(token=TOKEN, faults=faults, outputs=outputs())
    code, output, kaggle = lane(tmp_path, scenario, "--api-timeout", "1")
    assert code == 0, output
    for said in ("HTTP 500", "the connection dropped", "HTTP 429", "no answer in time", "HTTP 503"):
        assert said in output
    assert "while asking the kernel's status; retry 1 of 8" in output
    assert "while downloading its outputs; retry 1 of 8" in output
    assert not any(kaggle.faults.values())  # every planned fault was met


def test_failures_past_the_retry_limit_say_the_kernel_still_runs(tmp_path):
    scenario = Scenario(
        token=TOKEN, statuses=["RUNNING"], faults={"GetKernelSessionStatus": [502] * 9}
    )
    code, output, kaggle = lane(tmp_path, scenario, "--api-retries", "2")
    slug = kaggle.calls("SaveKernel")[0]["slug"]
    assert code == 2 and "Kaggle's API kept failing (HTTP 502, 3 tries in a row)" in output, output
    assert f"The kernel {slug} is still running" in output  # as Ctrl-C says it
    assert f"https://www.kaggle.com/code/{slug}" in output
    assert f"python -m tools.hardware kaggle --collect {slug}" in output
    assert not kaggle.deleted
    no_secret_and_no_traceback(tmp_path, output, kaggle)


def test_a_client_that_cannot_be_imported_is_a_sentence_and_exit_2(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "six.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'six'\", name='six')\n"
    )
    code, output, kaggle = lane(
        tmp_path, Scenario(token=TOKEN), extra_env={"PYTHONPATH": str(blocker)}
    )
    assert code == 2 and not kaggle.received, output
    assert "The kaggle client cannot be imported (No module named 'six')" in output
    assert output.strip().splitlines()[-1] == "No record: the kaggle client cannot be imported."
    assert "Traceback" not in output


def test_six_is_pinned_beside_the_kaggle_client():
    """kaggle 2.2.5 imports six (kaggle/models/upload_file.py) without declaring it."""
    lines = (ROOT / "requirements-tools.txt").read_text().splitlines()
    (kaggle,) = [line for line in lines if line.startswith("kaggle==")]
    (six,) = [line for line in lines if line.startswith("six==")]
    assert six.split(";")[1:] == kaggle.split(";")[1:]  # the same Python versions


def test_a_log_that_is_not_json_loses_no_record(tmp_path):
    truncated = json.dumps(LOG)[:-40]  # cut off mid-entry, as a log copied while written
    scenario = Scenario(token=TOKEN, outputs=outputs(), log_text=truncated)
    code, output, kaggle = lane(tmp_path, scenario)
    assert code == 0, output
    assert output.strip().splitlines()[-1].endswith(".json")


def test_an_error_with_a_truncated_log_still_shows_its_readable_lines(tmp_path):
    truncated = json.dumps(LOG)[:-20]
    scenario = Scenario(
        token=TOKEN,
        statuses=["RUNNING", "ERROR"],
        outputs=outputs(record=False),
        log_text=truncated,
    )
    code, output, _ = lane(tmp_path, scenario)
    assert code == 2 and "Failing lesson: 03_keras_compile_and_fit.ipynb" in output, output


def test_the_outputs_are_fetched_for_the_pushed_version(tmp_path):
    earlier = outputs()("0123456789abcdef0123456789abcdef01234567", "kaggle-earlier-run")
    scenario = Scenario(token=TOKEN, outputs=outputs(), files=earlier, lagging_outputs=True)
    code, output, kaggle = lane(tmp_path, scenario)
    assert code == 0, output
    assert {c.get("versionLabel") for c in kaggle.calls("ListKernelSessionOutput")} == {"v1"}


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ({"GetAcceleratorQuotaStatistics": ["hang"]}, "Interrupted before anything was pushed"),
        ({"SaveKernel": ["hang"]}, "Interrupted during the push"),
        ({"download": ["hang"]}, "Interrupted while downloading the outputs"),
    ],
    ids=["before-push", "push", "download"],
)
def test_ctrl_c_at_any_stage_says_what_to_run_next(tmp_path, fault, said):
    (method,) = fault
    received = "GET /files/" if method == "download" else f"/{method}"
    scenario = Scenario(token=TOKEN, faults=fault, outputs=outputs())
    code, output, kaggle = lane(tmp_path, scenario, signal_at=interrupt_when(received))
    assert code == 2 and said in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    if not kaggle.calls("SaveKernel"):
        assert "nothing runs on Kaggle" in output and "--collect" not in output
        return
    slug = kaggle.calls("SaveKernel")[0]["slug"]
    assert f"python -m tools.hardware kaggle --collect {slug}" in output
    assert f"https://www.kaggle.com/code/{slug}" in output


def test_an_error_for_the_pushed_version_ends_the_wait_at_once(tmp_path):
    scenario = Scenario(
        token=TOKEN, statuses=["ERROR"], failure_message="boom", outputs=outputs(record=False)
    )
    began = time.monotonic()
    code, output, kaggle = lane(tmp_path, scenario, "--stale-grace", "60")
    assert code == 2 and "ended in ERROR (boom)" in output, output
    assert kaggle.status_calls == 1 and time.monotonic() - began < 40
    assert kaggle.calls("GetKernelSessionStatus")[0]["versionLabel"] == "v1"


def test_cancel_requested_still_runs(tmp_path):
    statuses = ["RUNNING", "CANCEL_REQUESTED", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED"]
    scenario = Scenario(token=TOKEN, statuses=statuses, outputs=outputs(record=False))
    code, output, kaggle = lane(tmp_path, scenario)
    assert code == 2 and kaggle.status_calls == len(statuses), output
    assert "ended in CANCEL_ACKNOWLEDGED" in output


def test_complete_without_a_record_names_the_kernel_and_its_log(tmp_path):
    scenario = Scenario(
        token=TOKEN, statuses=["RUNNING", "COMPLETE"], outputs=outputs(record=False), log=LOG
    )
    code, output, kaggle = lane(tmp_path, scenario)
    slug = kaggle.calls("SaveKernel")[0]["slug"]
    assert code == 2 and f"https://www.kaggle.com/code/{slug}" in output, output
    assert "ResourceExhaustedError: out of HBM" in output  # the log's last lines
    assert output.strip().splitlines()[-1] == "No record: the kernel completed without a record."


def test_a_quick_run_pushes_the_quick_set_and_verifies_the_route_only(tmp_path):
    scenario = Scenario(token=TOKEN, outputs=outputs(fixture=QUICK))
    code, output, kaggle = lane(tmp_path, scenario, "--quick")
    assert code == 0, output
    (push,) = kaggle.calls("SaveKernel")
    assert "'--quick'" in push["text"] and "'--smoke'" not in push["text"]
    assert push["sessionTimeoutSeconds"] == 3600  # a quick run's limit: one hour, not nine
    record = json.loads(Path(output.strip().splitlines()[-1]).read_text())
    assert record["mode"] == "quick"
    assert set(records.verified_routes([record])) == {"kaggle"}
    assert all(
        records.lesson_status(r["notebook"], [record]) == records.NOT_YET
        for r in FIXTURE["lessons"]
    )
    assert "This quick record verifies the route on a TPU, and no lesson" in output
    assert "  self-test: uint8_input: pass in 6.4 s." in output  # each check, with its time
