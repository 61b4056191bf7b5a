"""Where a conditional block of a lesson must run, declared in a form the headless runner checks.

A block that only some runtimes take (a TPU, the simulated TPU, one replica) starts with
:func:`runs_on`, naming every place it is written for::

    if REPLICAS > 1 and not ON_TPU:
        runs_on("simulated TPU")
        ...

The headless runner (``tools/runner/blocks.py``) reads each call from the executed cell and fails
the lesson when a block did not run where it names, or ran where it does not. Outside the
runner the call does nothing. Places: :data:`PLACES`, ``"N replicas"`` for an exact count, or
several joined by "and" (``"TPU and several replicas"``).
"""

from __future__ import annotations

import hashlib
import linecache
import re
import sys

from helpers import results

__all__ = ["PLACES", "is_place", "runs_on", "source_digest"]

PLACES = (
    "TPU",
    "GPU",
    "CPU",
    "simulated TPU",
    "one replica",
    "several replicas",
    "one host",
    "pod",
    "Colab",
    "Kaggle",
)
_EXACT = re.compile(r"^([1-9]\d*) replicas$")
RECORD = "blocks"  # the results key (``_blocks``) the runner reads


def is_place(place: str) -> bool:
    """Whether ``place`` is one of :data:`PLACES` or ``"N replicas"``, or several joined by
    "and".
    """
    return all(part in PLACES or _EXACT.match(part) for part in place.split(" and "))


def source_digest(source: str) -> str:
    """The digest by which the runner finds the cell a record came from (IPython's compiled text)."""
    return hashlib.sha1(source.encode()).hexdigest()[:16]


def runs_on(*places: str) -> None:
    """Declare where the block this line opens must run, and record that it ran here.

    Raises ValueError for a place the runner does not know, so a typo fails at once.
    """
    unknown = [p for p in places if not is_place(p)]
    if not places or unknown:
        raise ValueError(f"runs_on takes places from {PLACES} or 'N replicas', got {places}")
    caller = sys._getframe(1)
    source = "".join(linecache.getlines(caller.f_code.co_filename))
    record = [source_digest(source), caller.f_lineno, list(places)]
    results.append(RECORD, record)
