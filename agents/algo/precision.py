"""The networks' precision (`train.amp`): the compute dtype and the autocast context of forward passes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from agents.config import Amp


def amp_dtype(amp: Amp) -> torch.dtype:
    """The dtype the networks compute in: float32, or autocast's bfloat16/float16."""
    return {Amp.off: torch.float32, Amp.bf16: torch.bfloat16, Amp.fp16: torch.float16}[amp]


def make_autocast(amp: Amp, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of autocast contexts for forward passes (`nullcontext` when AMP is off)."""
    if amp == Amp.off:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=amp_dtype(amp))
