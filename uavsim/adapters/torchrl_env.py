"""`UAVTorchRLEnv`: the batched `UAVSwarmEnv` as a TorchRL `EnvBase` (``batch_size=[num_envs]``).

Keys (``B`` environments, ``N`` UAVs), the layout of TorchRL's VMAS wrapper plus per-agent dones:
    ("agents", "observation")  [B, N, local_obs_dim] float32    local observations (actors)
    "state"                    [B, state_dim] float32           global state (critic); coverage is its last entry
    ("agents", "action")       [B, N] int64, Categorical(num_actions)
    ("agents", "reward")       [B, N, 1] float32
    "done", "terminated", "truncated"                [B, 1] bool
    ("agents", "done" | "terminated" | "truncated")  [B, N, 1] bool, the same flags per UAV, so that
        GAE and PPO losses keyed on ``("agents", ...)`` take them as they are (no expand transform).

Resets. `UAVSwarmEnv` resets an ended episode inside ``step`` (SAME_STEP); TorchRL resets through
``_reset`` afterwards. This adapter joins the two without losing an episode:
    * ``step`` reports the **final** (pre-reset) observation as ``("next", ...)``, so a truncated
      episode can be bootstrapped from its real last state, and remembers which environments the
      core env has already moved on to their next episode (``pending``);
    * ``_reset`` for a pending environment just hands out that next episode's first observation;
      only environments that did not just end (a user's reset mid-episode) are reset in the core
      env. So environment ``i`` plays episodes 0, 1, 2, ... of ``ReferenceEnv(cfg, seed, i)``.
Stepping again without the reset TorchRL would do (``step`` rather than ``step_and_maybe_reset``)
continues in the next episode from the previous episode's final observation: do not.

Seeding. ``set_seed(s)`` restarts every environment at episode 0 of the streams of seed ``s mod
2**31`` (the env's keys are 31 bits; TorchRL derives seeds up to 2**32 for batched envs and
collectors).

Speed: no Python loop over environments or UAVs, and no copy of the observations. ``maybe_reset``
(the path of ``step_and_maybe_reset``, ``rollout`` and collectors) hands the core env's current
observation over as is instead of TorchRL's masked merge of every entry, and reads one value from
the device per step, as TorchRL's own ``maybe_reset`` does. ``check_action_range=True`` (the
default, as in the core env) reads one more; a policy that samples from the Categorical spec
never produces a bad action, so trainers pass False.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from uavsim.adapters.spaces import as_config
from uavsim.config import EnvConfig
from uavsim.env import UAVSwarmEnv, canonical_device
from uavsim.rng import MAX_KEY

_DONE_KEYS = ("done", "terminated", "truncated")


class UAVTorchRLEnv(EnvBase):
    """``num_envs`` coverage environments for TorchRL (see the module docstring).

    Args:
        num_envs: batch size ``B``.
        config: an `EnvConfig`, a mapping of its fields, or None for the defaults.
        seed, device, first_env_index, check_action_range, reset_mode: as `UAVSwarmEnv`.
    """

    def __init__(
        self,
        num_envs: int = 1,
        config: EnvConfig | Mapping[str, Any] | None = None,
        seed: int = 0,
        device: Any = "cpu",
        first_env_index: int = 0,
        check_action_range: bool = True,
        reset_mode: str | None = None,
    ):
        cfg = self.config = as_config(config)
        self._env_kwargs = dict(
            num_envs=num_envs,
            device=device,
            first_env_index=first_env_index,
            check_action_range=check_action_range,
            reset_mode=reset_mode,
        )
        swarm = UAVSwarmEnv(cfg, seed=seed, **self._env_kwargs)  # checks every argument
        super().__init__(device=swarm.device, batch_size=torch.Size([num_envs]))
        self.swarm, self.num_envs, self.num_uavs = swarm, num_envs, cfg.num_uavs
        self._obs: dict[str, torch.Tensor] | None = None  # the core env's current observation
        self._pending = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._make_specs()

    def _make_specs(self) -> None:
        b, n, dev, cfg = self.num_envs, self.num_uavs, self.device, self.config

        def dones(*shape):
            return {k: Categorical(2, (*shape, 1), dtype=torch.bool, device=dev) for k in _DONE_KEYS}

        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((b, n, cfg.local_obs_dim), device=dev), shape=(b, n)),
            state=Unbounded((b, cfg.state_dim), device=dev),
            shape=(b,),
            device=dev,
        )
        self.action_spec = Composite(
            agents=Composite(action=Categorical(cfg.num_actions, (b, n), device=dev), shape=(b, n)),
            shape=(b,),
            device=dev,
        )
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded((b, n, 1), device=dev), shape=(b, n)), shape=(b,), device=dev
        )
        self.done_spec = Composite(**dones(b), agents=Composite(**dones(b, n), shape=(b, n)), shape=(b,), device=dev)

    # -- the two TorchRL hooks -----------------------------------------------------------------------
    def _output(
        self, obs: dict[str, torch.Tensor], flags: dict[str, torch.Tensor], reward: torch.Tensor | None = None
    ) -> TensorDict:
        b, n = self.num_envs, self.num_uavs
        agents = {"observation": obs["local"]}
        if reward is not None:
            agents["reward"] = reward.unsqueeze(-1)
        root = {"state": obs["state"]}
        for key, flag in flags.items():
            root[key] = flag.unsqueeze(-1)
            agents[key] = flag.view(b, 1, 1).expand(b, n, 1).clone()  # real storage: TorchRL writes into dones
        root["agents"] = TensorDict(agents, batch_size=(b, n), device=self.device)
        return TensorDict(root, batch_size=(b,), device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        partial = tensordict.get("_step", None)
        if partial is not None and not bool(partial.all()):
            raise ValueError(
                "UAVTorchRLEnv steps every environment at once: partial steps ('_step', as in "
                "rollout(break_when_all_done=True)) are not supported"
            )
        actions = tensordict.get(("agents", "action"), None)
        if actions is None:
            raise KeyError(
                "UAVTorchRLEnv.step needs the actions at ('agents', 'action'), "
                f"shape ({self.num_envs}, {self.num_uavs}) int64"
            )
        obs, reward, terminated, truncated, info = self.swarm.step(actions)  # the core env checks the actions
        done = terminated | truncated
        self._obs, self._pending = obs, done.clone()  # TorchRL may write into the dones it is given
        return self._output(info["final_obs"], {"done": done, "terminated": terminated, "truncated": truncated}, reward)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        requested = None if tensordict is None else tensordict.get("_reset", None)
        if requested is None and tensordict is not None:
            requested = tensordict.get(("agents", "_reset"), None)
        if self._obs is None:  # first reset (or after set_seed): every environment starts
            self._obs = self.swarm.reset()
        else:
            if requested is None:
                requested = torch.ones_like(self._pending)
            else:
                requested = requested.reshape(self.num_envs, -1).any(1)
            restart = requested & ~self._pending  # pending environments already started their next episode
            self._pending = self._pending & ~requested
            if bool(restart.any()):
                self._obs = self.swarm.reset(restart)
        flags = {k: torch.zeros(self.num_envs, dtype=torch.bool, device=self.device) for k in _DONE_KEYS}
        return self._output(self._obs, flags)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """TorchRL's ``maybe_reset`` (used by ``step_and_maybe_reset``, collectors, ``rollout``)
        without its generic masked merge of every entry: the environments that ended are already
        on their next episode in the core env, whose current observation is the right one for
        every environment, so it is set as is (no copy). Anything unusual takes TorchRL's path."""
        done = tensordict.get("done", None)
        if self._obs is None or done is None or tensordict.batch_size != self.batch_size:
            return super().maybe_reset(tensordict)
        ended = done.reshape(self.num_envs)
        any_ended, foreign = torch.stack((ended.any(), (ended & ~self._pending).any())).tolist()  # one read
        if not any_ended:
            return tensordict
        if foreign:  # dones that this env did not produce in its last step
            return super().maybe_reset(tensordict)
        tensordict.set(("agents", "observation"), self._obs["local"])
        tensordict.set("state", self._obs["state"])
        for key in self.done_keys:
            tensordict.set(key, torch.zeros_like(tensordict.get(key)))
        self._pending = self._pending & ~ended
        return tensordict

    def _set_seed(self, seed: int | None) -> None:
        """Restart every environment's episode stream under ``seed mod 2**31``: TorchRL chains seeds
        through batched envs and collectors with values up to 2**32, the env's keys take 31 bits."""
        if seed is None:
            return
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.swarm = UAVSwarmEnv(self.config, seed=int(seed) % MAX_KEY, **self._env_kwargs)
        self._obs = None
        self._pending = torch.zeros_like(self._pending)

    def to(self, device: Any) -> UAVTorchRLEnv:
        if canonical_device(device) == self.device:  # a clear error for a device that does not exist
            return self
        raise ValueError(
            f"UAVTorchRLEnv lives on {self.device}; build it with device={str(device)!r} "
            "instead of moving it (the core env's state does not move)"
        )

    # -- rendering -------------------------------------------------------------------------------------
    def render(self, env_index: int = 0, cell_px: int = 8):
        """RGB uint8 NumPy image of one environment (after any autoreset)."""
        return self.swarm.render(env_index, cell_px)
