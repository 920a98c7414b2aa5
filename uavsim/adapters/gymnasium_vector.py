"""`CoverageVectorEnv`: the batched `UAVSwarmEnv` as a `gymnasium.vector.VectorEnv` (Gymnasium 1.x).

Made by ``gymnasium.make_vec("uavsim/Coverage-v0", num_envs=B)`` (the default
``vectorization_mode="vector_entry_point"``) or directly. No copy of the rules: every step is one
``UAVSwarmEnv.step``.

Arrays are torch tensors on the env's device by default (``output="torch"``): nothing leaves the
device. ``output="numpy"`` returns NumPy arrays instead (one device-to-host copy per step).
Gymnasium spaces describe NumPy arrays, so with torch output ``observation_space.contains(obs)``
is False even though shapes, dtypes and bounds agree; ``action_space.sample()`` gives a NumPy
array, which ``step`` accepts in either mode.

Per step (``B`` environments, ``N`` UAVs; autoreset ``SAME_STEP`` by default: an ended episode is
replaced by the next one inside the same ``step``, as ``metadata["autoreset_mode"]`` declares):
    obs          {"local": [B, N, L], "state": [B, S]} float32, after any autoreset
    rewards      [B] float32: the mean over UAVs of the per-UAV rewards (summed in float64, as `episode_return`)
    terminated   [B] bool; truncated [B] bool (never both)
    infos        Gymnasium's ``key`` / ``_key`` layout (``_key`` says where ``key`` is valid):
        uav_rewards [B, N], coverage [B], collisions [B, N], near_misses [B, N]: the step's values,
            valid everywhere (for an ended episode: its last step, before the reset);
        final_obs: the pre-reset observation, batched like ``obs`` (not an object array as in
            ``SyncVectorEnv``), valid where ``_final_obs`` (= terminated | truncated);
        final_info: the step's info of the ended episodes, valid where ``_final_info``: the single env's
            keys (``uav_rewards`` .. ``episode_return``, ``episode_length``, ...), as ``SyncVectorEnv`` has them;
        episode: {"r": return (mean over UAVs), "l": length, "coverage", "collisions",
            "near_misses"} of the ended episodes, valid where ``_episode`` -- what
            ``RecordEpisodeStatistics`` would add, so do not wrap this env in it (the key clashes).
            Counts are int64 (the env's state keeps them in its narrowest exact types), as in ``final_info``.

``autoreset_mode="next_step"`` (Gymnasium's ``NEXT_STEP``, what its vector observation wrappers such as
``NormalizeObservation`` require): ``step`` returns an ended episode's last observation, and the next
``step`` starts the next episode there instead (its actions ignored; reward 0, neither terminated nor
truncated). No ``final_obs`` or ``final_info`` then: ``episode`` comes with the step that ends it.

``reset(seed=s)`` restarts every environment's episode stream at episode 0 with seed ``s``;
``reset(options={"reset_mask": mask})`` starts new episodes only where the ``[B]`` bool mask is
True; ``reset()`` starts the next episode everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from uavsim.adapters.spaces import as_config, observation_space
from uavsim.checks import check_int
from uavsim.config import EnvConfig
from uavsim.env import UAVSwarmEnv, mean_return
from uavsim.render import check_cell_px, render_frames
from uavsim.render import render_tiled as tiled_image


def to_numpy(x: Any) -> Any:
    """Tensors (also inside dicts) to NumPy arrays on the host."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, dict):
        return {k: to_numpy(v) for k, v in x.items()}
    return x


