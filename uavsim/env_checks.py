"""The batched env's checks of its arguments: clear errors naming what was wrong and what was expected."""

from __future__ import annotations

from typing import Any

import torch


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_actions(
    actions: Any, num_envs: int, num_uavs: int, num_actions: int, device: torch.device, check_range: bool
) -> None:
    """Shape, dtype and device always (free); the range only with ``check_range`` (a host read)."""
    expected = (num_envs, num_uavs)
    if not isinstance(actions, torch.Tensor):
        raise TypeError(f"actions must be a torch.Tensor of shape {expected}, got {type(actions).__name__}")
    if actions.dtype != torch.int64:
        raise TypeError(f"actions must have dtype torch.int64, got {actions.dtype}")
    if tuple(actions.shape) != expected:
        raise ValueError(f"actions must have shape {expected} (num_envs, num_uavs), got {tuple(actions.shape)}")
    if actions.device != device:
        raise ValueError(f"actions must be on {device}, got {actions.device}")
    if check_range and bool(((actions < 0) | (actions >= num_actions)).any()):
        bad = actions[(actions < 0) | (actions >= num_actions)]
        raise ValueError(f"actions must be in [0, {num_actions}), got values {bad.unique()[:8].tolist()}")


def check_mask(mask: Any, num_envs: int, device: torch.device) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a torch.bool tensor of shape ({num_envs},), got {mask!r:.80}")
    if tuple(mask.shape) != (num_envs,):
        raise ValueError(f"mask must have shape ({num_envs},), got {tuple(mask.shape)}")
    if mask.device != device:
        raise ValueError(f"mask must be on {device}, got {mask.device}")
