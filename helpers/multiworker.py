"""Real multi-worker training on one machine: worker processes on loopback (notebook 09_scaling_out_to_pods).

A pod slice runs one TensorFlow process per host, each with its own input pipeline, kept in step
by all-reduce. The same mechanics run on one machine with ``MultiWorkerMirroredStrategy``: N
Python processes, each told by the ``TF_CONFIG`` environment variable which cluster it belongs to
and which worker it is, talking over 127.0.0.1.

Two layers:

- :func:`run_workers` starts N processes with ``TF_CONFIG`` set, on free loopback ports that are
  checked first, waits with a deadline, and **always** kills and reaps them: on success, error,
  timeout or ``KeyboardInterrupt`` (the notebook's stop button). A worker also dies by itself if
  the process that started it disappears, so nothing is left running.
- :func:`train_on_loopback` uses it to run the reference script's ``main()`` on N workers (each
  runs the program :mod:`helpers._programs.worker`, whose ``train_worker`` notebook
  09_scaling_out_to_pods prints), and returns what every worker read and ended with, so a notebook can
  check that the shards were disjoint and that all workers hold the same weights, and repeat
  the run on one device.

Each worker uses one CPU device: these are separate processes, not the notebook's simulated TPU.

Whatever address ``TF_CONFIG`` names, TensorFlow's gRPC server listens on *all* network
interfaces (``0.0.0.0``), unauthenticated. So on Linux, when the system allows unprivileged user
namespaces, the workers run inside a private network namespace that has nothing but its own
loopback: they reach each other on 127.0.0.1 and nothing outside can reach them. Elsewhere they
run on the machine's loopback, and their servers live only as long as the run.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers import processes
from tpucheck.batches import positive_int

# (notebook 09_scaling_out_to_pods calls it here)

__all__ = [
    "LOOPBACK",
    "PARENT_PID_ENV",
    "free_ports",
    "isolation_available",
    "LoopbackRun",
    "PortInUseError",
    "process_alive",
    "run_workers",
    "tf_config",
    "train_on_loopback",
    "WorkerError",
    "WorkerOutcome",
    "WorkerRun",
    "WorkersTimedOut",
]


LOOPBACK = "127.0.0.1"
PARENT_PID_ENV = "FIELD_GUIDE_PARENT_PID"  # a worker exits when this process is gone
WORKER_PROGRAM = "helpers._programs.worker"  # what each worker runs: python -m WORKER_PROGRAM
# Worker output lines that mean "my port was taken" (gRPC's and the OS's wording).
PORT_TAKEN_SIGNS = ("Address already in use", "Failed to add port", "Could not start gRPC server")


class PortInUseError(OSError):
    """A port the workers need is already taken on the loopback interface.

    Taught in notebook 09.
    """

    pids: tuple[int, ...] = ()  # the workers started before the failure, all stopped


class WorkerError(RuntimeError):
    """A worker process exited with an error; the message holds the end of its log."""

    pids: tuple[int, ...] = ()


class WorkersTimedOut(TimeoutError):
    """The workers did not finish within the time allowed; they were stopped.

    Taught in notebook 09.
    """

    pids: tuple[int, ...] = ()


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, exited but not yet reaped, counts as gone).

    Taught in notebook 09.
    """
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():  # Linux: read the state letter after "(name)"
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:  # elsewhere: signal 0 checks existence only
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that are free on ``host`` right now (chosen by the OS).

    Taught in notebook 09.
    """
    positive_int("count", count)
    sockets = []
    try:
        for _ in range(count):  # keep each socket open so the OS cannot hand out a port twice
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ensure_ports_free(ports: Sequence[int], host: str = LOOPBACK) -> None:
    """Raise :class:`PortInUseError` naming the first of ``ports`` that cannot be bound.

    Each port is tried on ``host`` and on the wildcard address, because TensorFlow's server
    listens on all interfaces: a port held on any of them would make it fail.
    """
    if len(set(ports)) != len(ports):
        raise ValueError(f"ports must be distinct, got {list(ports)}")
    for port in ports:
        for address, where in ((host, f"on {host}"), ("0.0.0.0", "on another interface")):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((address, port))
                except OSError as err:
                    if err.errno not in (errno.EADDRINUSE, errno.EACCES):
                        raise
                    raise PortInUseError(
                        err.errno,
                        f"port {port} {where} is already in use (another program, or workers "
                        "of an earlier run that are still alive). Pass other ports, or "
                        "ports=None to let the helper pick free ones.",
                    ) from err


def tf_config(ports: Sequence[int], index: int, host: str = LOOPBACK) -> dict:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``len(ports)`` workers on ``host``.

    Taught in notebook 09.
    """
    if not 0 <= index < len(ports):
        raise ValueError(f"worker index {index} is outside a cluster of {len(ports)} workers")
    return {
        "cluster": {"worker": [f"{host}:{port}" for port in ports]},
        "task": {"type": "worker", "index": index},
    }


