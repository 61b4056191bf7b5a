"""A notebook's peak memory: its kernel and every process the kernel starts.

A thread samples this process's descendants (the kernel, and the training workers or scripts a
lesson starts) every :data:`INTERVAL` seconds and adds up the memory they hold together: each
one's private pages, plus the largest set of shared pages any one of them maps (Linux's
``smaps_rollup``). Every TensorFlow process maps the same libraries, about 460 MB; a sum of
resident sets would count them once per process, where a container's memory limit (Binder's)
charges them once. The peak is the largest such total, or the largest resident high-water mark
(``VmHWM``) of one process, which the kernel keeps between samples too, whichever is larger.
On a CPU, lessons must fit in :data:`BUDGET_GIB`: mybinder.org gives a session about 2 GB (on
TPU hardware the peak is only reported: the TPU runtime's own host buffers are not the lesson's
to budget, and unmeasured).

A process between ``fork`` and ``exec`` is skipped: until it starts its own program it maps its
parent's memory (``vfork``, which Python's ``subprocess`` uses, shares it outright), so a sample
taken in that moment counted the runner, or a kernel starting a script, a second time. Lessons
start processes with ``subprocess`` (which execs) or multiprocessing's "spawn" (which does too).
"""

from __future__ import annotations

import threading

import psutil

BUDGET_GIB = 2.0
INTERVAL = 0.2
GIB = 1024**3


def _status(pid: int, fields: tuple[str, ...], name: str) -> dict[str, int]:
    """The ``fields`` of ``/proc/PID/<name>`` in bytes ({} once the process has ended)."""
    found = {}
    try:
        with open(f"/proc/{pid}/{name}") as lines:
            for line in lines:
                key, _, rest = line.partition(":")
                if key in fields:
                    found[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return found


PF_FORKNOEXEC = 0x40  # Linux's per-process flag: forked, has not called exec yet


def not_yet_executed(pid: int) -> bool:
    """True while ``pid`` is a copy of its parent that has not started its own program."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The name in parentheses may hold spaces; flags are the 7th field after it.
            flags = int(stat.read().rpartition(")")[2].split()[6])
    except (OSError, ValueError, IndexError):
        return False
    return bool(flags & PF_FORKNOEXEC)


SHARED = ("Shared_Clean", "Shared_Dirty")
PRIVATE = ("Private_Clean", "Private_Dirty")


def together(pids) -> tuple[int, int]:
    """(bytes the processes hold together, the largest one's resident high-water mark)."""
    private, shared, high = 0, 0, 0
    for pid in pids:
        pages = _status(pid, SHARED + PRIVATE, "smaps_rollup")
        private += sum(pages.get(k, 0) for k in PRIVATE)
        shared = max(shared, sum(pages.get(k, 0) for k in SHARED))
        high = max(high, _status(pid, ("VmHWM",), "status").get("VmHWM", 0))
    return private + shared, high


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.gib``: the peak of the processes this
    process started while the block ran (and theirs)."""

    def __init__(self, interval: float = INTERVAL):
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while True:
            ours = [
                c.pid
                for c in me.children(recursive=True)
                if c.pid not in self._before and not not_yet_executed(c.pid)
            ]
            total, high = together(ours)
            self.peak_bytes = max(self.peak_bytes, total, high)
            if self._stop.wait(self.interval):
                return

    @property
    def gib(self) -> float:
        return round(self.peak_bytes / GIB, 2)

    def __enter__(self) -> PeakMemory:
        # Processes already running (another notebook's, a test's) are not this block's.
        self._before = {c.pid for c in psutil.Process().children(recursive=True)}
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
