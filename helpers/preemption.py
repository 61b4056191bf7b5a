"""A training run that survives being killed, and the tools to kill it (taught in notebook 08).

Run as a program, in its own process, so that it can really be killed (SIGKILL: no exception,
no ``finally``, no chance to save)::

    python -m helpers.preemption --mode custom --workdir /tmp/run --epochs 3 --steps-per-epoch 8

``--mode fit`` trains with ``model.fit`` and Keras' ``BackupAndRestore``; ``--mode custom`` with
the custom loop of ``helpers.loops`` and a ``tf.train.CheckpointManager``. Run the same command
again after a kill and it continues from the last checkpoint; run it after it finished and it
does nothing more.

Progress goes to ``WORKDIR/progress.jsonl``, one JSON object per line, written and flushed as it
happens, so a parent process can follow the run. ``--hold-at STEP`` makes the run stop and wait
at a chosen point (after that training step, or inside the checkpoint save at that step, after
the checkpoint's files are written and before they are committed) so that the parent's kill
lands at the same place in every run; a real preemption lands anywhere, and the recovery must
not care where. ``--crash-at STEP --crash-in PHASE`` makes the custom loop SIGKILL itself inside
the save at that step, in one phase of ``helpers.save_faults.PHASES``, or with ``--crash-in
random`` at a random instant of it (``--crash-seed``). A restarted run first repairs what the
kill left (``helpers.checkpoints.repair``).

The parent side (notebook 08 and ``tests/test_preemption.py``) uses :func:`command`,
:func:`run_until_killed`, :func:`run_to_end` and :func:`summarize`; notebook 08 also builds the
run's model with :func:`build` and its data with :func:`resumable_dataset`. The program itself
(``_main``, ``_train_custom``, ``_train_fit``, ``_ProgressLog``) is private: it runs only in the
child process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from helpers import runtime

MODES = ("fit", "custom")
HOLD_WHERE = ("after-step", "before-commit")
CRASH_IN = ("random", "shards", "merge", "commit", "rename", "sweep", "restate")  # save_faults
LOG_NAME = "progress.jsonl"


@dataclass
class RunConfig:
    """One training run; the same config must be given again to resume it."""

    mode: str
    workdir: str
    epochs: int = 3
    steps_per_epoch: int = 8
    per_replica_batch: int = 8
    replicas: int = 8
    steps_per_call: int = 2  # custom loop: steps per tf.function call
    save_every: int = 0  # custom loop: checkpoint every N steps; 0 = at the end of each epoch
    learning_rate: float = 1e-3
    seed: int = 0
    hold_at: int | None = None
    hold_where: str = "after-step"
    hold_timeout: float = 600.0  # a held run nobody kills exits with an error after this
    step_delay: float = 0.0  # seconds of sleep after each training call: a slower run to kill
    require_checkpoint: bool = False
    crash_at: int | None = None  # custom loop: SIGKILL itself inside the save at this step ...
    crash_in: str = "random"  # ... in this phase of it, or at a random instant
    crash_seed: int = 0
    crash_window: float = (
        0.05  # random: the kill comes within this many seconds of the save's start
    )

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.hold_where not in HOLD_WHERE:
            raise ValueError(f"hold_where must be one of {HOLD_WHERE}, got {self.hold_where!r}")
        for name in (
            "epochs",
            "steps_per_epoch",
            "per_replica_batch",
            "replicas",
            "steps_per_call",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.step_delay < 0:
            raise ValueError(f"step_delay must be 0 or more seconds, got {self.step_delay}")
        if self.save_every < 0:
            raise ValueError(
                f"save_every must be 0 (each epoch) or positive, got {self.save_every}"
            )
        if self.hold_at is not None and not 1 <= self.hold_at <= self.total_steps:
            raise ValueError(f"hold_at must be a step in 1..{self.total_steps}, got {self.hold_at}")
        if self.crash_window <= 0:
            raise ValueError(f"crash_window must be positive seconds, got {self.crash_window}")
        if self.crash_in not in CRASH_IN:
            raise ValueError(f"crash_in must be one of {CRASH_IN}, got {self.crash_in!r}")
        if self.crash_at is not None:
            save_step = self.crash_at % self.save_interval == 0 or self.crash_at == self.total_steps
            if self.mode != "custom" or not 1 <= self.crash_at <= self.total_steps or not save_step:
                raise ValueError(
                    f"crash_at needs mode='custom' and a checkpoint step (a multiple of "
                    f"{self.save_interval}, or {self.total_steps}), got {self.crash_at}"
                )
        if self.hold_where == "before-commit":
            if self.mode != "custom":
                raise ValueError("hold_where='before-commit' needs mode='custom'")
            if self.hold_at is not None and self.hold_at % self.save_interval:
                raise ValueError(
                    f"hold_where='before-commit' needs hold_at at a checkpoint step (a multiple "
                    f"of {self.save_interval}), got {self.hold_at}"
                )

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def global_batch(self) -> int:
        return self.per_replica_batch * self.replicas

    @property
    def save_interval(self) -> int:
        return self.save_every or self.steps_per_epoch

    @property
    def log_path(self) -> Path:
        return Path(self.workdir) / LOG_NAME


# --------------------------------------------------------------------------- the child side


class _ProgressLog:
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


def resumable_dataset(
    x,
    y,
    global_batch: int,
    steps_per_epoch: int,
    epochs: int,
    *,
    first_step: int = 0,
    seed: int = 0,
):
    """Batches for global steps ``first_step`` .. ``epochs * steps_per_epoch``, in a fixed order.

    The order is a pure function of ``seed`` and the step: epoch ``e`` is a NumPy permutation
    seeded with ``(seed, e)``, computed before TensorFlow sees it. So a run restarted at step
    ``k`` sees exactly the batches an uninterrupted run sees from step ``k`` on, and the steps
    before ``k`` cost nothing (their indices are simply not generated). TensorFlow's own shuffle
    is avoided on purpose: its order also depends on the global seed, which other code in the
    process may set. This stands in for checkpointing the iterator, which ``tf.distribute``'s
    distributed iterators do not support (notebook 08 shows the error).
    """
    import tensorflow as tf

    if steps_per_epoch * global_batch > len(x):
        raise ValueError(
            f"{steps_per_epoch} steps of {global_batch} examples need {steps_per_epoch * global_batch}"
            f" examples per epoch; only {len(x)} are available"
        )
    first_epoch, skip = divmod(first_step, steps_per_epoch)
    per_epoch = steps_per_epoch * global_batch
    orders = [
        np.random.default_rng([seed, epoch]).permutation(len(x))[:per_epoch]
        for epoch in range(first_epoch, epochs)
    ]
    indices = np.concatenate(orders)[skip * global_batch :] if orders else np.zeros(0, np.int64)
    images, labels = tf.constant(x), tf.constant(y)
    ds = tf.data.Dataset.from_tensor_slices(indices.astype(np.int64))
    ds = ds.batch(global_batch, drop_remainder=True)
    ds = ds.map(lambda i: (tf.gather(images, i), tf.gather(labels, i)))
    return ds.prefetch(tf.data.AUTOTUNE)


def weights_digest(model) -> str:
    """A short SHA-256 of all the model's weights: equal digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()[:16]


