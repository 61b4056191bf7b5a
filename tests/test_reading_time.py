"""tools/reading_time.py: the counting rule, and every lesson's path read in 20 minutes or less.

Lessons over the limit are listed by name with their minutes as a ceiling: a listed lesson may only
shrink, and once it is under the limit its entry has to go.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import lessons  # noqa: E402
import reading_time  # noqa: E402
from notebook_files import notebook_paths, read  # noqa: E402

LIMIT = 20  # minutes

# Lessons still over the limit, by name, with the minutes they measure now (rounded up) as a
# ceiling: lower it when a lesson shrinks, remove the entry once the lesson is within the limit.
KNOWN_OVER: dict[str, float] = {}


def _md(text, tags=None):
    return {"cell_type": "markdown", "metadata": {"tags": tags or []}, "source": text}


def _code(text, tags=None):
    return {"cell_type": "code", "metadata": {"tags": tags or []}, "source": text}


def _notebook(*cells):
    return {"cells": list(cells)}


def test_prose_is_read_at_230_words_a_minute():
    words = " ".join(["word"] * 230)
    assert reading_time.minutes(_notebook(_md(words))) == pytest.approx(1.0)


def test_link_targets_and_comments_are_not_read():
    text = "[two words](https://example.com/a/very/long/address) <!-- not read at all -->"
    assert reading_time.minutes(_notebook(_md(text))) == pytest.approx(2 / 230)


def test_code_costs_its_non_blank_lines_and_the_cell():
    cell = _code("x = 1\n\n# a comment is read\ny = x + 1\n   \n")
    expected = (3 * 2.5 + 20) / 60  # three lines at 2.5 s, and 20 s for the cell
    assert reading_time.minutes(_notebook(cell)) == pytest.approx(expected)
    # source as a list of lines, as Jupyter stores it, counts the same
    listed = _code(["x = 1\n", "\n", "# a comment is read\n", "y = x + 1\n", "   \n"])
    assert reading_time.minutes(_notebook(listed)) == pytest.approx(expected)


def test_the_aside_the_preamble_and_the_navigation_are_not_the_path():
    words = " ".join(["word"] * 230)
    notebook = _notebook(
        _md("# Title\n" + words),  # preamble: before the setup cell
        _code("SMOKE_TEST = False", ["parameters"]),
        _code(reading_time.SETUP_MARKER + ", edit it there.\nimport os\n"),
        _md(words),  # the path: one minute
        _md("## Aside: more\n" + words, ["aside"]),
        _code("print('aside')\n", ["aside"]),
        _md(reading_time.NAV_MARKER + "\n" + words),
    )
    assert [c["source"] for c in reading_time.path_cells(notebook)] == [words]
    assert reading_time.minutes(notebook) == pytest.approx(1.0)


def test_raw_cells_are_not_read():
    assert (
        reading_time.minutes(_notebook({"cell_type": "raw", "metadata": {}, "source": "x y z"}))
        == 0
    )


def test_the_command_prints_each_lesson(capsys):
    assert reading_time.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(notebook_paths())
    assert all(line.split()[1] == "min" for line in printed)


def _measured() -> dict[str, float]:
    return {lessons.lesson_name(p): reading_time.minutes(read(p)) for p in notebook_paths()}


def _problem(stem: str, measured: float, known: dict[str, float]) -> str | None:
    """Why a lesson's minutes fail the limit or its ceiling in ``known``, or None."""
    name = lessons.lesson_name(stem)
    if name not in known:
        if measured > LIMIT:
            return (
                f"{stem}: its path reads in {measured:.1f} min, over {LIMIT} "
                "(python tools/reading_time.py): move demonstrations or history into the aside"
            )
        return None
    if measured > known[name]:
        return (
            f"{stem}: {measured:.1f} min, over its ceiling of {known[name]} in KNOWN_OVER: move "
            "demonstrations or history into the aside rather than adding to the path"
        )
    if measured <= LIMIT:
        return f"{stem}: {measured:.1f} min, now within {LIMIT}: remove it from KNOWN_OVER"
    return None


def test_the_ratchet_fails_a_lesson_over_the_limit_a_grown_one_and_a_stale_entry():
    known = {"long_lesson": 40.0}
    assert _problem("03_short_lesson", 19.9, known) is None
    assert "over 20" in _problem("03_short_lesson", 20.1, known)
    assert _problem("04_long_lesson", 39.5, known) is None  # over the limit, within its ceiling
    assert "ceiling" in _problem("04_long_lesson", 40.2, known)  # grew
    assert "remove it" in _problem("04_long_lesson", 18.0, known)  # shrank under the limit


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_every_path_reads_in_20_minutes_or_less(path):
    problem = _problem(path.stem, reading_time.minutes(read(path)), KNOWN_OVER)
    assert problem is None, problem


def test_every_known_over_lesson_exists():
    assert set(KNOWN_OVER) <= set(_measured())


# The checks that keep a lesson's claims true run in guard cells (hidden in every client) or in
# tests over what the lesson records: a learner sees at most ASSERTS_SEEN asserts on a path.
ASSERTS_SEEN = 3
# Lessons that still show more, with their count now as a ceiling (the same ratchet).
KNOWN_ASSERTS: dict[str, int] = {}


def asserts_seen(notebook: dict) -> int:
    """The assert statements in the code cells of a lesson's path (guards and asides left out)."""
    return sum(
        len(re.findall(r"^\s*assert\b", "".join(cell["source"]), re.MULTILINE))
        for cell in reading_time.path_cells(notebook)
        if cell["cell_type"] == "code"
    )


def test_asserts_in_guards_and_asides_are_not_counted():
    notebook = _notebook(
        _code("x = 1\nassert x == 1\n"),
        _code("assert x\n", ["guard"]),
        _code("  assert x > 0  # in a block\n", ["aside"]),
        _code("print('assert is a word here')\n"),
    )
    assert asserts_seen(notebook) == 1


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_a_learner_sees_at_most_three_asserts_on_a_path(path):
    name, seen = lessons.lesson_name(path), asserts_seen(read(path))
    ceiling = KNOWN_ASSERTS.get(name, ASSERTS_SEEN)
    assert seen <= ceiling, (
        f"{path.stem}: {seen} asserts on the path, over {ceiling}: move the checks into a cell "
        "tagged guard (make sync hides it everywhere) or into a test over what the lesson records"
    )
    if name in KNOWN_ASSERTS:
        assert seen > ASSERTS_SEEN, f"{path.stem}: {seen} now: remove it from KNOWN_ASSERTS"
