"""A notebook's peak memory: its kernel and every process the kernel starts.

A thread samples them every :data:`INTERVAL` seconds and adds up what they hold together: each
one's private pages, plus the largest shared set any one maps (``smaps_rollup``): every
TensorFlow process maps the same libraries (about 460 MB), which a container's memory limit
(Binder's) charges once. The peak is that total or one process's ``VmHWM``, whichever is larger.
On a CPU a lesson must fit :data:`BUDGET_GIB` (mybinder.org gives a session about 2 GB).
"""

from __future__ import annotations

import threading

import psutil

BUDGET_GIB = 2.0
INTERVAL = 0.2


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


def not_yet_executed(pid: int) -> bool:
    """True while ``pid`` is a copy of its parent that has not started its own program, so it
    maps the parent's memory (``vfork``, which ``subprocess`` uses, shares it outright)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The name in parentheses may hold spaces; flags are the 7th field after it.
            flags = int(stat.read().rpartition(")")[2].split()[6])
    except (OSError, ValueError, IndexError):
        return False
    return bool(flags & 0x40)  # Linux's PF_FORKNOEXEC: forked, has not called exec yet


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

    def _sample(self, before: set[int]) -> None:
        me = psutil.Process()
        while True:
            ours = [
                c.pid
                for c in me.children(recursive=True)
                if c.pid not in before and not not_yet_executed(c.pid)
            ]
            self.peak_bytes = max(self.peak_bytes, *together(ours))
            if self._stop.wait(self.interval):
                return

    @property
    def gib(self) -> float:
        return round(self.peak_bytes / 2**30, 2)

    def __enter__(self) -> PeakMemory:
        # Processes already running (another notebook's, a test's) are not this block's.
        before = {c.pid for c in psutil.Process().children(recursive=True)}
        self._thread = threading.Thread(target=self._sample, args=(before,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
