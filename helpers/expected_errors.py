"""Show an error a lesson expects, without stopping "Run all" (notebooks 01_tpu_detection_and_connection, 02_building_in_strategy_scope, 03_keras_compile_and_fit, 08_checkpoints_and_preemption).

A notebook cell that raises stops Colab's and Jupyter's "Run all". Lessons that demonstrate a
failure wrap it in :func:`expect_error`, which prints the real error and fails loudly if the
error did *not* happen, so the lesson can never silently stop proving its point.
"""

from __future__ import annotations

import re
import textwrap
from contextlib import contextmanager

__all__ = ["expect_error", "ExpectedErrorMissing"]

MAX_DETAIL_LINES = 6
ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")  # Keras colours parts of its messages
# What makes TensorFlow's messages wider than an output area, shortened for reading (the full
# text stays in the exception expect_error yields): "{{function_node ...}}" and object reprs.
NOISE = (
    (re.compile(r"\{\{function_node [^}]*\}\}\s*"), ""),
    (re.compile(r"<(?:[\w]+\.)+(\w+) object at 0x[0-9a-f]+>"), r"<\1 object>"),
)
WIDTH = 100  # an output area's width in characters, about


class ExpectedErrorMissing(AssertionError):
    """The code under :func:`expect_error` finished without raising."""


@contextmanager
def expect_error(*types: type[BaseException], match: str | None = None):
    """Run the ``with`` block, require it to raise one of ``types``, print the error.

    ``match`` is a regular expression that the error message must contain. Yields a one-item
    list that holds the caught exception afterwards, for further checks. Long TensorFlow errors
    are shown short: their first line, the line ``match`` found, and how many lines were left out.
    """
    types = types or (Exception,)
    caught: list[BaseException] = []
    try:
        yield caught
    except types as err:
        message = str(err).strip()
        if match is not None and not re.search(match, message):
            raise AssertionError(f"expected an error matching {match!r}, got: {message}") from err
        caught.append(err)
        _show(type(err).__name__, message, match)
    else:
        names = " or ".join(t.__name__ for t in types)
        raise ExpectedErrorMissing(f"expected {names}, but nothing was raised")


def _readable(line: str) -> str:
    line = ANSI_CODES.sub("", line)
    for pattern, replacement in NOISE:
        line = pattern.sub(replacement, line)
    return line


def _show(name: str, message: str, match: str | None) -> None:
    """Print an error's first line; then the line ``match`` found if the first line lacks it
    (TensorFlow's graph errors put the reason under hundreds of lines of stack), otherwise the
    next few lines when there is no ``match``; then how many lines are not shown. Lines are
    wrapped at about 100 characters, between words."""
    lines = [_readable(line) for line in message.splitlines()] or [""]
    first = f"Raised, as expected: {name}: {lines[0]}"
    print(textwrap.fill(first, WIDTH, subsequent_indent="    ", break_on_hyphens=False))
    rest = lines[1:]
    if match is None:
        shown = rest[:MAX_DETAIL_LINES]
    elif re.search(match, lines[0]):
        shown = []
    else:  # the first line that matches; a match across lines shows the next few instead
        found = [line.strip() for line in rest if re.search(match, line)]
        shown = found[:1] or rest[:MAX_DETAIL_LINES]
    for line in shown:
        print(textwrap.fill(line, WIDTH, initial_indent="    ", subsequent_indent="    "))
    if len(rest) > len(shown):
        print(f"    ({len(rest) - len(shown)} more lines)")