# A new user namespace (so no privileges are needed) with a new, empty network namespace.
_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--"]


@functools.cache
def isolation_available() -> bool:
    """True when workers can run in a private network namespace (Linux user namespaces).

    Tries it once: create the namespace, bring its loopback up, and run a program inside it.
    Containers often forbid one of these steps; the answer is then False.
    """
    if not sys.platform.startswith("linux"):
        return False
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    network = None
    try:
        network = _PrivateNetwork(timeout=30)
        probe = subprocess.run(
            [*network.prefix(), sys.executable, "-c", "pass"],
            env=worker_env([1], 0),
            capture_output=True,
            timeout=30,
        )
        return probe.returncode == 0
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return False
    finally:
        if network is not None:
            network.close()


class _PrivateNetwork:
    """A process that owns a private network namespace for as long as it lives.

    Workers join it with ``nsenter``. It exits when its stdin closes (this process stops it, or
    dies) and, on Linux, when this process dies.
    """

    def __init__(self, timeout: float = 30.0):
        self.proc = subprocess.Popen(
            [*_UNSHARE, sys.executable, "-m", WORKER_PROGRAM, "--hold-network"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=worker_env([1], 0),
            text=True,
            start_new_session=True,
        )
        line: list[str] = []
        try:
            reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))
            reader.start()
            reader.join(timeout)
            if not line or line[0].strip() != "ready":
                raise RuntimeError(f"could not set up a private network: {''.join(line)}")
        except BaseException:  # including KeyboardInterrupt: never leave the holder behind
            self.close()
            raise

    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside this namespace."""
        target = f"--target={self.proc.pid}"
        return ["nsenter", "--preserve-credentials", "--user", "--net", target, "--"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@dataclass
class WorkerRun:
    """One finished worker process: its exit code, run time and log file."""

    index: int
    pid: int
    returncode: int | None
    seconds: float
    log_path: Path
    isolated: bool = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        return processes.log_tail(self.log_path, lines)


def worker_env(ports: Sequence[int], index: int, extra: Mapping[str, str | None] | None = None):
    """The environment of worker ``index``: this one, plus its ``TF_CONFIG``, on the CPU only.

    :func:`helpers.processes.child_env` keeps a worker quiet and off the TPU or GPU that the
    notebook's own process owns. The helpers package the parent uses is put on ``PYTHONPATH`` so
    ``python -m helpers...`` finds the same code.
    """
    package_root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    own = {
        "PYTHONPATH": path,
        "TF_CONFIG": json.dumps(tf_config(ports, index)),
        PARENT_PID_ENV: str(os.getpid()),
        # The working directory stays off sys.path: a learner's edited train_tpu.py there would
        # replace the collection's in every worker (Python 3.11 and later; 3.10 ignores it).
        "PYTHONSAFEPATH": "1",
    }
    return processes.child_env({**own, **(extra or {})})


def run_workers(
    command: Sequence[str],
    num_workers: int = 2,
    *,
    ports: Sequence[int] | None = None,
    timeout: float = 180.0,
    workdir: str | Path | None = None,
    env: Mapping[str, str | None] | None = None,
    isolate: bool | None = None,
) -> list[WorkerRun]:
    """Run ``python <command>`` as ``num_workers`` processes of one TF cluster; wait; clean up.

    ``command`` is what follows the interpreter, e.g. ``["-m", WORKER_PROGRAM, ...]``;
    the texts ``{index}`` and ``{workdir}`` in it are replaced per worker (nothing else is).
    Each worker gets its ``TF_CONFIG`` (see :func:`worker_env`), and its output goes to
    ``workdir/worker<i>.log``.
    ``isolate`` runs the workers in a private network namespace: ``None`` (default) when
    :func:`isolation_available`, ``True`` requires it, ``False`` uses this machine's loopback.

    Raises :class:`PortInUseError` (a port is taken, before or while starting),
    :class:`WorkerError` (a worker failed: the others are stopped at once) or
    :class:`WorkersTimedOut` (past ``timeout`` seconds). Whatever happens, every worker process
    has exited and been reaped when this returns or raises.
    Taught in notebook 09.
    """
    positive_int("num_workers", num_workers)
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if ports is None:
        ports = free_ports(num_workers)
    ports = [int(p) for p in ports]
    if len(ports) != num_workers:
        raise ValueError(f"{num_workers} workers need {num_workers} ports, got {ports}")
    ensure_ports_free(ports)
    if isolate is None:
        isolate = isolation_available()
    elif isolate and not isolation_available():
        raise RuntimeError("this system does not allow a private network namespace (isolate=True)")
    workdir = Path(workdir or tempfile.mkdtemp(prefix="multiworker-"))
    workdir.mkdir(parents=True, exist_ok=True)

    procs: list[subprocess.Popen] = []
    starts: list[float] = []
    network = None
    try:
        network = _PrivateNetwork() if isolate else None
        prefix = network.prefix() if network else []
        for index in range(num_workers):
            argv = [
                a.replace("{index}", str(index)).replace("{workdir}", str(workdir)) for a in command
            ]
            starts.append(time.monotonic())
            procs.append(
                processes.start(
                    [*prefix, sys.executable, *argv],
                    workdir / f"worker{index}.log",
                    env=worker_env(ports, index, env),
                    # Own process group: a Ctrl-C in a terminal reaches this process, which then
                    # stops the workers itself, instead of the workers dying half-way on their own.
                    new_session=True,
                )
            )
        try:
            ends = processes.wait(procs, timeout, poll=0.1)
        except TimeoutError:
            running = [i for i, proc in enumerate(procs) if proc.poll() is None]
            processes.stop(procs)
            tail = processes.log_tail(workdir / f"worker{running[0]}.log") or "(empty)"
            raise WorkersTimedOut(
                f"worker(s) {running} still running after {timeout:.0f} s; all stopped. "
                f"End of worker {running[0]}'s log: {tail}"
            ) from None
        for index in sorted(ends, key=ends.get):  # the first to fail is the cause
            if procs[index].returncode != 0:
                processes.stop(procs)
                _raise_failure(index, procs[index], workdir, ports)
    except (PortInUseError, WorkerError, WorkersTimedOut) as err:
        err.pids = tuple(proc.pid for proc in procs)  # so a caller can check they are gone
        raise
    finally:
        processes.stop(
            procs
        )  # no-op when all have exited; kills and reaps otherwise (errors, Ctrl-C)
        if network is not None:
            network.close()
    return [
        WorkerRun(
            index=i,
            pid=proc.pid,
            returncode=proc.returncode,
            seconds=round(ends[i] - starts[i], 2),
            log_path=workdir / f"worker{i}.log",
            isolated=bool(isolate),
        )
        for i, proc in enumerate(procs)
    ]


def _raise_failure(index: int, proc, workdir: Path, ports: Sequence[int]):
    tail = processes.log_tail(workdir / f"worker{index}.log")
    if any(sign in tail for sign in PORT_TAKEN_SIGNS):
        raise PortInUseError(
            errno.EADDRINUSE,
            f"worker {index} could not listen on 127.0.0.1:{ports[index]}: the port was taken "
            f"after it was checked. Run again (new free ports are picked) or pass other ports.\n"
            + tail,
        )
    raise WorkerError(
        f"worker {index} exited with code {proc.returncode}; the other workers were stopped. "
        f"End of its log ({workdir / f'worker{index}.log'}):\n{tail}"
    )


@dataclass
class WorkerOutcome:
    """What one worker reports after training: its files, examples, losses and final weights.

    ``example_ids``: the numbers of the training examples its pipeline gave, in order
    (:func:`helpers._programs.worker.example_numbers`); ``losses``: the script's loss of each
    epoch; the rest: the numbers of the script's run (its ``main()``'s return).
    """

    task_id: int
    replicas_in_sync: int
    devices: list[str]
    input_pipeline_id: int
    num_input_pipelines: int
    example_ids: list[int]
    losses: list[float]
    weights: list[np.ndarray] = field(repr=False)
    seconds: float = 0.0
    startup_seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    test_accuracy: float = 0.0
    global_batch: int = 0
    steps: int = 0
    epochs: int = 0
    examples: int = 0
    learning_rate: float = 0.0
    seed: int = 0


@dataclass
class LoopbackRun:
    """The result of :func:`train_on_loopback`: one :class:`WorkerOutcome` per worker."""

    workers: list[WorkerOutcome]
    ports: list[int]
    pids: list[int]
    seconds: float
    isolated: bool


def train_on_loopback(
    data_dir: str | Path,
    script_args: Sequence[str] = (),
    *,
    num_workers: int = 2,
    ports: Sequence[int] | None = None,
    timeout: float = 180.0,
    isolate: bool | None = None,
) -> LoopbackRun:
    """Run the reference script on ``num_workers`` local worker processes; return what each read.

    Every worker runs ``train_tpu.main(["--data-dir", data_dir, "--ckpt-dir", its own folder,
    *script_args])`` under ``MultiWorkerMirroredStrategy``. ``data_dir`` holds the TFRecords the
    script wrote (``--prepare``): on more than one host it refuses to write them itself. The
    workers' logs, checkpoints and reports go to a temporary folder removed afterwards; the
    results are returned in memory.
    Taught in notebook 09.
    """
    started = time.monotonic()
    script = ["--data-dir", str(data_dir), "--ckpt-dir", "{workdir}/ckpt{index}", *script_args]
    command = ["-m", WORKER_PROGRAM, "--out", "{workdir}/worker{index}", "--script", *script]
    with tempfile.TemporaryDirectory(prefix="multiworker-") as tmp:
        ports = list(ports) if ports is not None else free_ports(num_workers)
        runs = run_workers(
            command, num_workers, ports=ports, timeout=timeout, workdir=tmp, isolate=isolate
        )
        outcomes = [_load_outcome(Path(tmp) / f"worker{run.index}", run) for run in runs]
    return LoopbackRun(
        workers=outcomes,
        ports=ports,
        pids=[run.pid for run in runs],
        seconds=round(time.monotonic() - started, 2),
        isolated=runs[0].isolated,
    )


def _load_outcome(prefix: Path, run: WorkerRun) -> WorkerOutcome:
    report_path = prefix.with_suffix(".json")
    if not report_path.exists():
        raise WorkerError(
            f"worker {run.index} exited without writing its report; end of its log:\n"
            + run.log_tail()
        )
    report = json.loads(report_path.read_text())
    with np.load(prefix.with_suffix(".npz")) as saved:
        weights = [saved[f"w{i}"] for i in range(len(saved.files))]
    return WorkerOutcome(weights=weights, seconds=run.seconds, **report)