def _strategy(replicas: int):
    # Always the CPU: on a TPU VM the notebook that launches this program owns the TPU, and two
    # processes cannot share it. One replica is a plain device, more are simulated replicas.
    import tensorflow as tf

    from helpers.strategy import simulated_tpu

    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return simulated_tpu(tf, replicas)


def build(config: RunConfig, strategy):
    """Model and optimizer, created in ``strategy.scope()`` (the optimizer built, see loops.py)."""
    import keras

    from helpers import data, loops, models

    images = data.load_images("digits")  # bundled with scikit-learn: never a download
    with strategy.scope():
        model = models.build_classifier(images.image_shape, images.num_classes, seed=config.seed)
        optimizer = keras.optimizers.Adam(config.learning_rate)
    loops.build_optimizer(strategy, optimizer, model)
    return images, model, optimizer


def _train_custom(config: RunConfig, strategy, log: _ProgressLog | None = None) -> dict:
    """The custom loop: resume from the latest checkpoint, train, checkpoint, log (notebook 08).

    Can also run inside a notebook's process (without ``log``), which is how notebook 08 gets an
    uninterrupted reference run to compare the resumed one with. Returns the final state.
    """
    import tensorflow as tf

    from helpers import checkpoints, loops

    log = log or _NullLog()
    images, model, optimizer = build(config, strategy)
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")  # host-side counter
    ckpt_dir = Path(config.workdir) / "checkpoints"
    repaired = checkpoints.repair(ckpt_dir)  # what a kill inside a save left behind
    if repaired.changed:
        log.write("repair", dropped=repaired.dropped, removed=repaired.removed)
    checkpoint, manager = checkpoints.make_checkpoint(
        ckpt_dir, model=model, optimizer=optimizer, step=step
    )
    restored = checkpoints.resume(
        checkpoint, ckpt_dir, require=config.require_checkpoint, log=lambda m: None
    )
    start = int(step.numpy())
    log.write("start", mode="custom", resumed_from=restored, start_step=start)

    dataset = resumable_dataset(
        images.x_train,
        images.y_train,
        config.global_batch,
        config.steps_per_epoch,
        config.epochs,
        first_step=start,
        seed=config.seed,
    )
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    train_steps = loops.make_train_steps(strategy, model, optimizer, config.global_batch)
    hold_commit = config.hold_where == "before-commit" and config.hold_at is not None

    done = start
    while done < config.total_steps:
        # Never run past a checkpoint, an epoch end or the hold point inside one call.
        boundaries = [config.save_interval, config.steps_per_epoch]
        limit = min(b - done % b for b in boundaries)
        if config.hold_at is not None and config.hold_at > done:
            limit = min(limit, config.hold_at - done)
        n = min(config.steps_per_call, limit, config.total_steps - done)
        loss = float(train_steps(iterator, tf.constant(n)))
        step.assign_add(n)
        done += n
        time.sleep(config.step_delay)
        epoch = (done - 1) // config.steps_per_epoch
        log.write("step", step=done, epoch=epoch, steps=n, loss=loss)
        if done % config.save_interval == 0 or done == config.total_steps:
            start = time.perf_counter()
            path = _save(manager, done, config, log, hold_commit)
            seconds = round(time.perf_counter() - start, 4)
            log.write("checkpoint", step=done, path=path, seconds=seconds)
        if done % config.steps_per_epoch == 0:
            log.write("epoch_end", epoch=epoch, step=done, loss=loss)
        if config.hold_at == done and not hold_commit:
            log.hold(config.hold_timeout, step=done, where="after-step")
    result = {
        "step": int(step.numpy()),
        "optimizer_iterations": int(optimizer.iterations.numpy()),
        "digest": weights_digest(model),
        "checkpoint": manager.latest_checkpoint,
    }
    log.write("done", **result)
    return {**result, "model": model}


