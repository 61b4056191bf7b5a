"""Real multi-worker training on one machine: worker processes on loopback (notebook 09_scaling_out_to_pods).

N processes, one CPU each, run ``MultiWorkerMirroredStrategy`` as a pod slice's hosts would,
told by ``TF_CONFIG`` which worker they are. :func:`run_workers` always kills and reaps them;
a worker also dies with its parent. TensorFlow's gRPC server listens on all interfaces,
unauthenticated: where Linux allows user namespaces, the workers get a private network.
"""

from __future__ import annotations

import contextlib
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
    """A port the workers need is already taken on the loopback interface."""

    pids: tuple[int, ...] = ()  # the workers started before the failure, all stopped


class WorkerError(RuntimeError):
    """A worker process exited with an error; the message holds the end of its log."""

    pids: tuple[int, ...] = ()


class WorkersTimedOut(TimeoutError):
    """The workers did not finish within the time allowed; they were stopped."""

    pids: tuple[int, ...] = ()


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    if Path("/proc/self/stat").exists():  # Linux: read the state letter after "(name)"
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:  # elsewhere: signal 0 checks existence only
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        pass
    return True


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that are free on ``host`` right now (chosen by the OS)."""
    positive_int("count", count)
    with contextlib.ExitStack() as open_sockets:  # all open at once: no port handed out twice
        sockets = [open_sockets.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def ensure_ports_free(ports: Sequence[int], host: str = LOOPBACK) -> None:
    """Raise :class:`PortInUseError` naming the first of ``ports`` that cannot be bound on
    ``host`` or on the wildcard address (TensorFlow's server listens on all interfaces)."""
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
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``len(ports)`` workers on ``host``."""
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
    """True when workers can run in a private network namespace (Linux user namespaces, which
    containers often forbid): tried once."""
    if not (
        sys.platform.startswith("linux") and shutil.which("unshare") and shutil.which("nsenter")
    ):
        return False
    try:
        with _private_network() as prefix:
            probe = subprocess.run(
                [*prefix, sys.executable, "-c", "pass"],
                env=worker_env([1], 0),
                capture_output=True,
                timeout=30,
            )
        return probe.returncode == 0
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def _private_network(timeout: float = 30.0):
    """Hold a private network namespace during the block; yield the command prefix that runs a
    program inside it (``nsenter``). The holder exits when its stdin closes or this process dies.
    """
    proc = subprocess.Popen(
        [*_UNSHARE, sys.executable, "-m", WORKER_PROGRAM, "--hold-network"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=worker_env([1], 0),
        text=True,
        start_new_session=True,
    )
    try:  # the finally runs on KeyboardInterrupt too: never leave the holder behind
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()))
        reader.start()
        reader.join(timeout)
        if not line or line[0].strip() != "ready":
            raise RuntimeError(f"could not set up a private network: {''.join(line)}")
        yield ["nsenter", "--preserve-credentials", "--user", "--net", f"--target={proc.pid}", "--"]
    finally:
        if proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
        proc.wait()
        proc.stdout.close()


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


def worker_env(ports: Sequence[int], index: int, extra: Mapping[str, str | None] | None = None):
    """The environment of worker ``index``: this one made quiet and CPU-only
    (:func:`helpers.processes.child_env`), with its ``TF_CONFIG`` and the parent's helpers."""
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

    ``{index}`` and ``{workdir}`` in ``command`` are replaced per worker; each worker's output
    goes to ``workdir/worker<i>.log``. ``isolate``: a private network namespace, ``None`` when
    :func:`isolation_available`. Raises :class:`PortInUseError`, :class:`WorkerError` (the first
    worker to fail; the others are stopped at once) or :class:`WorkersTimedOut`; every worker has
    exited and been reaped when this returns or raises.
    """
    positive_int("num_workers", num_workers)
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    ports = free_ports(num_workers) if ports is None else [int(p) for p in ports]
    if len(ports) != num_workers:
        raise ValueError(f"{num_workers} workers need {num_workers} ports, got {ports}")
    ensure_ports_free(ports)
    if isolate is None:
        isolate = isolation_available()
    elif isolate and not isolation_available():
        raise RuntimeError("this system does not allow a private network namespace (isolate=True)")
    workdir = Path(workdir or tempfile.mkdtemp(prefix="multiworker-"))
    workdir.mkdir(parents=True, exist_ok=True)

    command = [a.replace("{workdir}", str(workdir)) for a in command]
    procs: list[subprocess.Popen] = []
    starts: list[float] = []
    with contextlib.ExitStack() as cleanup:
        prefix = cleanup.enter_context(_private_network()) if isolate else []
        # Runs first, on any exit (errors, Ctrl-C): kills and reaps the workers still running.
        cleanup.callback(processes.stop, procs)
        try:
            for index in range(num_workers):
                argv = [a.replace("{index}", str(index)) for a in command]
                starts.append(time.monotonic())
                procs.append(
                    processes.start(
                        [*prefix, sys.executable, *argv],
                        workdir / f"worker{index}.log",
                        env=worker_env(ports, index, env),
                        # Own process group: a Ctrl-C in a terminal reaches this process, which
                        # then stops the workers, instead of the workers dying half-way.
                        new_session=True,
                    )
                )
            try:
                ends = processes.wait(procs, timeout)
            except TimeoutError:
                running = [i for i, proc in enumerate(procs) if proc.poll() is None]
                tail = processes.log_tail(workdir / f"worker{running[0]}.log") or "(empty)"
                raise WorkersTimedOut(
                    f"worker(s) {running} still running after {timeout:.0f} s; all stopped. "
                    f"End of worker {running[0]}'s log: {tail}"
                ) from None
            for index in sorted(ends, key=ends.get):  # the first to fail is the cause
                if procs[index].returncode != 0:
                    _raise_failure(index, procs[index], workdir, ports)
        except (PortInUseError, WorkerError, WorkersTimedOut) as err:
            err.pids = tuple(proc.pid for proc in procs)  # so a caller can check they are gone
            raise
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
    """What one worker reports after training (:func:`helpers._programs.worker.train_worker`)."""

    task_id: int
    replicas_in_sync: int
    devices: list[str]
    input_pipeline_id: int
    num_input_pipelines: int
    example_ids: list[int]
    losses: list[float]
    weights: list[np.ndarray] = field(repr=False)
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    test_accuracy: float = 0.0
    global_batch: int = 0
    steps: int = 0
    epochs: int = 0
    examples: int = 0


@dataclass
class LoopbackRun:
    """The result of :func:`train_on_loopback`: one :class:`WorkerOutcome` per worker."""

    workers: list[WorkerOutcome]
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
    """Run ``train_tpu.main(["--data-dir", data_dir, "--ckpt-dir", its own folder, *script_args])``
    on ``num_workers`` local workers (:func:`helpers._programs.worker.train_worker`); return what
    each read and ended with. ``data_dir`` holds the TFRecords of the script's ``--prepare``."""
    started = time.monotonic()
    script = ["--data-dir", str(data_dir), "--ckpt-dir", "{workdir}/ckpt{index}", *script_args]
    command = ["-m", WORKER_PROGRAM, "--out", "{workdir}/worker{index}", "--script", *script]
    with tempfile.TemporaryDirectory(prefix="multiworker-") as tmp:
        runs = run_workers(
            command, num_workers, ports=ports, timeout=timeout, workdir=tmp, isolate=isolate
        )
        outcomes = [_load_outcome(Path(tmp) / f"worker{run.index}", run) for run in runs]
    return LoopbackRun(
        workers=outcomes,
        pids=[run.pid for run in runs],
        seconds=round(time.monotonic() - started, 2),
        isolated=runs[0].isolated,
    )


def _load_outcome(prefix: Path, run: WorkerRun) -> WorkerOutcome:
    report_path = prefix.with_suffix(".json")
    if not report_path.exists():
        raise WorkerError(
            f"worker {run.index} exited without writing its report; end of its log:\n"
            + processes.log_tail(run.log_path)
        )
    report = json.loads(report_path.read_text())
    with np.load(prefix.with_suffix(".npz")) as saved:
        weights = [saved[f"w{i}"] for i in range(len(saved.files))]
    return WorkerOutcome(weights=weights, seconds=run.seconds, **report)
