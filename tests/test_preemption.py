"""helpers.preemption: a ``fit`` run killed with SIGKILL resumes from its last backup.

The program ``helpers._programs.preemptible`` (the reference script's model, pipeline and
``compile_for_fit``, with ``BackupAndRestore``) runs in separate processes; notebook
08_checkpoints_and_preemption kills it with SIGKILL and starts it again on every stack. Every
process has a time limit (``RUN_TIMEOUT``); a process that overruns it is killed and the test
fails with its output.
"""

from __future__ import annotations

import dataclasses

import pytest

from helpers import preemption
from helpers._programs import preemptible

RUN_TIMEOUT = 300  # seconds per training process, generous for a busy 2-core machine
EPOCHS, STEPS_PER_EPOCH = 3, 8
TOTAL = EPOCHS * STEPS_PER_EPOCH


def _config(tmp_path, name: str, **changes) -> preemption.RunConfig:
    base = preemption.RunConfig(
        workdir=str(tmp_path / name),
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        hold_timeout=RUN_TIMEOUT,
    )
    return dataclasses.replace(base, **changes)


# ------------------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"replicas": True}, "replicas must be a positive integer"),
        ({"hold_at": TOTAL + 1}, "hold_at must be a step in 1..24"),
    ],
)
def test_bad_configurations_are_refused(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, "x", **changes)


def test_command_line_round_trips(tmp_path):
    config = _config(tmp_path, "x", hold_at=12, require_checkpoint=True)
    args = preemption.command(config)
    assert args[1:3] == ["-m", preemption.PROGRAM]
    assert preemptible.parse_args(args[3:]) == config
    assert "--require-checkpoint" not in preemption.command(_config(tmp_path, "x"))
    short = preemption.command(config, defaults=False)  # for a reader: no flag repeats a default
    assert "--seed" not in short and "--hold-at" in short
    assert preemptible.parse_args(short[3:]) == config


def test_command_line_errors_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit):
        preemptible.parse_args(["--workdir", str(tmp_path), "--epochs", "0"])
    assert "epochs must be a positive integer" in capsys.readouterr().err


def test_kill_point_is_required(tmp_path):
    with pytest.raises(ValueError, match="kill_when"):
        preemption.run_until_killed(_config(tmp_path, "x"))


# ----------------------------------------------------------------------- data and logs


def test_read_progress_skips_a_line_being_written(tmp_path):
    log = preemptible.ProgressLog(tmp_path / "p.jsonl")
    log.write("launch", config={})
    log.write("step", step=1)
    with open(tmp_path / "p.jsonl", "a") as f:
        f.write('{"event": "st')
    events = preemption.read_progress(tmp_path / "p.jsonl")
    assert [e["event"] for e in events] == ["launch", "step"]
    assert preemption.read_progress(tmp_path / "missing.jsonl") == []


def _events(runs):
    """Synthetic logs: runs = [(pid, start_step, last_step, finished_epochs, done)]."""
    events = []
    for pid, start, last, finished, done in runs:
        events += [
            {"event": "launch", "pid": pid},
            {"event": "start", "pid": pid, "start_step": start},
        ]
        for step in range(start + 1, last + 1):
            epoch = (step - 1) // 4
            events.append({"event": "step", "pid": pid, "step": step, "steps": 1, "epoch": epoch})
        events += [{"event": "epoch_end", "pid": pid, "epoch": e} for e in finished]
        if done:
            events.append({"event": "done", "pid": pid})
    return events


def test_summarize_counts_repeated_steps_and_epochs():
    good = preemption.summarize_runs(_events([(1, 0, 6, [0], False), (2, 4, 12, [1, 2], True)]), 4)
    assert good["final_step"] == 12 and good["finished"]
    assert good["steps_run"] == 14 and good["repeated_steps"] == 2
    assert good["repeated_epochs"] == []
    # A restart from scratch would train the finished epoch 0 again: that must show.
    bad = preemption.summarize_runs(
        _events([(1, 0, 6, [0], False), (2, 0, 12, [0, 1, 2], True)]), 4
    )
    assert bad["repeated_epochs"] == [0] and bad["repeated_steps"] == 6


# ------------------------------------------- kill and resume, in real processes (SIGKILL)


# A fit run killed mid-epoch and resumed at the epoch's start is notebook
# 08_checkpoints_and_preemption's aside, asserted there on every stack; the tests below are the
# other ends: a restart with nothing to resume, and a run that ends before its kill point.


def test_a_restart_that_finds_no_checkpoint_fails(tmp_path):
    config = _config(tmp_path, "run", require_checkpoint=True)
    with pytest.raises(preemption.RunFailed, match="this run was asked to continue"):
        preemption.run_to_end(config, timeout=RUN_TIMEOUT)


def test_nothing_to_resume_is_found_before_tensorflow_loads(tmp_path):
    """The check the child runs first: it decides the plain cases and leaves the rest alone."""
    from helpers.checkpoints import CheckpointNotFoundError

    config = _config(tmp_path, "run", require_checkpoint=True)
    with pytest.raises(CheckpointNotFoundError, match="nothing to resume"):
        preemptible.fail_early_if_nothing_to_resume(config)
    folder = tmp_path / "run" / "backup"
    folder.mkdir(parents=True)
    (folder / "training_metadata.json").write_text("{}")
    preemptible.fail_early_if_nothing_to_resume(config)
    fresh = _config(tmp_path, "fresh")  # not asked to continue: nothing to check
    preemptible.fail_early_if_nothing_to_resume(fresh)


def test_a_run_that_ends_before_its_kill_point_is_reported(tmp_path):
    config = _config(tmp_path, "run", epochs=1, hold_at=2, hold_timeout=0.5)
    with pytest.raises(preemption.RunFailed, match=r"ended by itself \(exit 3\)") as err:
        preemption.run_until_killed(config, lambda events: False, timeout=RUN_TIMEOUT)
    assert "hold_timeout" in str(err.value)


def test_a_finished_run_started_again_does_nothing(tmp_path):
    """In this process, on one device: the second start restores the end state and stops."""
    import tensorflow as tf

    config = _config(tmp_path, "run", replicas=1, epochs=2, steps_per_epoch=4)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    log = preemptible.ProgressLog(config.log_path)
    first = preemptible.train_fit(config, strategy, log)
    steps_logged = len(preemption.read_progress(config.log_path))
    again = preemptible.train_fit(
        dataclasses.replace(config, require_checkpoint=True), strategy, log
    )
    assert first["step"] == again["step"] == again["optimizer_iterations"] == 8
    assert again["digest"] == first["digest"]
    new_events = preemption.read_progress(config.log_path)[steps_logged:]
    assert [e for e in new_events if e["event"] == "step"] == []
    assert new_events[-1]["event"] == "done"
