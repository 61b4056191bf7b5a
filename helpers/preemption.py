"""A training run that survives being killed, and the tools to kill it (notebook 08_checkpoints_and_preemption).

The run itself is a program of its own, started in a new process so that it can really be
killed (SIGKILL: no exception, no ``finally``, no chance to save)::

    python -m helpers._programs.preemptible --mode custom --workdir /tmp/run --epochs 3

``--mode fit`` trains with ``model.fit`` and Keras' ``BackupAndRestore``; ``--mode custom`` with
a restartable loop (``tf.train.CheckpointManager``, restore the latest, continue; notebook 08_checkpoints_and_preemption
kills the reference script ``train_tpu.py`` itself instead, with ``helpers.save_faults``). Run the same command
again after a kill and it continues from the last checkpoint; run it after it finished and it
does nothing more.

Progress goes to ``WORKDIR/progress.jsonl``, one JSON object per line, written and flushed as it
happens, so a parent process can follow the run. ``hold_at`` makes the run stop and wait at a
chosen point (after that training step, or inside the checkpoint save at that step, after the
checkpoint's files are written and before they are committed) so that the parent's kill lands
at the same place in every run; a real preemption lands anywhere, and the recovery must not care
where. ``crash_at`` with ``crash_in`` makes the custom loop SIGKILL itself inside the save at that
step, in one phase of ``helpers.save_faults.PHASES``, or at a random instant of it. A restarted
run first repairs what the kill left (``helpers.checkpoints.repair``).

This module is the parent's side: :class:`RunConfig`, :func:`command`, :func:`run_until_killed`,
:func:`run_to_end`, :func:`read_progress` and :func:`summarize`, and the pieces notebook 08_checkpoints_and_preemption also
uses in its own process, :func:`build` (model and optimizer) and :func:`resumable_dataset`. The
program is :mod:`helpers._programs.preemptible`. TensorFlow and Keras are imported inside the
functions that need them, so a parent that only starts and reads runs never loads them.
"""

from __future__ import annotations

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

from helpers import batches, data, loops, models, processes
from helpers._arguments import positive_int

__all__ = [
    "CRASH_IN",
    "HOLD_WHERE",
    "MODES",
    "Outcome",
    "RunConfig",
    "RunFailed",
    "build",
    "command",
    "read_progress",
    "resumable_dataset",
    "run_to_end",
    "run_until_killed",
    "summarize",
    "weights_digest",
]

PROGRAM = "helpers._programs.preemptible"  # what the child process runs: python -m PROGRAM

MODES = ("fit", "custom")
HOLD_WHERE = ("after-step", "before-commit")
CRASH_IN = ("random", "shards", "merge", "commit", "rename", "sweep", "restate")  # save_faults
LOG_NAME = "progress.jsonl"
TRAIN_IMAGES = 8192  # Fashion-MNIST training images the runs draw their batches from


@dataclass
class RunConfig:
    """One training run; the same config must be given again to resume it.

    Taught in notebook 08.
    """

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
            positive_int(name, value)
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
        return batches.plan_batch(self.per_replica_batch, self.replicas).global_batch

    @property
    def save_interval(self) -> int:
        return self.save_every or self.steps_per_epoch

    @property
    def log_path(self) -> Path:
        return Path(self.workdir) / LOG_NAME


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
    distributed iterators do not support (notebook 08_checkpoints_and_preemption shows the error).
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


def build(config: RunConfig, strategy):
    """Model and optimizer, created in ``strategy.scope()`` (the optimizer built, see loops.py).

    Notebook 08_checkpoints_and_preemption's own process builds the same model as the runs it kills.
    """
    import keras

    # The first TRAIN_IMAGES of Fashion-MNIST: more than an epoch of the lesson's runs draws from,
    # and each program (and each resumable_dataset) copies them once, so kept small.
    images = data.load_images("fashion_mnist", max_train=TRAIN_IMAGES)
    with strategy.scope():
        model = models.build_classifier(images.image_shape, images.num_classes, seed=config.seed)
        optimizer = keras.optimizers.Adam(config.learning_rate)
    loops.build_optimizer(strategy, optimizer, model)
    return images, model, optimizer


