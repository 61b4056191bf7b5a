"""The machine a report describes: CPU, cores, memory and load."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

__all__ = ["hardware", "load_average"]


def hardware() -> dict:
    """CPU model, cores and memory of this machine (Linux; best effort elsewhere)."""
    model = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if found:
            model = found.group(1).strip()
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = float("nan")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": round(memory, 1),
        "system": f"{platform.system()} {platform.release()}",
        "accelerator": "none (CPU only)",
    }


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None
