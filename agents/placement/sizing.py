"""Model size in bytes, computable on the meta device (no memory allocated for weights)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn


def _modules_of(model: Any) -> list[nn.Module]:
    if isinstance(model, nn.Module):
        return [model]
    # diffusers pipelines are not nn.Modules; they expose their parts in a `components` dict
    components = getattr(model, "components", None)
    if isinstance(components, Mapping):
        return [m for m in components.values() if isinstance(m, nn.Module)]
    if isinstance(model, Mapping):
        model = model.values()
    if isinstance(model, Iterable) and not isinstance(model, (str, bytes)):
        mods = list(model)
        if mods and all(isinstance(m, nn.Module) for m in mods):
            return mods
    raise TypeError(
        "model_bytes expects an nn.Module, a diffusers-style pipeline (with a `components` dict) or "
        f"a list/dict of nn.Modules, got {type(model).__name__}"
    )


def model_bytes(model: Any, dtype: torch.dtype | None = None, *, buffers: bool = True) -> int:
    """Bytes the parameters (and buffers, if ``buffers``) of ``model`` take at ``dtype``.

    ``dtype=None`` counts each tensor at its own dtype. With a dtype, floating-point tensors are
    counted at that dtype and the others (integer position ids, masks) at their own, as
    ``model.to(dtype)`` would convert them. Shared (tied) tensors are counted once. Works on meta
    modules, so the size of a model too large for this machine is known before loading it::

        with torch.device("meta"):
            big = AutoModelForCausalLM.from_config(config)
        model_bytes(big, torch.bfloat16)
    """
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if dtype is not None and not dtype.is_floating_point:  # model.to(torch.int8) raises too
        raise TypeError(f"dtype must be a floating-point dtype (what model.to(dtype) accepts), got {dtype}")
    seen: set[int] = set()
    total = 0
    for module in _modules_of(model):
        tensors = list(module.parameters())
        if buffers:
            tensors += list(module.buffers())
        for t in tensors:
            # identity, not data_ptr: meta tensors all report data_ptr 0
            if id(t) in seen:
                continue
            seen.add(id(t))
            if dtype is not None and t.is_floating_point():
                itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
            else:
                itemsize = t.element_size()
            total += t.numel() * itemsize
    return total