def command(config: RunConfig, *, defaults: bool = True) -> list[str]:
    """The command line that runs ``config`` in a new Python process.

    ``defaults=False`` leaves out the flags that only repeat a default, to show it to a reader.
    Taught in notebook 08.
    """
    args = [sys.executable, "-m", PROGRAM]
    default = {f.name: f.default for f in fields(RunConfig)}
    for name, value in asdict(config).items():
        if value is None or value is False or (not defaults and value == default[name]):
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def read_progress(path: str | os.PathLike) -> list[dict]:
    """The events logged so far (a line still being written is left for the next read).

    Taught in notebook 08.
    """
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
    # On the CPU only, quiet (helpers.processes): the TPU or GPU stays with this process.
    env = processes.child_env({"PYTHONWARNINGS": "ignore", **(env or {})})
    log = workdir / f"output-{time.time_ns()}.txt"
    return processes.start(command(config), log, env=env, cwd=workdir)


def _failure(message: str, proc, config: RunConfig) -> RunFailed:
    text = proc.log_path.read_text(errors="replace")[-3000:]
    events = read_progress(config.log_path)[-5:]
    return RunFailed(f"{message}\n--- last events\n{events}\n--- output (tail)\n{text}")


def run_until_killed(
    config: RunConfig, kill_when=None, *, timeout: float = 300.0, env: dict | None = None
) -> Outcome:
    """Start ``config`` in a new process and SIGKILL it once ``kill_when(events)`` is true.

    ``kill_when`` gets this process's events so far; by default it waits for the ``hold`` event
    (``config.hold_at``). Raises :class:`RunFailed` if the process ends on its own or
    ``timeout`` seconds pass first (the process is then killed, never left running).
    Taught in notebook 08.
    """
    if kill_when is None:
        if config.hold_at is None:
            raise ValueError("give kill_when, or a config with hold_at")
        kill_when = lambda events: any(e["event"] == "hold" for e in events)  # noqa: E731
    start = time.monotonic()
    proc = _launch(config, env)
    try:
        while True:
            mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
            if kill_when(mine):
                proc.send_signal(signal.SIGKILL)
                code = proc.wait(timeout=60)
                break
            if proc.poll() is not None:
                raise _failure(f"the run ended by itself (exit {proc.returncode})", proc, config)
            if time.monotonic() - start > timeout:
                raise _failure(f"no kill point within {timeout:.0f} s", proc, config)
            time.sleep(0.05)
    finally:
        processes.stop([proc])  # never left running
    mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
    return Outcome(code, proc.pid, mine, round(time.monotonic() - start, 1))


def run_to_end(
    config: RunConfig, *, timeout: float = 300.0, env: dict | None = None, crash: bool = False
) -> Outcome:
    """Run ``config`` in a new process to its end; :class:`RunFailed` unless it exits with 0.

    With ``crash``, the end expected is the process killing itself (``config.crash_at``): then
    :class:`RunFailed` unless it died of SIGKILL.
    Taught in notebook 08.
    """
    start = time.monotonic()
    proc = _launch(config, env)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _failure(f"the run did not finish within {timeout:.0f} s", proc, config) from None
    finally:
        processes.stop([proc])  # never left running
    expected = -signal.SIGKILL if crash else 0
    if proc.returncode != expected:
        raise _failure(f"the run ended with exit {proc.returncode}, not {expected}", proc, config)
    mine = [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]
    return Outcome(proc.returncode, proc.pid, mine, round(time.monotonic() - start, 1))


def summarize(events: list[dict], steps_per_epoch: int) -> dict:
    """What a sequence of runs (one log, several processes) did, from their events.

    Returns per-run rows and the totals notebook 08_checkpoints_and_preemption asserts: ``final_step``, ``steps_run`` (all
    training steps computed, in all processes), ``repeated_steps`` (computed more than once
    because a kill lost them) and ``repeated_epochs`` (epochs that had *finished* in one process
    and were trained again by a later one: must be empty).
    Taught in notebook 08.
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
