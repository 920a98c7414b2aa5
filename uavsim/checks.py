"""Argument checks shared across uavsim (the drawing, the video recorder, the scripted policies).

NumPy and torch free, like `uavsim.render`, which draws for torch-free workers too.
"""

from __future__ import annotations

import numbers
from typing import Any


def _bound(n: int) -> str:
    """``2**64`` rather than its 20 digits."""
    return f"2**{n.bit_length() - 1}" if n >= 2**16 and n & (n - 1) == 0 else str(n)


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as a plain int if it is an integer (NumPy's too, never a bool) in ``[low, high)``
    (``high`` None: no upper bound).

    Raises:
        TypeError: not an integer (the message names ``name``).
        ValueError: out of range (likewise).
    """
    span = f">= {low}" if high is None else f"in [{low}, {_bound(high)})"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int {span}, got {type(value).__name__} {value!r:.40}")
    if value < low or (high is not None and value >= high):
        raise ValueError(f"{name} must be {span}, got {value}")
    return int(value)
