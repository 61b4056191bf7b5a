"""Minutes a reader spends on each lesson's path: ``python tools/reading_time.py``.

The path is the cells after the generated setup cell, but the aside (cells tagged ``aside``), the
guards (``guard``, whose source every client hides) and the navigation. The rule: the words of the
Markdown (as ``sync_notebooks.word_count`` counts them) at 230 a minute; 2.5 s for each non-blank
line of code (24 lines a minute: a line holds five to ten tokens, each read for what it does); and
20 s for each code cell, for running it and reading its output (stored notebooks have none).

Calibration: a reviewer timed the paths as they stood before this tool (input_pipelines 40
minutes, checkpoints_and_preemption 44, tpu_readiness_check 43, profiling_a_training_step 31, the
others under 30); the rule gives 43.5, 41.8, 41.8 and 28.6, and 11 to 28 for the others. Lines of
code alone missed by up to 4 minutes and put the prose-heavy lessons too low; the cost per cell
brings them back. tests/test_reading_time.py keeps every path at 30 minutes or less, with a
ceiling for each lesson known to be over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from notebook_files import notebook_paths, read, source
from sync_notebooks import ASIDE, GUARD, NAV_MARKER, SETUP_MARKER, word_count

WORDS_PER_MINUTE = 230  # prose
LINE_SECONDS = 2.5  # each non-blank line of code
CELL_SECONDS = 20  # each code cell: running it and reading its output


def path_cells(notebook: dict) -> list[dict]:
    """The cells on the reader's path (from the first cell when there is no setup cell)."""
    cells = notebook["cells"]
    start = next((i + 1 for i, c in enumerate(cells) if source(c).startswith(SETUP_MARKER)), 0)
    return [
        cell
        for cell in cells[start:]
        if not {ASIDE, GUARD} & set(cell.get("metadata", {}).get("tags", []))
        and not source(cell).startswith(NAV_MARKER)
        and cell["cell_type"] in ("markdown", "code")
    ]


def cell_minutes(cell: dict) -> float:
    text = source(cell)
    if cell["cell_type"] == "markdown":
        return word_count(text) / WORDS_PER_MINUTE
    lines = sum(1 for line in text.splitlines() if line.strip())
    return (lines * LINE_SECONDS + CELL_SECONDS) / 60


def minutes(notebook: dict) -> float:
    return sum(cell_minutes(cell) for cell in path_cells(notebook))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every lesson")
    args = parser.parse_args(argv)
    for path in args.notebooks or notebook_paths():
        print(f"{minutes(read(path)):5.1f} min  {path.stem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
