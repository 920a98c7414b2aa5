"""Observation bounds and Gymnasium spaces of the coverage task, shared by every adapter.

The bounds follow the observation layout of `uavsim.rules` (they are derived, never configured):
the blocked and covered channels and the three scalars lie in ``[0, 1]``, the "other UAVs" channel
counts UAVs in a cell, so it lies in ``[0, num_uavs - 1]``; the global state lies in ``[0, 1]``.
NumPy and Gymnasium only: the single-environment adapters import this without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from uavsim.config import EnvConfig


def as_config(config: EnvConfig | Mapping[str, Any] | None) -> EnvConfig:
    """An `EnvConfig` from an `EnvConfig`, a mapping of fields (unknown keys are errors) or None."""
    if config is None:
        return EnvConfig()
    if isinstance(config, EnvConfig):
        return config
    if isinstance(config, Mapping):
        return EnvConfig.from_dict(config)
    raise TypeError(f"config must be an EnvConfig, a mapping of EnvConfig fields or None, got {type(config).__name__}")


def local_obs_bounds(cfg: EnvConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``, each ``[local_obs_dim]`` float32, of one UAV's local observation."""
    win2 = cfg.window**2
    low = np.zeros(cfg.local_obs_dim, dtype=np.float32)
    high = np.ones(cfg.local_obs_dim, dtype=np.float32)
    high[2 * win2 : 3 * win2] = max(cfg.num_uavs - 1, 0)
    if cfg.comm_radius is not None:  # the memory's heading offsets point either way (uavsim.heading)
        heading = 3 * win2 + 3 + 2 * cfg.state_pool**2
        low[heading : heading + 2] = -1.0
    return low, high


def local_space(cfg: EnvConfig, leading: tuple[int, ...] = ()):
    """Box of local observations with shape ``(*leading, local_obs_dim)``."""
    from gymnasium import spaces

    low, high = local_obs_bounds(cfg)
    shape = (*leading, cfg.local_obs_dim)
    return spaces.Box(np.broadcast_to(low, shape), np.broadcast_to(high, shape), shape, np.float32)


def state_space(cfg: EnvConfig, leading: tuple[int, ...] = ()):
    """Box of the global state with shape ``(*leading, state_dim)``, values in ``[0, 1]``."""
    from gymnasium import spaces

    return spaces.Box(0.0, 1.0, (*leading, cfg.state_dim), np.float32)


def observation_space(cfg: EnvConfig, leading: tuple[int, ...] = ()):
    """``Dict(local: Box[*leading, N, L], state: Box[*leading, S])``."""
    from gymnasium import spaces

    return spaces.Dict({"local": local_space(cfg, (*leading, cfg.num_uavs)), "state": state_space(cfg, leading)})
