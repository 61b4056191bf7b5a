"""The training program that notebook 08_checkpoints_and_preemption kills: run only in a child process.

``python -m helpers._programs.preemptible --mode custom --workdir DIR ...`` trains with a
restartable custom loop (:func:`train_resumable`; ``--mode fit``: Keras ``fit`` with
``BackupAndRestore``), resumes from the last checkpoint when started again, and logs
every event to ``DIR/progress.jsonl``, flushed at once, so a SIGKILL loses nothing written. The
parent side, and what each option means, is :mod:`helpers.preemption`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from helpers import checkpoints, data, processes, save_faults
from helpers.checkpoints import CheckpointNotFoundError
from helpers.preemption import (
    CRASH_IN,
    HOLD_WHERE,
    MODES,
    RunConfig,
    build,
    weights_digest,
)
from helpers.strategy import simulated_tpu

# TensorFlow and Keras are imported where they are first needed: a run asked to continue with
# nothing to resume fails before they load (seconds instead of a TensorFlow start-up).

__all__: list[str] = []  # a program, not a library: nothing here is for import elsewhere but tests


class ProgressLog:
    """Appends one JSON line per event and flushes it at once: a kill loses nothing written."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, event: str, **values) -> None:
        record = {"event": event, "pid": os.getpid(), "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def hold(self, timeout: float, **values) -> None:
        """Announce the hold, then wait to be killed; exit with status 3 if nobody does."""
        self.write("hold", **values)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.2)
        self.write("hold_timeout")
        os._exit(3)


class NullLog:
    def write(self, event, **values):
        pass

    def hold(self, timeout, **values):
        raise RuntimeError("hold_at needs a progress log (run the module as a program)")


def cpu_strategy(replicas: int):
    # Always the CPU: on a TPU VM the notebook that launches this program owns the TPU, and two
    # processes cannot share it. One replica is a plain device, more are simulated replicas.
    import tensorflow as tf

    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return simulated_tpu(tf, replicas)


