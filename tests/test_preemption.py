"""helpers.preemption: a training program killed with SIGKILL resumes and loses nothing.

The integration tests start the program ``helpers._programs.preemptible`` in separate processes, kill them with
SIGKILL at a point announced in their progress log, and start them again. Every process has a
time limit (``RUN_TIMEOUT``); a process that overruns it is killed and the test fails with its
output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import time

import numpy as np
import pytest

from helpers import preemption
from helpers._programs import preemptible

RUN_TIMEOUT = 300  # seconds per training process, generous for a busy 2-core machine
EPOCHS, STEPS_PER_EPOCH, SAVE_EVERY = 3, 8, 4
TOTAL = EPOCHS * STEPS_PER_EPOCH


def _config(tmp_path, name: str, **changes) -> preemption.RunConfig:
    base = preemption.RunConfig(
        mode="custom",
        workdir=str(tmp_path / name),
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        save_every=SAVE_EVERY,
        hold_timeout=RUN_TIMEOUT,
    )
    return dataclasses.replace(base, **changes)


# ------------------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "train"}, "mode must be one of"),
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"replicas": True}, "replicas must be a positive integer"),
        ({"save_every": -1}, "save_every"),
        ({"step_delay": -1.0}, "step_delay"),
        ({"hold_at": TOTAL + 1}, "hold_at must be a step in 1..24"),
        ({"hold_where": "anywhere"}, "hold_where must be one of"),
        ({"hold_at": 6, "hold_where": "before-commit"}, "multiple of 4"),
        ({"mode": "fit", "hold_at": 8, "hold_where": "before-commit"}, "needs mode='custom'"),
        ({"crash_at": 6}, "crash_at needs mode='custom' and a checkpoint step"),
        ({"mode": "fit", "crash_at": 8}, "crash_at needs mode='custom'"),
        ({"crash_in": "halfway"}, "crash_in must be one of"),
        ({"crash_window": 0.0}, "crash_window must be positive"),
    ],
)
def test_bad_configurations_are_refused(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, "x", **changes)


def test_command_line_round_trips(tmp_path):
    config = _config(tmp_path, "x", hold_at=12, hold_where="before-commit", require_checkpoint=True)
    args = preemption.command(config)
    assert args[1:3] == ["-m", preemption.PROGRAM]
    assert preemptible.parse_args(args[3:]) == config
    crash = _config(tmp_path, "x", crash_at=16, crash_in="sweep", crash_seed=3, crash_window=0.2)
    assert preemptible.parse_args(preemption.command(crash)[3:]) == crash
    assert "--require-checkpoint" not in preemption.command(_config(tmp_path, "x"))
    short = preemption.command(config, defaults=False)  # for a reader: no flag repeats a default
    assert "--crash-in" not in short and "--hold-at" in short
    assert preemptible.parse_args(short[3:]) == config


def test_command_line_errors_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit):
        preemptible.parse_args(["--mode", "custom", "--workdir", str(tmp_path), "--epochs", "0"])
    assert "epochs must be a positive integer" in capsys.readouterr().err


def test_kill_point_is_required(tmp_path):
    with pytest.raises(ValueError, match="kill_when"):
        preemption.run_until_killed(_config(tmp_path, "x"))


# ----------------------------------------------------------------------- data and logs


def test_resumable_dataset_continues_in_the_same_order():
    x = np.arange(20, dtype=np.float32).reshape(20, 1)
    y = np.arange(20, dtype=np.int32)  # 5 steps of 4: each epoch is a permutation of all
    full = [b.numpy().tolist() for _, b in preemption.resumable_dataset(x, y, 4, 5, 3, seed=1)]
    assert len(full) == 15
    assert sorted(sum(full[:5], [])) == sorted(sum(full[5:10], [])) == list(range(20))
    assert full[:5] != full[5:10]  # ... in another order
    for start in (0, 3, 5, 12):
        rest = preemption.resumable_dataset(x, y, 4, 5, 3, first_step=start, seed=1)
        assert [b.numpy().tolist() for _, b in rest] == full[start:]
    other = [b.numpy().tolist() for _, b in preemption.resumable_dataset(x, y, 4, 5, 3, seed=2)]
    assert other != full


def test_resumable_dataset_ignores_the_global_seed():
    """The order must not change when other code sets TensorFlow's global seed."""
    import tensorflow as tf

    x, y = np.zeros((20, 1), np.float32), np.arange(20, dtype=np.int32)
    before = [b.numpy().tolist() for _, b in preemption.resumable_dataset(x, y, 4, 5, 2, seed=3)]
    tf.random.set_seed(1234)
    after = [b.numpy().tolist() for _, b in preemption.resumable_dataset(x, y, 4, 5, 2, seed=3)]
    assert before == after


