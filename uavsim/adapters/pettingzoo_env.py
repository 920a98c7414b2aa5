"""`CoverageParallelEnv`: one coverage environment as a PettingZoo `ParallelEnv`, over `ReferenceEnv`.

Agents are ``uav_0`` .. ``uav_{N-1}``. Each observes its local observation (``Box[local_obs_dim]``
float32, layout in `uavsim.rules`) and acts in ``Discrete(num_actions)``; ``state()`` is the
global state (``state_space = Box[state_dim]``) for a centralized critic. All UAVs end together:
on the step that terminates or truncates the episode every agent is reported terminated (or
truncated) and ``agents`` becomes empty, as the PettingZoo API asks. Rewards are per UAV.

``reset(seed=s)`` restarts the episode stream ``(seed=s, env_index)`` at episode 0, ``reset()``
starts the next episode. ``options`` are accepted and ignored (there are none).

Needs the ``peers`` extra (``pettingzoo``); no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

try:
    from pettingzoo import ParallelEnv
except ImportError as exc:  # an optional dependency: say which extra brings it
    raise ImportError(f'the PettingZoo adapter needs PettingZoo: pip install -e ".[peers]" ({exc})') from exc

from uavsim.adapters._frames import render_reference
from uavsim.adapters.spaces import as_config, local_space, state_space
from uavsim.config import EnvConfig
from uavsim.reference import ReferenceEnv
from uavsim.render import check_cell_px


class CoverageParallelEnv(ParallelEnv):
    """One coverage environment for PettingZoo users (see the module docstring).

    Args:
        config: an `EnvConfig`, a mapping of its fields, or None for the defaults.
        seed, env_index: the episode stream, as `ReferenceEnv`.
        render_mode: None or ``"rgb_array"``.
        cell_px: pixels per grid cell in rendered images.
    """

    metadata = {"name": "uavsim_coverage_v0", "render_modes": ["rgb_array"], "render_fps": 8, "is_parallelizable": True}

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
        self._ref = ReferenceEnv(cfg, seed=seed, env_index=env_index)  # checks seed and env_index
        self.render_mode, self.cell_px = render_mode, check_cell_px(cell_px)
        self.possible_agents = [f"uav_{i}" for i in range(cfg.num_uavs)]
        self.agents: list[str] = []
        self._index = {agent: i for i, agent in enumerate(self.possible_agents)}
        self._obs_spaces = {agent: local_space(cfg) for agent in self.possible_agents}
        self._act_spaces = {agent: spaces.Discrete(cfg.num_actions) for agent in self.possible_agents}
        self.state_space = state_space(cfg)
        self._state: np.ndarray | None = None

    def _agent(self, agent: str) -> str:
        if agent not in self._index:
            raise ValueError(f"unknown agent {agent!r}; agents are uav_0 .. uav_{len(self._index) - 1}")
        return agent

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_spaces[self._agent(agent)]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_spaces[self._agent(agent)]

    def _split(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._state = obs["state"]
        return {agent: obs["local"][i] for agent, i in self._index.items()}

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._ref = ReferenceEnv(self.config, seed=seed, env_index=self._ref.env_index)
        obs = self._split(self._ref.reset())
        self.agents = list(self.possible_agents)
        return obs, {agent: {} for agent in self.agents}

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("no live agents: call reset() before step() (the episode ended or never started)")
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a dict {{agent: action}}, got {type(actions).__name__}")
        missing = [a for a in self.agents if a not in actions]
        unknown = sorted(set(actions) - set(self.agents))
        if missing or unknown:
            raise ValueError(
                f"actions must hold exactly the live agents {self.agents}: "
                f"missing {missing}, unknown or finished {unknown}"
            )
        for agent in self.agents:
            if np.ndim(actions[agent]) != 0:
                raise ValueError(f"the action of {agent} must be one integer, got shape {np.shape(actions[agent])}")
            if np.asarray(actions[agent]).dtype == np.bool_:  # beside integers, NumPy would read True as 1
                raise TypeError(f"the action of {agent} must be an integer, got {actions[agent]!r}")
        joint = np.array([actions[agent] for agent in self.possible_agents])
        obs, reward, terminated, truncated, info = self._ref.step(joint)  # the reference checks dtype and range
        ended = terminated or truncated
        episode = {k: v for k, v in info.items() if k.startswith("episode_")} if ended else {}
        infos = {
            agent: {
                "coverage": info["coverage"],
                "collision": bool(info["collisions"][i]),
                "near_miss": bool(info["near_misses"][i]),
                **episode,
            }
            for agent, i in self._index.items()
        }
        out = (
            self._split(obs),
            {agent: float(reward[i]) for agent, i in self._index.items()},
            dict.fromkeys(self.possible_agents, terminated),
            dict.fromkeys(self.possible_agents, truncated),
            infos,
        )
        if ended:
            self.agents = []
        return out

    def state(self) -> np.ndarray:
        """The global state ``[state_dim]`` float32 of the current step."""
        if self._state is None:
            raise RuntimeError("call reset() before state()")
        return self._state

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        return render_reference(self._ref, self.cell_px)

    def close(self) -> None:
        pass
