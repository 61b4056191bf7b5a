"""Numbers a notebook measured, collected for the headless run's summary (all notebooks).

``record(accuracy=0.97)`` prints the values and, when the runner (``tools/run_notebooks.py``)
names a JSON file in ``FIELD_GUIDE_RESULTS``, merges them into it for the summary table;
:func:`count` and :func:`append` keep the run's own bookkeeping there, silently.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

__all__ = ["RESULTS_ENV", "append", "count", "record"]

RESULTS_ENV = "FIELD_GUIDE_RESULTS"


def record(**values: float | int | str | bool) -> None:
    """Print named results, one per line, and keep them for the headless run's summary.

    Returns nothing, so a cell ending with ``record(...)`` shows only those lines.
    """
    values = {name: _plain(value) for name, value in values.items()}
    for name, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"result {name} is not a finite number: {value}")
        print(f"{name}: {_format(value)}")
    _merge(lambda saved: saved.update(values))


def count(name: str) -> int | None:
    """Add one to the silent counter ``_<name>`` of the run's results; return its new value
    (outside a headless run, nothing is kept and None is returned)."""
    key = f"_{name}"
    saved = _merge(lambda saved: saved.update({key: saved.get(key, 0) + 1}))
    return None if saved is None else saved[key]


def append(name: str, value) -> None:
    """Append ``value`` to the silent list ``_<name>`` of the run's results (outside a headless
    run, nothing is kept)."""
    key = f"_{name}"
    _merge(lambda saved: saved.update({key: [*saved.get(key, []), value]}))


def _merge(change) -> dict | None:
    """Apply ``change(saved)`` to the results file the runner named; None when there is none."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return None
    path = Path(path)
    saved = json.loads(path.read_text()) if path.exists() else {}
    change(saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(saved, indent=2))
    tmp.replace(path)  # atomic: an interrupted run never leaves half a file
    return saved


def _plain(value):
    """numpy and TensorFlow scalars -> plain Python, so they serialise to JSON."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        value = value.item()
    return value


def _format(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
