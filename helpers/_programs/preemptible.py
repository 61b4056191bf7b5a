"""The ``fit`` run that notebook 08_checkpoints_and_preemption's aside kills: run only in a child process.

``python -m helpers._programs.preemptible --workdir DIR ...`` trains the reference
script's model on its pipeline with Keras ``fit`` and ``BackupAndRestore``, resumes from the last
backup when started again, and logs every event to ``DIR/progress.jsonl``, flushed at once, so a
SIGKILL loses nothing written. The parent side, and what each option means, is
:mod:`helpers.preemption`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from helpers import processes
from helpers.checkpoints import CheckpointNotFoundError
from helpers.preemption import RunConfig

# TensorFlow and Keras are imported where they are first needed: a run asked to continue with
# nothing to resume fails before they load (seconds instead of a TensorFlow start-up).

__all__: list[str] = []  # a program, not a library: nothing here is for import elsewhere but tests

TRAIN_IMAGES = 8192  # Fashion-MNIST training images written for the runs (more than they draw)


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


def weights_digest(model) -> str:
    """A short SHA-256 of all the model's weights: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()[:16]


def connect_on_the_cpu(replicas: int):
    """The script's connect, on the CPU: the notebook that started this run holds the TPU, and
    two processes cannot share it.
    """
    import train_tpu

    train_tpu.tpu_signs = lambda: []  # the TPU's signs are the parent's, not this process's
    return train_tpu.connect(replicas)


def train_fit(config: RunConfig, strategy, log: ProgressLog) -> dict:
    """The script's model, pipeline and ``compile_for_fit``, with its ``fit_backup`` (Keras'
    ``BackupAndRestore``, restored before the data is built: the data starts at its step).

    ``steps_per_execution`` stays 1: with 2 or more replicas, values above 1 fail in Keras 3
    under ``MirroredStrategy`` (the script's ``fit_steps_per_execution`` says so).
    """
    import keras
    import tensorflow as tf

    import train_tpu

    backup_dir = Path(config.workdir) / "backup"
    keras.utils.set_random_seed(config.seed)
    model, optimizer = train_tpu.build(strategy, config.learning_rate, seed=config.seed)
    train_tpu.compile_for_fit(strategy, model, optimizer, 1)
    order = [config.seed, config.global_batch, TRAIN_IMAGES, config.steps_per_epoch]
    callbacks, start = train_tpu.fit_backup(
        str(backup_dir), model, config.steps_per_epoch, order, config.require_checkpoint
    )
    (x_train, y_train), _ = train_tpu.load_fashion_mnist()
    folder = str(Path(config.workdir) / "data")
    train = {"train": (x_train[:TRAIN_IMAGES], y_train[:TRAIN_IMAGES])}  # fit evaluates nothing
    train_tpu.write_tfrecords(folder, train)  # once: a restart finds them complete
    one_pipeline = tf.distribute.InputContext(num_replicas_in_sync=1)  # global batches: one host
    dataset = None  # a finished run started again: nothing left to train
    if start < config.epochs * config.steps_per_epoch:
        dataset = train_tpu.train_dataset(
            folder, one_pipeline, config.global_batch, config.steps_per_epoch, config.epochs,
            start, seed=config.seed,
        )  # fmt: skip

    class Progress(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.started = False

        def on_epoch_begin(self, epoch, logs=None):
            if not self.started:
                self.started = True
                start = int(self.model.optimizer.iterations.numpy())
                log.write("start", first_epoch=epoch, start_step=start)

        def on_train_batch_end(self, batch, logs=None):
            done = int(self.model.optimizer.iterations.numpy())
            epoch = (done - 1) // config.steps_per_epoch
            log.write("step", step=done, epoch=epoch, steps=1, loss=float(logs["loss"]))
            if config.hold_at == done:
                log.hold(config.hold_timeout, step=done, where="after-step")

        def on_epoch_end(self, epoch, logs=None):
            # BackupAndRestore comes first in the callback list, so its backup is on disk now.
            done = int(self.model.optimizer.iterations.numpy())
            log.write("checkpoint", step=done, path=str(backup_dir))
            log.write("epoch_end", epoch=epoch, step=done, loss=float(logs["loss"]))

    if dataset is not None:  # None: finished before, nothing left to train
        model.fit(
            dataset,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            shuffle=False,  # the pipeline's own seeded order
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
    return result


def fail_early_if_nothing_to_resume(config: RunConfig) -> None:
    """A run asked to continue, with no backup at all, fails before TensorFlow loads."""
    if (
        config.require_checkpoint
        and not (Path(config.workdir) / "backup" / "training_metadata.json").exists()
    ):
        raise CheckpointNotFoundError(
            f"nothing to resume in {Path(config.workdir) / 'backup'}, and this run was asked "
            "to continue one"
        )


def parse_args(argv: list[str] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(
        prog="python -m helpers._programs.preemptible", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--workdir", required=True, help="the backup and progress.jsonl go here")
    defaults = RunConfig(workdir="")
    for name in ("epochs", "steps_per_epoch", "per_replica_batch", "replicas", "seed"):
        parser.add_argument(
            "--" + name.replace("_", "-"), type=int, default=getattr(defaults, name)
        )
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--hold-at", type=int, default=None, help="wait to be killed at this step")
    parser.add_argument("--hold-timeout", type=float, default=defaults.hold_timeout)
    parser.add_argument(
        "--require-checkpoint", action="store_true", help="fail if there is nothing to resume"
    )
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
    train_fit(config, connect_on_the_cpu(config.replicas), log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
