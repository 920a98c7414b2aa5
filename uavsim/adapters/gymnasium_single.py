"""`CoverageReferenceEnv`: one coverage environment as a `gymnasium.Env`, over `ReferenceEnv` (NumPy).

It never imports torch, so `gymnasium.vector.AsyncVectorEnv` can run one per worker process::

    from functools import partial
    envs = gymnasium.vector.AsyncVectorEnv(
        [partial(CoverageReferenceEnv, config=cfg, seed=0, env_index=i) for i in range(8)],
        autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)

Worker ``i`` then plays exactly the episodes of environment ``i`` of ``UAVSwarmEnv(cfg, seed=0)``
(as long as ``reset`` is called without a seed, or with ``seed=[0] * 8``).

Spaces: ``action_space = MultiDiscrete([num_actions] * N)``; ``observation_space =
Dict(local: Box[N, local_obs_dim], state: Box[state_dim])`` (float32; bounds in
`uavsim.adapters.spaces`).

Reward: Gymnasium needs a scalar, so ``reward`` is the **mean over UAVs** of the per-UAV rewards
(the same quantity the batched env sums into ``episode_return``); the per-UAV rewards ``[N]``
float32 are in ``info["uav_rewards"]``. ``info`` also holds ``coverage``, ``collisions [N]``,
``near_misses [N]`` and, on the last step of an episode, ``episode_return`` (mean over UAVs),
``episode_length``, ``episode_coverage``, ``episode_collisions``, ``episode_near_misses``.

Seeding: ``reset(seed=s)`` restarts the episode stream of ``(seed=s, env_index)`` at episode 0;
``reset()`` starts the next episode of the current stream. The episode truncates itself after
``max_steps`` (no `TimeLimit` wrapper is needed), and stepping a finished episode is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from uavsim import rules
from uavsim.adapters._frames import render_reference
from uavsim.adapters.spaces import as_config, observation_space
from uavsim.config import EnvConfig
from uavsim.reference import ReferenceEnv, check_key
from uavsim.render import check_cell_px


class CoverageReferenceEnv(gym.Env):
    """One coverage environment (see the module docstring).

    Args:
        config: an `EnvConfig`, a mapping of its fields, or None for the defaults.
        seed: the episode stream's seed, in ``[0, 2**31)``.
        env_index: which environment of that stream, in ``[0, 2**31)`` (batched env index).
        render_mode: None or ``"rgb_array"``.
        cell_px: pixels per grid cell in rendered images.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(
        self,
        config: EnvConfig | Mapping[str, Any] | None = None,
        seed: int = 0,
        env_index: int = 0,
        render_mode: str | None = None,
        cell_px: int = 8,
    ):
        cfg = self.config = as_config(config)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        check_cell_px(cell_px)
        self._ref = ReferenceEnv(cfg, seed=seed, env_index=env_index)  # checks seed and env_index
        self.env_index, self.render_mode, self.cell_px = self._ref.env_index, render_mode, cell_px
        self.num_uavs, self.num_actions = cfg.num_uavs, cfg.num_actions
        self.observation_space = observation_space(cfg)
        self.action_space = spaces.MultiDiscrete(np.full(cfg.num_uavs, cfg.num_actions, dtype=np.int64))
        self._done = True

    @property
    def reference(self) -> ReferenceEnv:
        """The wrapped `ReferenceEnv` (read-only by convention)."""
        return self._ref

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options:
            raise ValueError(f"CoverageReferenceEnv.reset takes no options, got {sorted(options)}")
        if seed is not None:  # checked before gymnasium's own check, which raises its own error type
            seed = check_key("seed", seed)
        super().reset(seed=seed)
        if seed is not None:
            self._ref = ReferenceEnv(self.config, seed=seed, env_index=self.env_index)
        obs = self._ref.reset()
        self._done = False
        return obs, {"episode_index": self._ref.episode}

    def step(self, action: Any):
        if self._done:
            raise RuntimeError("the episode has ended (or never started): call reset() before step()")
        obs, reward, terminated, truncated, ref_info = self._ref.step(action)  # the reference checks the actions
        info = {
            "uav_rewards": reward,
            "coverage": ref_info["coverage"],
            "collisions": ref_info["collisions"],
            "near_misses": ref_info["near_misses"],
        }
        if terminated or truncated:
            self._done = True
            info.update({k: v for k, v in ref_info.items() if k.startswith("episode_")})
        return obs, float(rules.mean_return(reward)), terminated, truncated, info  # the vector env's bits too

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; make the env with render_mode='rgb_array'")
            return None
        return render_reference(self._ref, self.cell_px)
