"""Device-string parsing and byte formatting shared by the placement modules.

A *device* here is anything ``torch.device`` accepts for the two kinds this package places work
on: ``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` (or a ``torch.device`` / ``int`` index).
"""

from __future__ import annotations

import os

import torch

from .checks import is_int

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


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


def visible_device_token(index: int, environ: dict[str, str] | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry that makes *this process's* ``cuda:index`` a child's only GPU.

    If this process already runs under a ``CUDA_VISIBLE_DEVICES`` list, its ``cuda:k`` is the k-th
    entry of that list (an ordinal, UUID or MIG id), not physical GPU ``k``; passing ``str(k)`` to the
    child would pick the wrong GPU.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    tokens = [t.strip() for t in visible.split(",") if t.strip()]
    if index >= len(tokens):
        raise ValueError(f"cuda:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} lists {len(tokens)} device(s)")
    return tokens[index]


def format_bytes(n: int | float) -> str:
    """Human-readable binary size, e.g. ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{sign}{value:.0f} B" if unit == 0 else f"{sign}{value:.2f} {_UNITS[unit]}"