def restore_latest(ckpt_dir, require_checkpoint=False, **objects):
    """A checkpoint of `objects` and its manager in ckpt_dir, restored from its latest save."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(**objects)
    manager = tf.train.CheckpointManager(checkpoint, str(ckpt_dir), max_to_keep=3)
    if manager.latest_checkpoint:  # every saved value must find its variable, and vice versa
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    elif require_checkpoint:  # a restarted job must never start again from step 0 unnoticed
        raise FileNotFoundError(f"no checkpoint in {ckpt_dir} to resume from")
    return manager


def train_resumable(run, model, optimizer, strategy, ckpt_dir, x, y, report=None, save=None):
    """Restore the latest checkpoint in ckpt_dir if there is one, then train to the end."""
    import tensorflow as tf

    from helpers import loops
    from helpers.preemption import resumable_dataset

    report = report or (lambda event, **values: None)  # the killed program logs each event
    save = save or (lambda manager, step: manager.save(checkpoint_number=step))
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    objects = dict(model=model, optimizer=optimizer, step=step)
    manager = restore_latest(ckpt_dir, run.require_checkpoint, **objects)
    done = int(step.numpy())
    report("start", start_step=done, resumed_from=manager.latest_checkpoint)
    # The data order is a function of the step: a restart at step k sees the batches from k on.
    dataset = resumable_dataset(
        x, y, run.global_batch, run.steps_per_epoch, run.epochs, first_step=done, seed=run.seed
    )
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    train_steps = loops.make_train_steps(strategy, model, optimizer, run.global_batch)
    while done < run.total_steps:  # each call: up to steps_per_call steps, never past a save,
        ends = (run.save_interval, run.steps_per_epoch, run.total_steps)  # an epoch end, the end
        n = min(run.steps_per_call, *(end - done % end for end in ends))
        loss = float(train_steps(iterator, tf.constant(n)))
        done = int(step.assign_add(n).numpy())
        report("step", step=done, steps=n, loss=loss)
        if done % run.save_interval == 0 or done == run.total_steps:
            save(manager, done)
    return manager


def train_custom(config: RunConfig, strategy, log: ProgressLog | None = None) -> dict:
    """The restartable custom loop (:func:`train_resumable`), with a log.

    First repairs what a kill inside a save left behind, then runs that loop, logging
    each step, checkpoint and epoch end, and holding or crashing where ``config`` says. Can also
    run inside a caller's process (without ``log``). Returns the final state.
    """
    log = log or NullLog()
    images, model, optimizer = build(config, strategy)
    ckpt_dir = Path(config.workdir) / "checkpoints"
    repaired = checkpoints.repair(ckpt_dir)  # what a kill inside a save left behind
    if repaired.changed:
        log.write("repair", dropped=repaired.dropped, removed=repaired.removed)
    hold_commit = config.hold_where == "before-commit" and config.hold_at is not None
    held = False
    last_loss = [None]  # the loss of the latest step, for the epoch_end event

    def hold_after(done):  # the after-step hold: once, at the first step at or past hold_at
        nonlocal held
        if config.hold_at is not None and done >= config.hold_at and not (hold_commit or held):
            held = True
            log.hold(config.hold_timeout, step=done, where="after-step")

    def report(event, **values):
        if event == "start":
            log.write("start", mode="custom", **values)
            return
        done = values["step"]
        last_loss[0] = values["loss"]
        time.sleep(config.step_delay)
        epoch = (done - 1) // config.steps_per_epoch
        log.write("step", epoch=epoch, **values)
        saves = done % config.save_interval == 0 or done == config.total_steps
        if saves:
            return  # the epoch end and the hold come after the save, in logged_save
        if done % config.steps_per_epoch == 0:
            log.write("epoch_end", epoch=epoch, step=done, loss=values["loss"])
        hold_after(done)

    def logged_save(manager, step):
        start = time.perf_counter()
        path = save(manager, step, config, log, hold_commit)
        log.write("checkpoint", step=step, path=path, seconds=round(time.perf_counter() - start, 4))
        if step % config.steps_per_epoch == 0:  # an epoch has finished once its save is done
            epoch = (step - 1) // config.steps_per_epoch
            log.write("epoch_end", epoch=epoch, step=step, loss=last_loss[0])
        hold_after(step)

    if config.require_checkpoint and checkpoints.latest_checkpoint(ckpt_dir) is None:
        raise CheckpointNotFoundError(
            f"no committed checkpoint in {ckpt_dir}, and this run was asked to continue one"
        )
    manager = train_resumable(
        config,
        model,
        optimizer,
        strategy,
        ckpt_dir,
        images.x_train,
        images.y_train,
        report=report,
        save=logged_save,
    )
    result = {
        "step": int(manager.checkpoint.step.numpy()),
        "optimizer_iterations": int(optimizer.iterations.numpy()),
        "digest": weights_digest(model),
        "checkpoint": manager.latest_checkpoint,
    }
    log.write("done", **result)
    return {**result, "model": model}


def save(manager, step: int, config: RunConfig, log, hold_commit: bool) -> str:
    """``manager.save``; held or killed inside it when the config says so at this step."""

    block = contextlib.nullcontext()
    if hold_commit and step == config.hold_at:  # wait for the parent's kill before the commit
        files = lambda: sorted(os.listdir(manager.directory))  # noqa: E731
        hold = lambda phase: log.hold(  # noqa: E731
            config.hold_timeout, step=step, where="before-commit", files=files()
        )
        block = save_faults.interrupt_save("commit", hold)
    elif config.crash_at == step and config.crash_in != "random":
        log.write("crash", step=step, phase=config.crash_in)
        block = save_faults.interrupt_save(config.crash_in, save_faults.sigkill)
    elif config.crash_at == step:  # a random instant from the start of the save on ...
        rng = np.random.default_rng([config.crash_seed, step])
        delay = float(rng.uniform(0, config.crash_window))
        log.write("crash", step=step, phase="random", delay=round(delay, 5))
        threading.Timer(delay, save_faults.sigkill).start()
        manager.save(checkpoint_number=step)
        time.sleep(config.crash_window)  # ... to just after it, never in a later save
        raise RuntimeError(f"the random kill did not come within {config.crash_window} s")
    with block:
        return manager.save(checkpoint_number=step)


def train_fit(config: RunConfig, strategy, log: ProgressLog | None = None) -> dict:
    """``model.fit`` with ``BackupAndRestore`` (via :func:`helpers.checkpoints.fit_backup_callbacks`).

    ``steps_per_execution`` keeps its default of 1: with 2 or more replicas, values above 1 fail
    in Keras 3 under ``MirroredStrategy`` (see the field notes in notebook 03_keras_compile_and_fit).
    """
    import keras

    log = log or NullLog()
    images, model, optimizer = build(config, strategy)
    with strategy.scope():
        model.compile(
            optimizer,
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    backup_dir = Path(config.workdir) / "backup"
    if config.require_checkpoint and not (backup_dir / "training_metadata.json").exists():
        raise checkpoints.CheckpointNotFoundError(
            f"no backup in {backup_dir}, and this run was asked to continue one"
        )
    dataset = data.make_dataset(
        images.x_train,
        images.y_train,
        config.global_batch,
        replicas=config.replicas,
        seed=config.seed,
    )

    class Progress(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.started = False

        def on_epoch_begin(self, epoch, logs=None):
            if not self.started:
                self.started = True
                start = int(self.model.optimizer.iterations.numpy())
                log.write("start", mode="fit", first_epoch=epoch, start_step=start)

        def on_train_batch_end(self, batch, logs=None):
            done = int(self.model.optimizer.iterations.numpy())
            epoch = (done - 1) // config.steps_per_epoch
            time.sleep(config.step_delay)
            log.write("step", step=done, epoch=epoch, steps=1, loss=float(logs["loss"]))
            if config.hold_at == done:
                log.hold(config.hold_timeout, step=done, where="after-step")

        def on_epoch_end(self, epoch, logs=None):
            # BackupAndRestore comes first in the callback list, so its backup is on disk now.
            done = int(self.model.optimizer.iterations.numpy())
            log.write("checkpoint", step=done, path=str(backup_dir))
            log.write("epoch_end", epoch=epoch, step=done, loss=float(logs["loss"]))

    callbacks = checkpoints.fit_backup_callbacks(backup_dir, config.steps_per_epoch)
    model.fit(
        dataset,
        epochs=config.epochs,
        steps_per_epoch=config.steps_per_epoch,
        callbacks=[*callbacks, Progress()],
        verbose=0,
    )
    result = {
        "step": int(optimizer.iterations.numpy()),
        "optimizer_iterations": int(optimizer.iterations.numpy()),
        "digest": weights_digest(model),
        "checkpoint": str(backup_dir),
    }
    log.write("done", **result)
    return {**result, "model": model}


def fail_early_if_nothing_to_resume(config: RunConfig) -> None:
    """A run asked to continue, with nothing at all to continue from, fails before it starts.

    Only the plain case is decided here (no checkpoint folder or no files in it; no backup
    metadata for ``fit``); anything else, a damaged folder included, is for the training code,
    which repairs and reads what is there.
    """

    if not config.require_checkpoint:
        return
    folder = Path(config.workdir) / ("backup" if config.mode == "fit" else "checkpoints")
    if config.mode == "fit":
        found = (folder / "training_metadata.json").exists()
    else:
        found = folder.is_dir() and any(folder.iterdir())
    if not found:
        raise CheckpointNotFoundError(
            f"nothing to resume in {folder}, and this run was asked to continue one"
        )


def parse_args(argv: list[str] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(
        prog="python -m helpers._programs.preemptible", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--workdir", required=True, help="checkpoints and progress.jsonl go here")
    defaults = RunConfig(mode="custom", workdir="")
    ints = ("epochs", "steps_per_epoch", "per_replica_batch", "replicas", "steps_per_call")
    for name in (*ints, "save_every", "seed"):
        parser.add_argument(
            "--" + name.replace("_", "-"), type=int, default=getattr(defaults, name)
        )
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--hold-at", type=int, default=None, help="wait to be killed at this step")
    parser.add_argument("--hold-where", choices=HOLD_WHERE, default="after-step")
    parser.add_argument("--hold-timeout", type=float, default=defaults.hold_timeout)
    parser.add_argument("--step-delay", type=float, default=defaults.step_delay)
    parser.add_argument(
        "--require-checkpoint", action="store_true", help="fail if there is nothing to resume"
    )
    parser.add_argument("--crash-at", type=int, default=None, help="SIGKILL itself in this save")
    parser.add_argument("--crash-in", choices=CRASH_IN, default=defaults.crash_in)
    parser.add_argument("--crash-seed", type=int, default=defaults.crash_seed)
    parser.add_argument("--crash-window", type=float, default=defaults.crash_window)
    args = parser.parse_args(argv)
    try:
        return RunConfig(**{k.replace("-", "_"): v for k, v in vars(args).items()})
    except ValueError as err:
        parser.error(str(err))


def main(argv: list[str] | None = None) -> int:
    processes.default_sigint()
    config = parse_args(argv)
    log = ProgressLog(config.log_path)
    log.write("launch", config=asdict(config))
    fail_early_if_nothing_to_resume(config)  # seconds before TensorFlow would have loaded
    strategy = cpu_strategy(config.replicas)  # before any other TensorFlow op
    train = train_custom if config.mode == "custom" else train_fit
    train(config, strategy, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