def as_action_tensor(actions: Any, device: torch.device, num_actions: int) -> Any:
    """Tensors pass through untouched (the core env checks them); NumPy arrays / lists of integers
    become int64 tensors on ``device``. Non-integer arrays (bool included) are a `TypeError`."""
    if isinstance(actions, torch.Tensor):
        return actions
    if isinstance(actions, (np.ndarray, list, tuple)):
        a = np.asarray(actions)
        if isinstance(actions, (list, tuple)) and _holds_bool(actions):  # NumPy would read True as action 1
            raise TypeError(f"actions must be integers, got a {type(actions).__name__} holding bools")
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"actions must be integers, got a {type(actions).__name__} of dtype {a.dtype}")
        if a.dtype.kind == "u" and a.size and a.max() > _INT64_MAX:  # int64 would wrap these to negatives
            bad = np.unique(a[a > _INT64_MAX])[:8].tolist()
            raise ValueError(f"actions must be in [0, {num_actions}), got values {bad}")
        # a copy: torch takes no negative strides (`np.flip`, `a[::-1]`) and warns on read-only arrays (`broadcast_to`)
        return torch.from_numpy(np.array(a, dtype=np.int64)).to(device)
    raise TypeError(f"actions must be a torch.Tensor or a NumPy array of integers, got {type(actions).__name__}")


_INT64_MAX = np.iinfo(np.int64).max


def wide_ints(x: torch.Tensor) -> torch.Tensor:
    """Integer counts as int64: the state's narrow unsigned types wrap in a user's arithmetic (``l - 5``) and
    ``mean`` refuses them; floats and int64 pass through."""
    return x.long() if not x.is_floating_point() and x.dtype != torch.int64 else x


def _holds_bool(actions: list | tuple) -> bool:
    """Whether a (nested) list holds a bool; a list is on the host already, so looking at each
    element costs no device sync (tensors and arrays are judged by their dtype)."""
    return any(isinstance(x, (bool, np.bool_)) for x in np.asarray(actions, dtype=object).flat)


