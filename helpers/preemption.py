"""A ``fit`` run with Keras' ``BackupAndRestore`` that is killed and resumed (notebook 08_checkpoints_and_preemption's aside).

The run is a program of its own, started in a new process so that it can really be killed
(SIGKILL: no exception, no ``finally``, no chance to save)::

    python -m helpers._programs.preemptible --workdir /tmp/run --epochs 3

It trains the reference script's model on the script's pipeline with the script's
``compile_for_fit``, plus ``BackupAndRestore``. The custom loop's resume is the script's own
(``train_tpu.checkpointing``/``restore``; notebook 08_checkpoints_and_preemption kills ``train_tpu.py`` itself with
``helpers.save_faults``). Run the same command again after a kill and it continues from the
last backup; run it after it finished and it does nothing more.

Progress goes to ``WORKDIR/progress.jsonl``, one JSON object per line, written and flushed as it
happens, so a parent process can follow the run. ``hold_at`` makes the run stop and wait after
that training step, so that the parent's kill lands at the same place in every run; a real
preemption lands anywhere, and the recovery must not care where.

This module is the parent's side: :class:`RunConfig`, :func:`command`, :func:`run_until_killed`,
:func:`run_to_end`, :func:`read_progress` and :func:`summarize_runs`. The program is
:mod:`helpers._programs.preemptible`. A parent that only starts and reads runs never loads
TensorFlow.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from helpers import processes
from tpucheck.batches import positive_int

__all__ = [
    "ProcessOutcome",
    "RunConfig",
    "RunFailed",
    "command",
    "read_progress",
    "run_to_end",
    "run_until_killed",
    "summarize_runs",
]

PROGRAM = "helpers._programs.preemptible"  # what the child process runs: python -m PROGRAM

LOG_NAME = "progress.jsonl"


@dataclass
class RunConfig:
    """One training run; the same config must be given again to resume it.

    Taught in notebook 08.
    """

    workdir: str
    epochs: int = 3
    steps_per_epoch: int = 8
    per_replica_batch: int = 8
    replicas: int = 8
    learning_rate: float = 1e-3
    seed: int = 0
    hold_at: int | None = None  # wait to be killed after this training step
    hold_timeout: float = 600.0  # a held run nobody kills exits with an error after this
    require_checkpoint: bool = False

    def __post_init__(self):
        for name in ("epochs", "steps_per_epoch", "per_replica_batch", "replicas"):
            positive_int(name, getattr(self, name))
        if self.hold_at is not None and not 1 <= self.hold_at <= self.total_steps:
            raise ValueError(f"hold_at must be a step in 1..{self.total_steps}, got {self.hold_at}")

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def global_batch(self) -> int:
        return self.per_replica_batch * self.replicas

    @property
    def log_path(self) -> Path:
        return Path(self.workdir) / LOG_NAME


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
class ProcessOutcome:
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


def _events(proc, config: RunConfig) -> list[dict]:
    """The events this process logged so far (the log holds every run's)."""
    return [e for e in read_progress(config.log_path) if e.get("pid") == proc.pid]


def _failure(message: str, proc, config: RunConfig) -> RunFailed:
    text = processes.log_tail(proc.log_path, 40)
    events = read_progress(config.log_path)[-5:]
    return RunFailed(f"{message}\n--- last events\n{events}\n--- output (tail)\n{text}")


def run_until_killed(
    config: RunConfig, kill_when=None, *, timeout: float = 300.0, env: dict | None = None
) -> ProcessOutcome:
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
        try:
            ended = processes.wait([proc], timeout, until=lambda: kill_when(_events(proc, config)))
        except TimeoutError:
            raise _failure(f"no kill point within {timeout:.0f} s", proc, config) from None
        if ended:
            raise _failure(f"the run ended by itself (exit {proc.returncode})", proc, config)
        proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=60)
    finally:
        processes.stop([proc])  # never left running
    return ProcessOutcome(code, proc.pid, _events(proc, config), round(time.monotonic() - start, 1))


def run_to_end(
    config: RunConfig, *, timeout: float = 300.0, env: dict | None = None
) -> ProcessOutcome:
    """Run ``config`` in a new process to its end; :class:`RunFailed` unless it exits with 0.

    Taught in notebook 08.
    """
    start = time.monotonic()
    proc = _launch(config, env)
    try:
        processes.wait([proc], timeout)
    except TimeoutError:
        raise _failure(f"the run did not finish within {timeout:.0f} s", proc, config) from None
    finally:
        processes.stop([proc])  # never left running
    if proc.returncode != 0:
        raise _failure(f"the run ended with exit {proc.returncode}, not 0", proc, config)
    return ProcessOutcome(0, proc.pid, _events(proc, config), round(time.monotonic() - start, 1))


def summarize_runs(events: list[dict], steps_per_epoch: int) -> dict:
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
