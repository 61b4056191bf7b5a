"""Minutes a reader spends on each lesson's path: ``python tools/reading_time.py``.

The path is what a reader goes through from top to bottom: the cells after the generated setup
cell, except the aside (cells tagged ``aside``, folded under "## Aside: ..."), the guards (cells
tagged ``guard``, whose source every client hides) and the generated navigation cell. The preamble before it (title, badges, "What you need", the setup text, the
parameters and the setup cell) is generated from notebooks/manifest.toml, so it is left out.

The rule:

- prose: the words of each Markdown cell, counted as ``sync_notebooks.word_count`` counts them
  (link targets and HTML comments are not read), at 230 words a minute;
- code: 2.5 seconds for each non-blank line, comments included (24 lines a minute: a line holds
  five to ten tokens, each read for what it does, so about a tenth of the prose rate in words);
- and 20 seconds for each code cell, for running it and reading what it prints (the notebooks are
  stored without outputs, so the cell stands for its output).

Calibration: a reviewer timed the paths of the lessons as they stood before this tool
(input_pipelines at 40 minutes, checkpoints_and_preemption at 44, tpu_readiness_check at 43,
profiling_a_training_step at 31, every other under 30). On those notebooks this rule gives 43.5,
41.8, 41.8 and 28.6 for the four, within 3.5 minutes of each, and 11 to 28 for the others. Lines
of code alone, at whatever rate, missed by up to 4 minutes and put the prose-heavy readiness and
profiling lessons too low; the cost per cell brings them back. tests/test_reading_time.py keeps
every lesson's path at 30 minutes or less, with a ceiling for each lesson known to be over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from notebook_files import notebook_paths, read, source
from sync_notebooks import NAV_MARKER, SETUP_MARKER, word_count

WORDS_PER_MINUTE = 230  # prose
LINE_SECONDS = 2.5  # each non-blank line of code
CELL_SECONDS = 20  # each code cell: running it and reading its output

ASIDE, GUARD = "aside", "guard"  # a guard's source is hidden in every client


def path_cells(notebook: dict) -> list[dict]:
    """The cells on the reader's path: after the setup cell, not in the aside, not the navigation.

    A notebook without a setup cell (a hand-made one in the tests) starts its path at its first cell.
    """
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
    """One cell's reading time in minutes, by the rule above."""
    text = source(cell)
    if cell["cell_type"] == "markdown":
        return word_count(text) / WORDS_PER_MINUTE
    lines = sum(1 for line in text.splitlines() if line.strip())
    return (lines * LINE_SECONDS + CELL_SECONDS) / 60


def minutes(notebook: dict) -> float:
    """The minutes of a notebook's path."""
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
