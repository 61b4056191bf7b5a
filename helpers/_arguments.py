"""Argument checks the helpers share: the one rule for a count that must be a positive integer."""

from __future__ import annotations

import numbers

__all__ = ["positive_int"]


def positive_int(name: str, value) -> int:
    """``value`` if it is a positive integer (NumPy's too; never a bool), else ValueError.

    The message names the argument: ``"steps must be a positive integer, got 0"``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