def _save(manager, step: int, config: RunConfig, log, hold_commit: bool) -> str:
    """``manager.save``; held or killed inside it when the config says so at this step."""
    import contextlib
    import threading

    from helpers import save_faults

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


class _NullLog:
    def write(self, event, **values):
        pass

    def hold(self, timeout, **values):
        raise RuntimeError("hold_at needs a progress log (run the module as a program)")


def _train_fit(config: RunConfig, strategy, log: _ProgressLog | None = None) -> dict:
    """``model.fit`` with ``BackupAndRestore`` (via :func:`helpers.checkpoints.fit_backup_callbacks`).

    ``steps_per_execution`` keeps its default of 1: with 2 or more replicas, values above 1 fail
    in Keras 3 under ``MirroredStrategy`` (see the field notes in notebook 03).
    """
    import keras

    from helpers import checkpoints, data

    log = log or _NullLog()
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


def _main(argv: list[str] | None = None) -> int:
    config = _parse_args(argv)
    log = _ProgressLog(config.log_path)
    log.write("launch", config=asdict(config))
    _fail_early_if_nothing_to_resume(config)  # seconds before TensorFlow would have loaded
    strategy = _strategy(config.replicas)  # before any other TensorFlow op
    train = _train_custom if config.mode == "custom" else _train_fit
    train(config, strategy, log)
    return 0


def _fail_early_if_nothing_to_resume(config: RunConfig) -> None:
    """A run asked to continue, with nothing at all to continue from, fails before it starts.

    Only the plain case is decided here (no checkpoint folder or no files in it; no backup
    metadata for ``fit``); anything else, a damaged folder included, is for the training code,
    which repairs and reads what is there.
    """
    from helpers.checkpoints import CheckpointNotFoundError

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


