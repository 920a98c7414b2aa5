"""Argument checks shared by the placement modules: numbers (NumPy scalars count, bools do not) and devices.

A size read from a NumPy array (``np.int64``) or a loss computed with NumPy (``np.float32``) is a
number like any other, so it is accepted and converted to a Python int or float; ``True`` is an
int to Python but never a batch size or a byte count, so it is refused. The ``numbers`` ABCs know
NumPy's scalar types (and not ``np.bool_``) without this package importing NumPy.

A *device* is anything ``torch.device`` accepts for the two kinds this package places work on:
``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` (or a ``torch.device`` / ``int`` index).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch


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


def as_device(device: str | int | torch.device, *, what: str = "device") -> torch.device:
    """Return ``device`` as a ``torch.device`` of type cpu or cuda; an int ``k`` means ``cuda:k``.

    Raises TypeError for other types and ValueError for unparsable strings or other device types
    (``what`` names the argument in the message).
    """
    if isinstance(device, bool):
        raise TypeError(f"{what} must be a str, int or torch.device, got bool {device!r}")
    if is_int(device):  # NumPy integers too
        if device < 0:
            raise ValueError(f"{what} index must be >= 0, got {device}")
        return torch.device("cuda", int(device))
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device.strip())
        except RuntimeError as exc:
            raise ValueError(
                f"{what} {device!r} is not a device string; expected 'cpu', 'cuda' or 'cuda:<index>'"
            ) from exc
    else:
        raise TypeError(f"{what} must be a str, int or torch.device, got {type(device).__name__}")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{what} {device!r} has type {dev.type!r}; only 'cpu' and 'cuda' are supported")
    return dev


def device_key(device: str | int | torch.device, *, what: str = "device") -> str:
    """Canonical string for a device: ``"cpu"``, ``"cuda:<index>"`` (bare ``"cuda"`` means index 0).

    ``what`` names the argument in the errors of :func:`as_device`.
    """
    dev = as_device(device, what=what)
    if dev.type == "cpu":
        return "cpu"
    return f"cuda:{0 if dev.index is None else dev.index}"


def check_visible_gpu(device: str | int | torch.device, who: str) -> torch.device:
    """``device`` parsed (`as_device`), and if a GPU one this process can see; else a ValueError that
    says ``who`` asks for it, rather than torch's own error later (on a CPU-only build of torch, the
    default of a plain ``pip install torch`` on Windows, an AssertionError or an AttributeError about
    ``torch._C``)."""
    dev = as_device(device, what=f"{who}'s device")
    if dev.type == "cpu":
        return dev
    key = device_key(dev)
    if not torch.cuda.is_available():
        raise ValueError(
            f"{who} asks for {key}, but CUDA is not available here (torch.cuda.is_available() is False: a "
            "CPU-only build of torch, or no GPU visible)"
        )
    count = torch.cuda.device_count()
    if int(key.split(":")[1]) >= count:
        raise ValueError(f"{who} asks for {key}, but only {count} CUDA device(s) are visible")
    return dev