class CoverageVectorEnv(VectorEnv):
    """``num_envs`` coverage environments behind the Gymnasium vector API (see module docstring).

    Args:
        num_envs: batch size ``B``.
        config: an `EnvConfig`, a mapping of its fields, or None for the defaults.
        seed, first_env_index, device, check_action_range, reset_mode: as `UAVSwarmEnv`.
        autoreset_mode: ``"same_step"`` or ``"next_step"`` (or Gymnasium's `AutoresetMode`); see the module docstring.
        output: ``"torch"`` (tensors on ``device``) or ``"numpy"``.
        render_mode: None or ``"rgb_array"``: ``render()`` returns a frame of each environment, as
            Gymnasium's vector envs do; ``render_tiled()`` the first ``render_envs`` of them in one image.
        cell_px: pixels per grid cell in rendered images.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(
        self,
        num_envs: int = 1,
        config: EnvConfig | Mapping[str, Any] | None = None,
        seed: int = 0,
        device: Any = "cpu",
        output: str = "torch",
        check_action_range: bool = True,
        reset_mode: str | None = None,
        first_env_index: int = 0,
        render_mode: str | None = None,
        cell_px: int = 4,
        render_envs: int = 16,
        autoreset_mode: str | AutoresetMode = "same_step",
    ):
        cfg = self.config = as_config(config)
        modes = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP}
        mode = autoreset_mode
        if isinstance(mode, AutoresetMode):  # Gymnasium's enum: our name for it
            mode = {v: k for k, v in modes.items()}.get(mode, mode)
        if not isinstance(mode, str) or mode not in modes:
            raise ValueError(f"autoreset_mode must be 'same_step' or 'next_step', got {autoreset_mode!r}")
        self.metadata = {**self.metadata, "autoreset_mode": modes[mode]}
        if output not in ("torch", "numpy"):
            raise ValueError(f"output must be 'torch' or 'numpy', got {output!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self._env_kwargs = dict(
            num_envs=num_envs,
            device=device,
            first_env_index=first_env_index,
            check_action_range=check_action_range,
            reset_mode=reset_mode,
            autoreset_mode=mode,
        )
        self.swarm = UAVSwarmEnv(cfg, seed=seed, **self._env_kwargs)  # checks num_envs, seed, device, ...
        self.num_envs, self.device, self.output = num_envs, self.swarm.device, output
        render_envs = check_int("render_envs", render_envs, 1)
        self.render_mode, self.cell_px, self.render_envs = render_mode, check_cell_px(cell_px), render_envs
        self.single_observation_space = observation_space(cfg)
        self.observation_space = observation_space(cfg, (num_envs,))
        self.single_action_space = spaces.MultiDiscrete(np.full(cfg.num_uavs, cfg.num_actions, dtype=np.int64))
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _out(self, x: Any) -> Any:
        return to_numpy(x) if self.output == "numpy" else x

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(
                f"options must be None or a dict such as {{'reset_mask': mask}}, got {type(options).__name__}"
            )
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; the only option is 'reset_mask'")
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise TypeError(
                    f"seed must be one int (environment i plays stream (seed, first_env_index + i)), "
                    f"got {type(seed).__name__}"
                )
            if mask is not None:
                raise ValueError("reset with a seed restarts every environment: do not pass options['reset_mask']")
            self.swarm = UAVSwarmEnv(self.config, seed=int(seed), **self._env_kwargs)
            super().reset(seed=int(seed))  # np_random and np_random_seed, as Gymnasium's envs seed them
        if mask is not None:
            if isinstance(mask, np.ndarray):
                if mask.dtype != np.bool_:  # named here: as a tensor the error would show a tensor it was not given
                    raise TypeError(
                        f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), "
                        f"got a {mask.dtype} array"
                    )
                mask = torch.from_numpy(mask.copy()).to(self.device)  # a copy: see `as_action_tensor`
            obs = self.swarm.reset(mask)  # checks dtype, shape and device
        else:
            obs = self.swarm.reset()
        return self._out(obs), {}

    def step(self, actions: Any):
        actions = as_action_tensor(actions, self.device, self.config.num_actions)
        obs, reward, terminated, truncated, info = self.swarm.step(actions)
        done = terminated | truncated
        everywhere = torch.ones_like(done)
        step_info = {
            "uav_rewards": reward,
            "coverage": info["coverage"].clone(),  # the core env's is a view of the observation: a user may write there
            "collisions": info["collisions"],
            "near_misses": info["near_misses"],
        }
        ended = {k: wide_ints(v) for k, v in info.items() if k.startswith("episode_")}
        episode = {
            "r": ended["episode_return"],
            "l": ended["episode_length"],
            "coverage": ended["episode_coverage"],
            "collisions": ended["episode_collisions"],
            "near_misses": ended["episode_near_misses"],
        }
        infos: dict[str, Any] = {}
        for key, value in step_info.items():
            infos[key], infos[f"_{key}"] = value, everywhere
        infos.update(episode=episode, _episode=done)
        if "final_obs" in info:  # same_step
            # the single env's names (its info at an episode's end), as SyncVectorEnv's final_info has them
            final_info = {**step_info, **ended}
            final_info.update({f"_{k}": done for k in list(final_info)})
            final_obs = info["final_obs"]  # the sparse mode's is `obs` itself where no episode ended
            final_obs = {k: x.clone() if x is obs[k] else x for k, x in final_obs.items()}
            infos.update(final_obs=final_obs, _final_obs=done, final_info=final_info, _final_info=done)
        return (
            self._out(obs),
            self._out(mean_return(reward)),  # summed in float64, as the single env's: the same bits whatever the order
            self._out(terminated),
            self._out(truncated),
            self._out(infos),
        )

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Gymnasium's vector contract: a frame of every environment (what `gymnasium.wrappers.vector.RecordVideo`
        and `HumanRendering` read), the state read once for all. One picture of many: `render_tiled`."""
        if self.render_mode is None:
            return None
        return tuple(render_frames(self.swarm, range(self.num_envs), self.cell_px))

    def render_tiled(self) -> np.ndarray:
        """One RGB uint8 image: the first ``render_envs`` environments side by side, whatever ``render_mode`` is."""
        return tiled_image(self.swarm, range(min(self.num_envs, self.render_envs)), cell_px=self.cell_px)

    def render_env(self, env_index: int = 0, cell_px: int | None = None) -> np.ndarray:
        """RGB uint8 image of one environment, whatever ``render_mode`` is."""
        return self.swarm.render(env_index, self.cell_px if cell_px is None else cell_px)  # 0 is an error
