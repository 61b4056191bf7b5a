"""helpers.processes: the environment, log level and harmless-log rule of every child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import processes


def test_a_child_is_quiet_unbuffered_and_off_the_parents_accelerator(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv(processes.LOG_LEVEL_VARIABLE, raising=False)
    env = processes.child_env({"EXTRA": "1", "PATH": None})
    assert env[processes.LOG_LEVEL_VARIABLE] == processes.TF_LOG_LEVEL
    assert env["TPU_LOAD_LIBRARY"] == "0" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONUNBUFFERED"] == "1" and env["EXTRA"] == "1" and "PATH" not in env
    assert processes.child_env(cpu_only=False)["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_log_level_the_user_chose_wins(monkeypatch):
    monkeypatch.setenv(processes.LOG_LEVEL_VARIABLE, "0")
    assert processes.child_env()[processes.LOG_LEVEL_VARIABLE] == "0"


def test_a_started_child_writes_its_log_and_stop_kills_and_reaps_it(tmp_path):
    code = "import sys, time; print('ready', flush=True); print('oops', file=sys.stderr); time.sleep(60)"
    proc = processes.start([sys.executable, "-c", code], tmp_path / "child.log", env=os.environ)
    deadline = time.monotonic() + 30
    while "oops" not in processes.log_tail(tmp_path / "child.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.log_tail(tmp_path / "child.log").splitlines() == ["ready", "oops"]
    assert proc.poll() is None
    processes.stop([proc])
    assert proc.returncode == -signal.SIGKILL
    processes.stop([proc])  # a second stop, as in a finally after an error, changes nothing
    assert processes.log_tail(tmp_path / "missing.log") == ""


def test_wait_returns_at_the_first_failure_or_raises_at_the_timeout(tmp_path):
    def child(name, code):
        return processes.start([sys.executable, "-c", code], tmp_path / name, env=os.environ)

    sleeper, failing = child("s.log", "import time; time.sleep(60)"), child("f.log", "exit(3)")
    try:
        ends = processes.wait([sleeper, failing], 30)
        assert list(ends) == [1] and failing.returncode == 3 and sleeper.poll() is None
        with pytest.raises(TimeoutError, match="still running after 0 s"):
            processes.wait([sleeper], 0.2)
    finally:
        processes.stop([sleeper, failing])
    done = child("d.log", "pass")
    assert list(processes.wait([done], 30)) == [0] and done.returncode == 0


@pytest.mark.parametrize(
    "line, early_absl, harmless",
    [
        (
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            False,
            True,
        ),
        (
            "I0000 00:00:1.0 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
            False,
            True,
        ),
        (
            "I0000 00:00:1.0 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results",
            False,
            True,
        ),
        (
            "W0000 00:00:1.0 op_level_cost_estimator.cc:699] Error in PredictCost() for the op",
            True,
            True,
        ),
        (
            "W0000 00:00:1.0 op_level_cost_estimator.cc:699] Error in PredictCost() for the op",
            False,
            False,
        ),
        ("E0000 00:00:1.0 something.cc:1] a real error", True, False),
        ("UserWarning: a deprecation a user must act on", True, False),
    ],
)
def test_which_lines_are_harmless(line, early_absl, harmless):
    assert processes.is_harmless_log(line, early_absl=early_absl) is harmless


def test_early_absl_lines_are_tolerated_only_on_the_releases_that_write_them():
    assert processes.unsilenceable_logs_here("2.19.1") and processes.unsilenceable_logs_here(
        "2.20.0"
    )
    assert not processes.unsilenceable_logs_here("2.21.0")


def test_a_child_started_with_sigint_ignored_gets_ctrl_c_back(tmp_path):
    # A background job (`make test &`, nohup) starts everything with SIGINT ignored; a child
    # program that calls default_sigint() can still be stopped with Ctrl-C.
    ready = tmp_path / "ready"
    code = (
        "import pathlib, sys, time\n"
        "from helpers import processes\n"
        "processes.default_sigint()\n"
        # Ready only inside the try: a Ctrl-C before it would end the child with -2, not 7.
        f"try:\n    pathlib.Path({str(ready)!r}).touch()\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    sys.exit(7)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env=processes.child_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # the shell's doing
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 7
    finally:
        child.kill()
        child.wait()
    assert os.path.exists(ready)


def test_the_log_policy_reads_the_tensorflow_build_tpucheck_names():
    from tpucheck import host

    found = host.tensorflow_distribution()
    assert processes.tensorflow_version() == (found[1] if found else "")
