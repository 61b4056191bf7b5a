"""Where a conditional block of a lesson must run, declared in a form the headless runner checks.

A block that only some runtimes take (a TPU, the simulated TPU, one replica) starts with
:func:`runs_on`, naming every place it is written for::

    if REPLICAS > 1 and not ON_TPU:
        runs_on("simulated TPU")
        ...

The runner (``tools/run_notebooks.py``, ``tools/runner/blocks.py``) reads each call from the
executed cell and knows where the run was (a TPU or not, how many replicas). It fails the lesson
when a block did not run on a place it names, or ran on a place it does not name: a block that
says "simulated TPU only" and never runs there, or an aside meant for a TPU that runs on the
CPU, is caught in the run that should have taken it. Outside the runner the call does nothing.

Places: the hardware, ``"TPU"``, ``"GPU"`` or ``"CPU"``; ``"simulated TPU"`` (a CPU split into
several logical devices); ``"one replica"``, ``"several replicas"``, ``"N replicas"`` for an
exact count (``"8 replicas"``); ``"one host"`` or ``"pod"`` (a TPU slice of several hosts);
the platforms ``"Colab"`` and ``"Kaggle"``. A place may join
several with "and" (``"TPU and several replicas"``: a TPU with more than one core). Used in
every lesson.
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
    Taught in notebooks 00, 01, 02, 03, 04, 07, 08, 09, 10, 12, 13.
    """
    unknown = [p for p in places if not is_place(p)]
    if not places or unknown:
        raise ValueError(f"runs_on takes places from {PLACES} or 'N replicas', got {places}")
    caller = sys._getframe(1)
    source = "".join(linecache.getlines(caller.f_code.co_filename))
    record = [source_digest(source), caller.f_lineno, list(places)]
    results.append(RECORD, record)
