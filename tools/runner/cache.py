"""What a notebook's result depends on, and the runs that passed, kept in ``cache.json``."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

from notebook_files import ROOT

from helpers.processes import tensorflow_version
from tpucheck import host as versions


def stack() -> dict[str, str]:
    """The versions a notebook's result depends on besides its own code."""
    return {
        "python": platform.python_version(),
        "tensorflow": tensorflow_version(),
        "keras": versions.installed("keras") or "",
        "jax": versions.installed("jax") or "",
    }


def cache_key(path: Path, parameters: dict) -> str:
    """A digest of the notebook, the helpers, its parameters and the stack it runs on."""
    digest = hashlib.sha256(path.read_bytes())
    for helper in sorted((ROOT / "helpers").rglob("*.py")):
        digest.update(str(helper.relative_to(ROOT)).encode() + helper.read_bytes())
    digest.update(json.dumps([parameters, stack()], sort_keys=True).encode())
    return digest.hexdigest()


class Cache:
    """The runs of one output folder that passed, by notebook name; saved after every change."""

    def __init__(self, folder: Path):
        self.folder, self.path = folder, folder / "cache.json"
        self.entries = json.loads(self.path.read_text()) if self.path.exists() else {}

    def hit(self, name: str, key: str) -> dict | None:
        """The entry of ``name`` if it passed with ``key`` and its executed copy still exists."""
        entry = self.entries.get(name)
        executed = self.folder / "executed" / name
        return entry if entry and entry["key"] == key and executed.exists() else None

    def last_seconds(self, name: str) -> float:
        return self.entries.get(name, {}).get("row", {}).get("seconds", 0.0)

    def record(self, name: str, key: str, row: dict) -> None:
        if row["status"] == "passed":
            self.entries[name] = {"key": key, "when": time.strftime("%Y-%m-%d %H:%M"), "row": row}
        else:
            self.entries.pop(name, None)
        self.path.write_text(json.dumps(self.entries, indent=2))