def test_resumable_dataset_needs_enough_examples():
    x, y = np.zeros((10, 1), np.float32), np.zeros(10, np.int32)
    with pytest.raises(ValueError, match="only 10 are available"):
        preemption.resumable_dataset(x, y, 4, 3, 1)


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
    good = preemption.summarize(_events([(1, 0, 6, [0], False), (2, 4, 12, [1, 2], True)]), 4)
    assert good["final_step"] == 12 and good["finished"]
    assert good["steps_run"] == 14 and good["repeated_steps"] == 2
    assert good["repeated_epochs"] == []
    # A restart from scratch would train the finished epoch 0 again: that must show.
    bad = preemption.summarize(_events([(1, 0, 6, [0], False), (2, 0, 12, [0, 1, 2], True)]), 4)
    assert bad["repeated_epochs"] == [0] and bad["repeated_steps"] == 6


# ------------------------------------------- kill and resume, in real processes (SIGKILL)


def _summary(config):
    return preemption.summarize(preemption.read_progress(config.log_path), STEPS_PER_EPOCH)


# Notebook 08_checkpoints_and_preemption kills and resumes a custom loop and a fit run on every stack; these kill tests run
# once per CI run, on the main stack (pytest -m slow).
ALSO_IN_NOTEBOOK_08 = pytest.mark.slow


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The custom-loop run, never interrupted: what every resumed run must end with."""
    config = _config(tmp_path_factory.mktemp("reference"), "run")
    outcome = preemption.run_to_end(config, timeout=RUN_TIMEOUT)
    done = outcome.events[-1]
    assert done["event"] == "done" and done["step"] == TOTAL
    return done


@ALSO_IN_NOTEBOOK_08
def test_custom_loop_killed_inside_a_save_resumes_exactly(tmp_path, uninterrupted):
    kill_at = STEPS_PER_EPOCH + SAVE_EVERY  # mid-epoch 2, inside the save of step 12
    config = _config(tmp_path, "run", hold_at=kill_at, hold_where="before-commit")
    killed = preemption.run_until_killed(config, timeout=RUN_TIMEOUT)
    assert killed.killed and killed.returncode == -signal.SIGKILL
    hold = killed.events[-1]
    assert hold["event"] == "hold" and hold["where"] == "before-commit"
    assert f"ckpt-{kill_at}.index" in hold["files"]  # its files were complete ...
    state = (tmp_path / "run" / "checkpoints" / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{kill_at - SAVE_EVERY}"' in state  # ... but uncommitted

    resumed = preemption.run_to_end(
        dataclasses.replace(config, hold_at=None, require_checkpoint=True), timeout=RUN_TIMEOUT
    )
    repair, start = resumed.events[1:3]  # the uncommitted save's files go first
    assert repair["event"] == "repair" and f"ckpt-{kill_at}.index" in repair["removed"]
    assert start["event"] == "start" and start["start_step"] == kill_at - SAVE_EVERY
    done = resumed.events[-1]
    summary = _summary(config)
    assert summary["finished"] and summary["final_step"] == TOTAL
    assert summary["repeated_epochs"] == []
    assert summary["repeated_steps"] == SAVE_EVERY
    assert done["optimizer_iterations"] == TOTAL
    assert done["digest"] == uninterrupted["digest"]  # bit-identical to the uninterrupted run


@ALSO_IN_NOTEBOOK_08
def test_custom_loop_killed_while_running_resumes_exactly(tmp_path, uninterrupted):
    """No hold: the parent kills as soon as it reads step >= 10, wherever the child is then."""
    config = _config(tmp_path, "run", step_delay=0.25)  # a run that lasts long enough to be hit
    killed = preemption.run_until_killed(
        config,
        lambda events: any(e["event"] == "step" and e["step"] >= 10 for e in events),
        timeout=RUN_TIMEOUT,
    )
    assert killed.killed
    resumed = preemption.run_to_end(
        dataclasses.replace(config, require_checkpoint=True), timeout=RUN_TIMEOUT
    )
    summary = _summary(config)
    assert summary["finished"] and summary["final_step"] == TOTAL
    assert summary["repeated_epochs"] == []
    assert 0 <= summary["repeated_steps"] <= SAVE_EVERY  # at most the steps since a commit
    assert resumed.events[-1]["digest"] == uninterrupted["digest"]


@ALSO_IN_NOTEBOOK_08
def test_fit_killed_mid_epoch_resumes_at_the_epoch_start(tmp_path):
    kill_at = STEPS_PER_EPOCH + 3  # three steps into the second epoch
    config = _config(tmp_path, "run", mode="fit", hold_at=kill_at)
    killed = preemption.run_until_killed(config, timeout=RUN_TIMEOUT)
    assert killed.killed and killed.events[-1]["step"] == kill_at
    metadata = json.loads((tmp_path / "run" / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 1

    resumed = preemption.run_to_end(
        dataclasses.replace(config, hold_at=None, require_checkpoint=True), timeout=RUN_TIMEOUT
    )
    summary = _summary(config)
    first, second = summary["runs"]
    assert first["epochs_finished"] == [0] and second["start_step"] == STEPS_PER_EPOCH
    assert summary["repeated_epochs"] == []
    assert summary["repeated_steps"] == kill_at - STEPS_PER_EPOCH
    assert summary["finished"] and summary["final_step"] == TOTAL
    assert resumed.events[-1]["optimizer_iterations"] == TOTAL


@pytest.mark.parametrize("mode", ["custom", "fit"])
def test_a_restart_that_finds_no_checkpoint_fails(tmp_path, mode):
    config = _config(tmp_path, "run", mode=mode, require_checkpoint=True)
    with pytest.raises(preemption.RunFailed, match="this run was asked to continue"):
        preemption.run_to_end(config, timeout=RUN_TIMEOUT)


@pytest.mark.parametrize("mode", ["custom", "fit"])
def test_nothing_to_resume_is_found_before_tensorflow_loads(tmp_path, mode):
    """The check the child runs first: it decides the plain cases and leaves the rest alone."""
    from helpers.checkpoints import CheckpointNotFoundError

    config = _config(tmp_path, "run", mode=mode, require_checkpoint=True)
    with pytest.raises(CheckpointNotFoundError, match="nothing to resume"):
        preemptible.fail_early_if_nothing_to_resume(config)
    folder = tmp_path / "run" / ("backup" if mode == "fit" else "checkpoints")
    folder.mkdir(parents=True)
    if mode == "custom":  # any file: a damaged folder is for the repair code to judge
        (folder / "ckpt-4.index").write_bytes(b"")
    else:
        (folder / "training_metadata.json").write_text("{}")
    preemptible.fail_early_if_nothing_to_resume(config)
    fresh = _config(tmp_path, "fresh", mode=mode)  # not asked to continue: nothing to check
    preemptible.fail_early_if_nothing_to_resume(fresh)


def test_a_run_that_ends_before_its_kill_point_is_reported(tmp_path):
    config = _config(tmp_path, "run", epochs=1, hold_at=2, hold_timeout=0.5)
    with pytest.raises(preemption.RunFailed, match=r"ended by itself \(exit 3\)") as err:
        preemption.run_until_killed(config, lambda events: False, timeout=RUN_TIMEOUT)
    assert "hold_timeout" in str(err.value)


@pytest.mark.parametrize("mode", ["custom", "fit"])
def test_a_finished_run_started_again_does_nothing(tmp_path, mode):
    """In this process, on one device: the second start restores the end state and stops."""
    import tensorflow as tf

    config = _config(tmp_path, "run", mode=mode, replicas=1, epochs=2, steps_per_epoch=4)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    train = preemptible.train_custom if mode == "custom" else preemptible.train_fit
    log = preemptible.ProgressLog(config.log_path)
    first = train(config, strategy, log)
    steps_logged = len(preemption.read_progress(config.log_path))
    again = train(dataclasses.replace(config, require_checkpoint=True), strategy, log)
    assert first["step"] == again["step"] == again["optimizer_iterations"] == 8
    assert again["digest"] == first["digest"]
    new_events = preemption.read_progress(config.log_path)[steps_logged:]
    assert [e for e in new_events if e["event"] == "step"] == []
    assert new_events[-1]["event"] == "done"


# ------------------------------------- SIGKILL in every phase of a save, then restart (slow)

# Each link of the chain: (save step the process kills itself in, phase). Every restart resumes
# the same run, so one chain covers every phase once and two random instants. "restate" and
# "sweep" need a fourth checkpoint (max_to_keep=3); the last link is the case the independent
# check saw fail: killed in the final save while old checkpoints were being deleted.
CHAIN = [
    (8, "shards"),
    (8, "merge"),
    (8, "commit"),
    (8, "rename"),
    (12, "random"),
    (16, "random"),
    (20, "restate"),
    (24, "sweep"),
]
AFTER_COMMIT = ("sweep", "restate")  # the rename of the state file is the commit point


def _committed_step(checkpoint_dir) -> int:
    """The step the state file names at this moment (0 when there is none): the last commit."""
    import re

    state = checkpoint_dir / "checkpoint"
    found = (
        re.search(r'model_checkpoint_path: "ckpt-(\d+)"', state.read_text())
        if state.exists()
        else None
    )
    return int(found.group(1)) if found else 0


@pytest.mark.slow
def test_sigkill_in_every_phase_of_a_save_resumes_at_the_last_commit(tmp_path):
    """One process per link, on one replica (fast to start): kill, restart, kill again, ...

    The reference runs in this process; a run that survived every kill must end with the same
    weights, bit for bit, never train a finished epoch again and never restart before the last
    committed step.
    """
    import tensorflow as tf

    start_time = time.monotonic()
    # New random instants in every run; KILL_TEST_SEED=<n> replays the run that printed <n>.
    run_seed = int(os.environ.get("KILL_TEST_SEED", random.SystemRandom().randrange(10**6)))
    config = _config(tmp_path, "run", replicas=1, per_replica_batch=64)
    reference = preemptible.train_custom(
        _config(tmp_path, "reference", replicas=1, per_replica_batch=64),
        tf.distribute.OneDeviceStrategy("/cpu:0"),
    )
    checkpoint_dir = tmp_path / "run" / "checkpoints"
    window, landed = 0.05, []
    for seed, (crash_at, phase) in enumerate(CHAIN):
        before = _committed_step(checkpoint_dir)
        link = dataclasses.replace(
            config,
            crash_at=crash_at,
            crash_in=phase,
            crash_seed=run_seed + seed,
            crash_window=window,
            require_checkpoint=before > 0,
        )
        crashed = preemption.run_to_end(link, timeout=RUN_TIMEOUT, crash=True)
        start = next(e for e in crashed.events if e["event"] == "start")
        assert start["start_step"] == before, (run_seed, phase, start)  # exactly the last commit
        saves = [e["seconds"] for e in crashed.events if e["event"] == "checkpoint"]
        window = max([window / 1.5, *saves]) * 1.5  # random kills: within a typical save
        committed = _committed_step(checkpoint_dir)
        previous = max((s for s in range(0, crash_at, SAVE_EVERY)), default=0)
        if phase == "random":  # anywhere from the save's start to just after its end
            assert committed in (previous, crash_at), (run_seed, committed)
            landed.append("before the commit" if committed == previous else "after it")
        else:
            assert committed == (crash_at if phase in AFTER_COMMIT else previous), phase

    before = _committed_step(checkpoint_dir)
    finished = preemption.run_to_end(
        dataclasses.replace(config, require_checkpoint=True), timeout=RUN_TIMEOUT
    )
    assert next(e for e in finished.events if e["event"] == "start")["start_step"] == before
    done = finished.events[-1]
    assert done["event"] == "done" and done["optimizer_iterations"] == TOTAL
    assert done["digest"] == reference["digest"]  # bit-identical to the uninterrupted run
    summary = _summary(config)
    assert summary["finished"] and summary["repeated_epochs"] == []
    leftovers = [p.name for p in checkpoint_dir.iterdir() if "_temp" in p.name or ".tmp" in p.name]
    assert leftovers == []
    print(
        f"\nKILL_TEST_SEED={run_seed}: {len(CHAIN)} kills ({len(CHAIN) - len(landed)} phases, random instants landed "
        f"{landed}), {len(summary['runs'])} processes, {time.monotonic() - start_time:.0f} s"
    )