def _parse_args(argv: list[str] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.preemption", description=__doc__.splitlines()[0]
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


# -------------------------------------------------------------------------- the parent side


def command(config: RunConfig, *, defaults: bool = True) -> list[str]:
    """The command line that runs ``config`` in a new Python process.

    ``defaults=False`` leaves out the flags that only repeat a default, to show it to a reader.
    """
    args = [sys.executable, "-m", "helpers.preemption"]
    default = {f.name: f.default for f in fields(RunConfig)}
    for name, value in asdict(config).items():
        if value is None or value is False or (not defaults and value == default[name]):
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def read_progress(path: str | os.PathLike) -> list[dict]:
    """The events logged so far (a line still being written is left for the next read)."""
    path = Path(path)
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


class RunFailed(RuntimeError):
    """The training process did not do what was expected; the message holds its output."""


@dataclass
class Outcome:
    """How one process ended: its return code, pid and the events it logged."""

    returncode: int
    pid: int
    events: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def _launch(config: RunConfig, env: dict | None):
    workdir = Path(config.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # Output goes to a file, not a pipe: a full pipe would block the child.
    out = open(workdir / f"output-{time.time_ns()}.txt", "w")
    proc = subprocess.Popen(
        command(config), stdout=out, stderr=subprocess.STDOUT, env=child_env(env), cwd=workdir
    )
    return proc, out


def child_env(extra: dict | None = None) -> dict:
    """A training program's environment: this one, quiet, on the CPU only (see ``_strategy``),
    so it leaves alone the TPU or GPU that this process owns; then ``extra``."""
    env = {**os.environ, **runtime.CPU_ONLY_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return {**env, "PYTHONWARNINGS": "ignore", **(extra or {})}


def _failure(message: str, proc, out, config: RunConfig) -> RunFailed:
    if not out.closed:
        out.flush()
    text = Path(out.name).read_text(errors="replace")[-3000:]
    events = read_progress(config.log_path)[-5:]
    return RunFailed(f"{message}\n--- last events\n{events}\n--- output (tail)\n{text}")


def run_until_killed(
    config: RunConfig, kill_when=None, *, timeout: float = 300.0, env: dict | None = None
) -> Outcome:
    """Start ``config`` in a new process and SIGKILL it once ``kill_when(events)`` is true.

    ``kill_when`` gets this process's events so far; by default it waits for the ``hold`` event
    (``config.hold_at``). Raises :class:`RunFailed` if the process ends on its own or
    ``timeout`` seconds pass first (the process is then killed, never left running).
    """
    if kill_when is None:
        if config.hold_at is None:
            raise ValueError("give kill_when, or a config with hold_at")
        kill_when = lambda events: any(e["event"] == "hold" for e in events)  # noqa: E731
    start = time.monotonic()
    proc, out = _launch(config, env)
    try:
        while True:
            mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
            if kill_when(mine):
                proc.send_signal(signal.SIGKILL)
                code = proc.wait(timeout=60)
                break
            if proc.poll() is not None:
                raise _failure(
                    f"the run ended by itself (exit {proc.returncode})", proc, out, config
                )
            if time.monotonic() - start > timeout:
                raise _failure(f"no kill point within {timeout:.0f} s", proc, out, config)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
    mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
    return Outcome(code, proc.pid, mine, round(time.monotonic() - start, 1))


def run_to_end(
    config: RunConfig, *, timeout: float = 300.0, env: dict | None = None, crash: bool = False
) -> Outcome:
    """Run ``config`` in a new process to its end; :class:`RunFailed` unless it exits with 0.

    With ``crash``, the end expected is the process killing itself (``config.crash_at``): then
    :class:`RunFailed` unless it died of SIGKILL.
    """
    start = time.monotonic()
    proc, out = _launch(config, env)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _failure(
            f"the run did not finish within {timeout:.0f} s", proc, out, config
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
    expected = -signal.SIGKILL if crash else 0
    if proc.returncode != expected:
        raise _failure(
            f"the run ended with exit {proc.returncode}, not {expected}", proc, out, config
        )
    mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
    return Outcome(proc.returncode, proc.pid, mine, round(time.monotonic() - start, 1))


def summarize(events: list[dict], steps_per_epoch: int) -> dict:
    """What a sequence of runs (one log, several processes) did, from their events.

    Returns per-run rows and the totals notebook 08 asserts: ``final_step``, ``steps_run`` (all
    training steps computed, in all processes), ``repeated_steps`` (computed more than once
    because a kill lost them) and ``repeated_epochs`` (epochs that had *finished* in one process
    and were trained again by a later one: must be empty).
    """
    runs: dict[int, dict] = {}
    for event in events:
        pid = event.get("pid")
        if event["event"] == "launch":
            runs[pid] = {
                "pid": pid,
                "start_step": None,
                "last_step": None,
                "steps_run": 0,
                "epochs_finished": [],
                "epochs_trained": set(),
                "done": False,
            }
            continue
        run = runs.get(pid)
        if run is None:  # an in-process run without "launch"
            continue
        if event["event"] == "start":
            run["start_step"] = run["last_step"] = event["start_step"]
        elif event["event"] == "step":
            run["steps_run"] += event["steps"]
            run["last_step"] = event["step"]
            run["epochs_trained"].add(event["epoch"])
        elif event["event"] == "epoch_end":
            run["epochs_finished"].append(event["epoch"])
        elif event["event"] == "done":
            run["done"] = True
    rows = list(runs.values())
    finished_before: set[int] = set()
    repeated_epochs: list[int] = []
    for run in rows:
        repeated_epochs += sorted(run["epochs_trained"] & finished_before)
        finished_before |= set(run["epochs_finished"])
        run["epochs_trained"] = sorted(run["epochs_trained"])
    steps_run = sum(run["steps_run"] for run in rows)
    final = rows[-1]["last_step"] if rows else None
    return {
        "runs": rows,
        "final_step": final,
        "steps_run": steps_run,
        "repeated_steps": steps_run - (final or 0),
        "repeated_epochs": repeated_epochs,
        "finished": bool(rows) and rows[-1]["done"],
    }


if __name__ == "__main__":
    sys.exit(_main())
