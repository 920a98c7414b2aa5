"""The batched env's checks of its arguments: clear errors naming what was wrong and what was expected."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_batch(
    num_envs: Any, seed: Any, first_env_index: Any, check_action_range: Any, max_key: int
) -> tuple[int, int, int, bool]:
    """The constructor's batch arguments as plain Python values (NumPy's integers and bools too), else a
    TypeError / ValueError naming the argument; environment indices and the seed lie in ``[0, max_key)``."""
    for name, value in (("num_envs", num_envs), ("seed", seed), ("first_env_index", first_env_index)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    num_envs, seed, first_env_index = int(num_envs), int(seed), int(first_env_index)
    if not isinstance(check_action_range, (bool, np.bool_)):  # a string such as "no" would be truthy
        raise TypeError(f"check_action_range must be a bool, got {type(check_action_range).__name__}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if not 0 <= seed < max_key:
        raise ValueError(f"seed must be in [0, 2**31), got {seed}")
    if first_env_index < 0 or first_env_index + num_envs > max_key:
        raise ValueError(f"environment indices must lie in [0, 2**31), got first_env_index={first_env_index}")
    return num_envs, seed, first_env_index, bool(check_action_range)


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
