"""Child processes: the one place that decides their environment and TensorFlow's log level.

Lessons, the self-test, the benchmark and the tests start Python processes (the killed training
runs of notebook 08_checkpoints_and_preemption, the workers of notebook 09_scaling_out_to_pods):
:func:`child_env` gives each the same quiet environment (:data:`TF_LOG_LEVEL`, set only where
the user chose none; :data:`CPU_ONLY` keeps it off its parent's TPU or GPU), and :func:`start`,
:func:`wait`, :func:`stop` supervise those that run on their own: output into a log file, never
a pipe, and every child killed and reaped whatever happens to the parent. Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tpucheck import host as versions

__all__ = [
    "LOG_LEVEL_VARIABLE",
    "TF_LOG_LEVEL",
    "child_env",
    "default_sigint",
    "is_harmless_log",
    "log_tail",
    "start",
    "stop",
    "wait",
    "tensorflow_version",
]

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
TF_LOG_LEVEL = "2"  # C++ errors only; Python warnings are kept (helpers.quiet)

# libtpu stays unloaded and no GPU is mapped: the parent keeps its accelerator (notebooks 08_checkpoints_and_preemption, 09_scaling_out_to_pods).
CPU_ONLY = {"TPU_LOAD_LIBRARY": "0", "CUDA_VISIBLE_DEVICES": ""}

# Lines TensorFlow writes while it loads, before absl::InitializeLog() runs, where no log level
# reaches (measured with TF_CPP_MIN_LOG_LEVEL=3):
# - the full wheel's GPU probe on a host without CUDA ("cudart_stub ... Could not find cuda
#   drivers", "failed call to cuInit"), with absl's "All log messages before ..." banner;
# - the oneDNN notice ("oneDNN custom operations are on"), on CPUs where oneDNN is enabled;
# - with TensorFlow 2.19 and 2.20, grappler's and XLA's INFO/WARNING lines (prefix I0000/W0000).
HARMLESS_LOG = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|cudart_stub.*Could not find cuda drivers|failed call to cuInit"
    r"|oneDNN custom operations are on"
)
_EARLY_ABSL = re.compile(r"^[IW]\d{4} ")  # an absl INFO or WARNING line, as 2.19/2.20 write them


def tensorflow_version() -> str:
    """The installed TensorFlow's version, whichever distribution brought it ("" if none)."""
    found = versions.tensorflow_distribution()
    return found[1] if found else ""


def unsilenceable_logs_here(version: str | None = None) -> bool:
    """True with the TensorFlow releases (2.19, 2.20) whose early absl lines no setting reaches."""
    version = tensorflow_version() if version is None else version
    return version.startswith(("2.19.", "2.20."))


def is_harmless_log(line: str, *, early_absl: bool | None = None) -> bool:
    """Whether a stderr ``line`` is one of TensorFlow's start-up notices, not a problem.

    ``early_absl`` (by default: with TensorFlow 2.19 or 2.20) also counts any absl INFO or
    WARNING line as harmless, since those releases write them before any setting applies.
    Errors (``E0000 ...``) are never harmless.
    """
    if HARMLESS_LOG.search(line):
        return True
    early_absl = unsilenceable_logs_here() if early_absl is None else early_absl
    return early_absl and bool(_EARLY_ABSL.match(line))


def child_env(extra: Mapping[str, str | None] | None = None, *, cpu_only: bool = True):
    """This process's environment made quiet for a child Python process.

    TensorFlow's log level is set unless the user chose one, Python writes unbuffered (a parent
    follows the output as it comes), glibc keeps two malloc arenas, and with ``cpu_only`` the
    child keeps off this process's TPU or GPU. ``extra`` comes last; None removes a variable.
    """
    env = dict(os.environ)
    env.setdefault(LOG_LEVEL_VARIABLE, TF_LOG_LEVEL)
    env["PYTHONUNBUFFERED"] = "1"
    # glibc gives each busy thread a malloc arena of its own; TensorFlow's thread pools made each
    # of 09_scaling_out_to_pods's workers hold about 90 MB more (it peaked at 1.62 GiB, 1.42 with 2).
    env.setdefault("MALLOC_ARENA_MAX", "2")
    if cpu_only:
        env.update(CPU_ONLY)
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def default_sigint() -> None:
    """Let Ctrl-C (SIGINT) raise KeyboardInterrupt in this process again.

    A program started from a shell's background job (``make test &``, ``nohup``) inherits SIGINT
    ignored, and Python then installs no handler of its own: a parent that stops its children
    with SIGINT would wait for nothing. Every child program calls this first.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)


def start(
    argv: Sequence[str], log_path: str | Path, *, env: Mapping[str, str], new_session: bool = False
) -> subprocess.Popen:
    """Start ``argv`` with stdout and stderr going to the file ``log_path`` (a pipe nobody reads
    fills up and blocks the child) and stdin closed. ``new_session``: its own process group, so a
    Ctrl-C in a terminal reaches only the parent, which then stops its children (:func:`stop`).
    """
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            start_new_session=new_session,
        )


def wait(procs: Sequence[subprocess.Popen], timeout: float) -> dict[int, float]:
    """Wait until every process has exited or one has failed (non-zero status); return when each
    exited one ended (``time.monotonic()``) by its index in ``procs``. Raises
    :class:`TimeoutError` after ``timeout`` seconds, leaving them running: call :func:`stop`.
    """
    deadline = time.monotonic() + timeout
    ends: dict[int, float] = {}
    while True:
        for index, proc in enumerate(procs):
            if index not in ends and proc.poll() is not None:
                ends[index] = time.monotonic()
        if len(ends) == len(procs) or any(procs[index].returncode for index in ends):
            return ends
        if time.monotonic() > deadline:
            raise TimeoutError(f"still running after {timeout:.0f} s")
        time.sleep(0.1)


def stop(procs: Sequence[subprocess.Popen]) -> None:
    """Kill every process still running, then wait for all of them (no zombies); a no-op for
    those already waited for, so it belongs in ``finally``."""
    for proc in procs:
        proc.kill()  # ignored for a process that has exited
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass


def log_tail(path: str | Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a child's log file ("" while there is none)."""
    path = Path(path)
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
