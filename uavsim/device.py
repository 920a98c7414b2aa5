"""Which device an environment runs on, named as its tensors name theirs."""

from __future__ import annotations

from typing import Any

import torch


def canonical_device(device: Any) -> torch.device:
    """``device`` as tensors on it report theirs: ``"cuda"`` -> ``cuda:<current>``, ``"cpu:0"`` ->
    ``cpu`` (a plain ``torch.device("cuda")`` compares unequal to a tensor's ``cuda:0``).

    Args:
        device: a name (``"cpu"``, ``"cuda"``, ``"cuda:1"``), a ``torch.device`` or a CUDA index.

    Raises:
        TypeError: another type.
        ValueError: not a device name, not CPU or CUDA, or a GPU torch cannot see.
    """
    if isinstance(device, bool) or not isinstance(device, (str, torch.device, int)):  # an int: torch's CUDA index
        raise TypeError(
            f"device must be a string such as 'cpu', 'cuda' or 'cuda:1', a torch.device or a CUDA "
            f"index; got {type(device).__name__} {device!r}"
        )
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"a CUDA device index must be >= 0, got {device}")
        device = f"cuda:{device}"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device {device!r} is not a device name: expected 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"the environment runs on 'cpu' or 'cuda' devices, got {str(dev)!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {str(dev)!r}: torch sees no CUDA device (a CPU-only build, or no GPU visible)")
    if dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {str(dev)!r}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev
