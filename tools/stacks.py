"""The stacks CI runs, named once here, one requirements file each: their headers, derived.

A stack is a Python and TensorFlow pair standing in for where users run the lessons: ``main`` is
this machine's python3 and the newest TensorFlow; a platform's stack is its Python and the CPU
build of the TensorFlow its TPU route installs, on as many replicas as its TPU has cores (facts
from ``tpucheck.routes.PLATFORMS``). ``make sync`` writes them into each file's header and
``tensorflow-cpu==`` pin, and the matrix of ``.github/workflows/tests.yml``. The Makefile and
``.ci/run`` ask for the stacks before any environment exists (so: standard library only)::

    python3 tools/stacks.py --names                  # main kaggle colab
    python3 tools/stacks.py --requirements colab     # requirements-colab.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = {  # stack name -> (requirements file, platform it stands in for); default first
    "main": ("requirements.txt", None),
    "kaggle": ("requirements-kaggle.txt", "kaggle"),
    "colab": ("requirements-colab.txt", "colab"),
}
HEADER = ("# python:", "# replicas:", "# stands in for:")
WORKFLOW = ".github/workflows/tests.yml"
MATRIX_START, MATRIX_END = "# stacks: written by make sync from tools/stacks.py", "# end of stacks"
MATRIX = re.compile(
    rf"^( *){re.escape(MATRIX_START)}\n.*?^ *{re.escape(MATRIX_END)}$", re.MULTILINE | re.DOTALL
)


def names() -> list[str]:
    return list(STACK_FILES)


def _helpers():
    """``tpucheck.routes`` and ``helpers.strategy``, imported only when needed."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from helpers import strategy
    from tpucheck import routes

    return routes, strategy


def synced(text: str, platform: str | None) -> str:
    """``text`` (a requirements file) with its header and TensorFlow pin derived from the routes."""
    routes, strategy = _helpers()
    body = [line for line in text.splitlines() if not line.startswith(HEADER)]
    if platform is None:
        import repository

        supported = repository.python_range(repository.supported_pythons())
        header = [
            f"# python: the machine's python3 ({supported})",
            f"# replicas: {strategy.SIMULATED_REPLICAS}",
            "# stands in for: laptops, CI and Binder, on the newest TensorFlow",
        ]
    else:
        facts = routes.PLATFORMS[platform]
        release = routes.choose_route(platform, facts.python).release
        header = [
            f"# python: {facts.python}",
            f"# replicas: {facts.cores}",
            f"# stands in for: {facts.label}, after its route ({release.requirement})",
        ]
        pin = f"tensorflow-cpu=={release.tensorflow}"
        body = [re.sub(r"^tensorflow-cpu==\S+$", pin, line) for line in body]
    return "\n".join(header + body) + "\n"


def workflow_synced(text: str, main_python: str) -> str:
    """The tests workflow with its matrix written from :data:`STACK_FILES`: each stack and the
    Python its job runs (``main_python`` for the main stack)."""
    platforms = _helpers()[0].PLATFORMS

    def matrix(match: re.Match) -> str:
        indent = match[1]
        rows = [
            f'{indent}  - {{stack: {name}, python: "{platforms[p].python if p else main_python}"}}'
            for name, (_, p) in STACK_FILES.items()
        ]
        return "\n".join([indent + MATRIX_START, f"{indent}include:", *rows, indent + MATRIX_END])

    if not MATRIX.search(text):
        raise SystemExit(f"{WORKFLOW} lacks the lines {MATRIX_START!r} and {MATRIX_END!r}")
    return MATRIX.sub(matrix, text, count=1)


def main(argv: list[str]) -> int:
    if argv == ["--names"]:
        print(" ".join(names()))
        return 0
    if len(argv) == 2 and argv[0] == "--requirements":
        if argv[1] not in STACK_FILES:
            print(f"Unknown stack {argv[1]!r}; the stacks: {', '.join(names())}", file=sys.stderr)
            return 2
        print(STACK_FILES[argv[1]][0])
        return 0
    print("usage: python3 tools/stacks.py --names | --requirements STACK", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
