"""The stacks CI runs, one requirements file each: their headers and TensorFlow pins, derived.

A platform's stack stands in for its TPU runtime after the route: the platform's Python, and the
CPU build of the TensorFlow release its route installs, on as many replicas as the platform's
TPU has cores. ``helpers.routes.PLATFORMS`` is where those facts are written; ``make sync`` writes
them into each file's first lines (``# python:``, ``# replicas:``, ``# stands in for:``) and its
``tensorflow-cpu==`` pin, and ``make lint`` fails when one is stale. The Makefile reads the
headers; nothing else restates them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import repository

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from helpers import routes  # noqa: E402
from helpers.strategy import SIMULATED_REPLICAS  # noqa: E402

__all__ = ["STACK_FILES", "stack_header", "synced"]

STACK_FILES = {  # stack name -> (requirements file, platform it stands in for)
    "main": ("requirements.txt", None),
    "kaggle": ("requirements-kaggle.txt", "kaggle"),
    "colab": ("requirements-colab.txt", "colab"),
}
_HEADER_KEYS = ("python", "replicas", "stands in for")


def stack_header(platform: str | None) -> list[str]:
    """The first lines of a stack's requirements file."""
    if platform is None:
        supported = repository.python_range(repository.supported_pythons())
        return [
            f"# python: the machine's python3 ({supported})",
            f"# replicas: {SIMULATED_REPLICAS}",
            "# stands in for: laptops, CI and Binder, on the newest TensorFlow",
        ]
    facts = routes.PLATFORMS[platform]
    route = routes.choose_route(platform, facts.python)
    return [
        f"# python: {facts.python}",
        f"# replicas: {facts.cores}",
        f"# stands in for: {facts.label}, after its route ({route.release.requirement})",
    ]


def synced(text: str, platform: str | None) -> str:
    """``text`` (a requirements file) with its header and TensorFlow pin derived from the routes."""
    lines = text.splitlines()
    body = [line for line in lines if not any(line.startswith(f"# {key}:") for key in _HEADER_KEYS)]
    if platform is not None:
        route = routes.choose_route(platform, routes.PLATFORMS[platform].python)
        pin = f"tensorflow-cpu=={route.release.tensorflow}"
        body = [re.sub(r"^tensorflow-cpu==\S+$", pin, line) for line in body]
    return "\n".join(stack_header(platform) + body) + "\n"
