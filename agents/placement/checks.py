"""Number checks shared by the placement modules: NumPy scalars count as numbers, bools do not.

A size read from a NumPy array (``np.int64``) or a loss computed with NumPy (``np.float32``) is a
number like any other, so it is accepted and converted to a Python int or float; ``True`` is an
int to Python but never a batch size or a byte count, so it is refused. The ``numbers`` ABCs know
NumPy's scalar types (and not ``np.bool_``) without this package importing NumPy.
"""

from __future__ import annotations

import numbers
from typing import Any


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer: a Python int or a NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number: a Python or NumPy int or float, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(value: Any, what: str, minimum: int, *, allow_none: bool = False) -> int | None:
    """``value`` as a Python int, when it is an int (NumPy's too) >= ``minimum`` (or None, if allowed).

    Anything else is a ValueError naming ``what`` and what was expected.
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        expected = f"an int >= {minimum}" + (" or None" if allow_none else "")
        raise ValueError(f"{what} must be {expected}, got {value!r}")
    return int(value)
