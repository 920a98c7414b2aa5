"""`UAVSwarmEnv`: thousands of coverage environments stepped at once as batched torch tensors.

The rules are those of `uavsim.rules`; `uavsim.reference.ReferenceEnv` is the same task in NumPy
and environment ``i`` here plays exactly the episodes of ``ReferenceEnv(cfg, seed, env_index=i)``.

State (leading dims ``[B]`` = environments, ``[B, N]`` = environments x UAVs), all on ``device``:
    cells          [B, Hp * Wp] uint8   padded map, FREE / COVERED / BLOCKED (border = BLOCKED)
    pos            [B, N, 2]    int64   (row, col) of each UAV on the map
    t, episode     [B]          int64   steps taken in the episode; episode index (for the RNG)
    covered, free  [B]          int64   covered and free cell counts
    pool_blocked   [B, P^2]     int32   blocked / covered cells per pooled block (global state)
    pool_covered   [B, P^2]     int32
    ep_reward      [B, N]       float32 and ep_collisions, ep_near_misses [B] int64: episode sums

Resets happen inside ``step`` for environments that ended (Gymnasium's SAME_STEP autoreset). How
the fresh episodes are merged in is ``reset_mode``:
    "dense"  fresh starts are computed for every environment and merged with ``torch.where``: no
             data-dependent shapes and no host read, so it suits CUDA (and CUDA graphs);
    "sparse" only the environments that ended are regenerated (``nonzero`` + ``index_copy_``):
             less work, but reading the count is a host sync -- free on the CPU, not on a GPU.
The default is "sparse" on the CPU and "dense" elsewhere; both give identical results (tested).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.rng import MAX_KEY, below, hash32
from uavsim.rules import BLOCKED, FREE
from uavsim.state_checks import STATE_KEYS, checked_state


def canonical_device(device: Any) -> torch.device:
    """``device`` as tensors on it report theirs: ``"cuda"`` -> ``cuda:<current>``, ``"cpu:0"`` ->
    ``cpu``. A plain ``torch.device("cuda")`` compares unequal to a tensor's ``cuda:0``, so the
    env's device checks would reject its own tensors."""
    if isinstance(device, bool) or not isinstance(device, (str, torch.device, int)):  # an int: torch's CUDA index
        raise TypeError(f"device must be a string such as 'cpu', 'cuda' or 'cuda:1', a torch.device or a CUDA "
                        f"index; got {type(device).__name__} {device!r}")
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


RESET_MODES = ("sparse", "dense")


def default_reset_mode(device: torch.device) -> str:
    """The reset mode an env on ``device`` gets when none is named (module docstring)."""
    return "sparse" if torch.device(device).type == "cpu" else "dense"


def _next(episode: torch.Tensor) -> torch.Tensor:
    """The next episode index; after 2**31 episodes (the RNG's key range) the maps repeat from 0."""
    return (episode + 1) % MAX_KEY


def mean_return(ep_reward: torch.Tensor) -> torch.Tensor:
    """``[B]`` float32 mean over UAVs of ``ep_reward [B, N]``, as ``rules.mean_return``. Summed in
    float64, where the sum of a few float32 values is exact (unless they differ by more than ~2**25
    in magnitude), so the order of the additions, which differs between torch's and NumPy's
    reductions, cannot change it."""
    return (ep_reward.double().sum(1) / ep_reward.shape[1]).float()


def _as_long(x, device) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.int64, device=device)


class UAVSwarmEnv:
    """``num_envs`` coverage environments on one device. See the module docstring for the state.

    Args:
        config: the task (default ``EnvConfig()``).
        num_envs: batch size ``B``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or a ``torch.device``.
        seed: the RNG seed, in ``[0, 2**31)``.
        first_env_index: environment ``b`` of this batch is global environment
            ``first_env_index + b`` (distributed ranks use disjoint ranges).
        check_action_range: validate that actions lie in ``[0, num_actions)``; this reads a
            value back from the device (a sync per step), so trainers that sample valid actions
            turn it off. Off, a bad action goes undetected: a negative one indexes the move table
            from its end (-1 moves like the last action), a larger one raises an IndexError (a
            device-side assert on a GPU). Shape, dtype and device are always checked (free).
        reset_mode: ``"dense"``, ``"sparse"`` or ``None`` (pick by device), see module docstring.
    """

    def __init__(self, config: EnvConfig | None = None, num_envs: int = 1, device: Any = "cpu",
                 seed: int = 0, first_env_index: int = 0, check_action_range: bool = True,
                 reset_mode: str | None = None):
        self.config = cfg = config if config is not None else EnvConfig()
        if not isinstance(cfg, EnvConfig):
            raise TypeError(f"config must be an EnvConfig, got {type(cfg).__name__}")
        for name, value in (("num_envs", num_envs), ("seed", seed), ("first_env_index", first_env_index)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        num_envs, seed, first_env_index = int(num_envs), int(seed), int(first_env_index)  # NumPy ints too
        if not isinstance(check_action_range, bool):  # a string such as "no" would be truthy
            raise TypeError(f"check_action_range must be a bool, got {type(check_action_range).__name__}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not 0 <= seed < MAX_KEY:
            raise ValueError(f"seed must be in [0, 2**31), got {seed}")
        if first_env_index < 0 or first_env_index + num_envs > MAX_KEY:
            raise ValueError(f"environment indices must lie in [0, 2**31), got first_env_index={first_env_index}")
        self.device = canonical_device(device)
        if reset_mode is None:
            reset_mode = default_reset_mode(self.device)
        if reset_mode not in RESET_MODES:
            raise ValueError(f"reset_mode must be 'dense', 'sparse' or None, got {reset_mode!r}")
        self.reset_mode = reset_mode
        self.num_envs, self.seed, self.check_action_range = num_envs, seed, check_action_range
        self.num_uavs, self.num_actions = cfg.num_uavs, cfg.num_actions
        self.local_obs_dim, self.state_dim = cfg.local_obs_dim, cfg.state_dim
        self.env_index = torch.arange(first_env_index, first_env_index + num_envs, device=self.device)
        self._build_tables()
        self._state: dict[str, torch.Tensor] | None = None

    # -- constant tables -----------------------------------------------------------------------
    def _build_tables(self) -> None:
        cfg, dev, p = self.config, self.device, self.config.pad
        self._wp = wp = cfg.grid_width + 2 * p
        self._cells_padded = (cfg.grid_height + 2 * p) * wp
        flat = lambda rc: _as_long(rc[..., 0] * wp + rc[..., 1], dev)  # noqa: E731 -- offsets in padded cells
        self._moves = _as_long(rules.move_table(cfg), dev)
        self._foot = flat(rules.footprint_offsets(cfg))
        self._window = flat(rules.window_offsets(cfg))
        self._launch = _as_long(rules.launch_cells(cfg), dev)
        self._launch_order = torch.arange(cfg.launch_size**2, device=dev)
        self._obstacle_draws = torch.arange(4 * cfg.num_obstacles, device=dev)
        self._corner_signs = torch.tensor([1, -1, -1, 1], dtype=torch.int32).repeat_interleave(cfg.num_obstacles).to(dev)
        block = rules.block_of_cell(cfg).reshape(cfg.grid_height, cfg.grid_width)
        padded_block = torch.zeros(cfg.grid_height + 2 * p, wp, dtype=torch.int64)
        padded_block[p : p + cfg.grid_height, p : p + cfg.grid_width] = torch.from_numpy(block)
        self._block_of_padded = padded_block.reshape(-1).to(dev)  # border cells are never covered
        self._block_of_cell = _as_long(block.reshape(-1), dev)
        self._block_cells = torch.as_tensor(rules.cells_per_block(cfg), dtype=torch.float32, device=dev)
        self._scale = torch.tensor([cfg.grid_height - 1, cfg.grid_width - 1], dtype=torch.float32, device=dev)
        self._not_self = ~torch.eye(cfg.num_uavs, dtype=torch.bool, device=dev)
        f32 = lambda v: torch.tensor(v, dtype=torch.float32, device=dev)  # noqa: E731
        self._c_cov, self._c_time = f32(cfg.coverage_reward), f32(cfg.time_penalty)
        self._c_coll, self._c_near = f32(cfg.collision_penalty), f32(cfg.near_miss_penalty)
        self._c_target, self._c_max_steps = f32(cfg.target_coverage), f32(cfg.max_steps)
        self._stamp = torch.zeros(self.num_envs, self._cells_padded, dtype=torch.int32, device=dev)
        self._stamp_ids = torch.arange(cfg.num_uavs * len(self._foot), dtype=torch.int32, device=dev)

    # -- episode start ---------------------------------------------------------------------------
    def _fresh(self, env_index: torch.Tensor, episode: torch.Tensor) -> dict[str, torch.Tensor]:
        """First state of episode ``episode[m]`` of environment ``env_index[m]`` ([M] int64 each)."""
        cfg, p, dev = self.config, self.config.pad, self.device
        m, hgt, wid = env_index.shape[0], cfg.grid_height, cfg.grid_width
        keys = (self.seed, env_index[:, None], episode[:, None])
        d = hash32(*keys, self._obstacle_draws[None, :]).view(m, cfg.num_obstacles, 4)
        lo, span = cfg.obstacle_min_size, cfg.obstacle_max_size - cfg.obstacle_min_size + 1
        oh, ow = lo + below(d[..., 0], span), lo + below(d[..., 1], span)
        top, left = below(d[..., 2], hgt - oh + 1), below(d[..., 3], wid - ow + 1)
        # Rasterise all rectangles at once: +-1 at their corners, then a 2-D prefix sum.
        corners = torch.cat([top * (wid + 1) + left, top * (wid + 1) + left + ow,
                             (top + oh) * (wid + 1) + left, (top + oh) * (wid + 1) + left + ow], dim=1)
        diff = torch.zeros(m, (hgt + 1) * (wid + 1), dtype=torch.int32, device=dev)
        diff.scatter_add_(1, corners, self._corner_signs.expand(m, -1))
        blocked = diff.view(m, hgt + 1, wid + 1).cumsum(2, dtype=torch.int32).cumsum(1, dtype=torch.int32)
        blocked = blocked[:, :hgt, :wid] > 0
        blocked[:, : cfg.launch_size, : cfg.launch_size] = False

        cells = torch.full((m, hgt + 2 * p, self._wp), BLOCKED, dtype=torch.uint8, device=dev)
        cells[:, p : p + hgt, p : p + wid] = blocked.to(torch.uint8) * BLOCKED
        cells = cells.view(m, self._cells_padded)
        blocked_flat = blocked.reshape(m, hgt * wid).to(torch.int32)
        pool_blocked = torch.zeros(m, cfg.state_pool**2, dtype=torch.int32, device=dev)
        pool_blocked.index_add_(1, self._block_of_cell, blocked_flat)

        num_launch = cfg.launch_size**2
        launch_keys = hash32(*keys, (4 * cfg.num_obstacles + self._launch_order)[None, :])
        order = torch.argsort(launch_keys * num_launch + self._launch_order, dim=1)[:, : cfg.num_uavs]
        pos = self._launch[order]  # [M, N, 2]

        pool_covered = torch.zeros_like(pool_blocked)
        covered = self._cover(cells, pos, pool_covered)
        zeros = torch.zeros(m, dtype=torch.int64, device=dev)
        return {
            "cells": cells, "pos": pos, "t": zeros, "episode": episode, "covered": covered,
            "free": hgt * wid - blocked_flat.sum(1, dtype=torch.int64),
            "pool_blocked": pool_blocked, "pool_covered": pool_covered,
            "ep_reward": torch.zeros(m, cfg.num_uavs, dtype=torch.float32, device=dev),
            "ep_collisions": zeros, "ep_near_misses": zeros,
        }

    # -- dynamics ------------------------------------------------------------------------------
    def _flat(self, pos: torch.Tensor) -> torch.Tensor:
        p = self.config.pad
        return (pos[..., 0] + p) * self._wp + (pos[..., 1] + p)

    def _cover(self, cells: torch.Tensor, pos: torch.Tensor, pool_covered: torch.Tensor) -> torch.Tensor:
        """Cover every UAV's footprint in place; return the number of newly covered cells [M]."""
        m = pos.shape[0]
        idx = (self._flat(pos)[:, :, None] + self._foot).view(m, pos.shape[1] * self._foot.shape[0])
        before = cells.gather(1, idx)
        fresh = before == FREE
        # Footprints overlap: count a cell once, for the one footprint slot that wins the stamp.
        stamp, ids = self._stamp[:m], self._stamp_ids.expand(m, -1)
        stamp.scatter_(1, idx, ids)
        newly = fresh & (stamp.gather(1, idx) == ids)
        cells.scatter_(1, idx, before + fresh.to(torch.uint8))  # FREE -> COVERED, others unchanged
        pool_covered.scatter_add_(1, self._block_of_padded[idx], newly.to(torch.int32))
        return newly.sum(1)

    def _observe(self, s: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.config
        cells, pos = s["cells"], s["pos"]
        m, n, r, win2 = pos.shape[0], cfg.num_uavs, cfg.obs_radius, cfg.window**2
        idx = (self._flat(pos)[:, :, None] + self._window).view(m, n * win2)
        seen = cells.gather(1, idx).view(m, n, win2)
        rows, cols = pos[..., 0], pos[..., 1]
        d_row = rows[:, None, :] - rows[:, :, None]  # [M, observer, other]
        d_col = cols[:, None, :] - cols[:, :, None]
        visible = (d_row.abs() <= r) & (d_col.abs() <= r) & self._not_self
        slot = ((d_row + r) * cfg.window + d_col + r).clamp_(0, win2 - 1)
        # Each channel is written straight into its slice of one buffer: no torch.cat of big temporaries.
        local = torch.empty(m, n, self.local_obs_dim, dtype=torch.float32, device=self.device)
        local[..., :win2] = seen >> 1  # BLOCKED (2) -> 1, FREE (0) and COVERED (1) -> 0
        local[..., win2 : 2 * win2] = seen & 1  # COVERED (1) -> 1, the others -> 0
        others = local[..., 2 * win2 : 3 * win2]
        others.zero_()
        others.scatter_add_(2, slot, visible.to(torch.float32))
        positions = pos.to(torch.float32) / self._scale  # [M, N, 2]
        time = s["t"].to(torch.float32) / self._c_max_steps  # [M]
        local[..., -3:-1] = positions
        local[..., -1] = time[:, None]
        coverage = s["covered"].to(torch.float32) / s["free"].to(torch.float32)
        state = torch.cat([s["pool_blocked"].to(torch.float32) / self._block_cells,
                           s["pool_covered"].to(torch.float32) / self._block_cells,
                           positions.view(m, 2 * n), time[:, None], coverage[:, None]], dim=1)
        return {"local": local, "state": state}

    # -- public API ----------------------------------------------------------------------------
    def reset(self, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Start new episodes everywhere (``mask=None``) or where the ``[B]`` bool ``mask`` is True.

        Returns the observation of every environment: ``{"local": [B, N, L], "state": [B, S]}``.
        """
        if mask is None or self._state is None:
            if mask is not None:
                raise RuntimeError("the first reset must reset every environment (mask=None)")
            episode = torch.zeros_like(self.env_index) if self._state is None else _next(self._state["episode"])
            self._state = self._fresh(self.env_index, episode)
        else:
            self._check_mask(mask)
            self._restart(mask)
        return self._observe(self._state)

    def step(self, actions: torch.Tensor):
        """Advance every environment one step.

        Args:
            actions: ``[B, N]`` int64 on the env's device, values in ``[0, num_actions)``.
        Returns:
            ``obs`` (after any autoreset), ``reward [B, N] float32``, ``terminated [B] bool``,
            ``truncated [B] bool``, ``info``: ``coverage [B]`` (after the step, before reset),
            ``collisions``/``near_misses [B, N] bool``, ``final_obs`` (the observation before
            reset, equal to ``obs`` where the episode goes on; when no episode ended it may be the
            very same tensors as ``obs``, so copy before writing into either) and, valid where the
            episode ended,
            ``episode_return [B]`` (mean over UAVs), ``episode_length``, ``episode_coverage``,
            ``episode_collisions``, ``episode_near_misses``.
        """
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        self._check_actions(actions)
        s = dict(self._state)
        target = s["pos"] + self._moves[actions]
        blocked = s["cells"].gather(1, self._flat(target)) == BLOCKED  # the border is blocked too
        collided = blocked & (actions != 0)
        pos = torch.where(blocked[..., None], s["pos"], target)
        flat = self._flat(pos)
        near = ((flat[:, :, None] == flat[:, None, :]) & self._not_self).any(2)
        newly = self._cover(s["cells"], pos, s["pool_covered"])  # in place: the grid is never copied
        s.update(pos=pos, covered=s["covered"] + newly, t=s["t"] + 1)

        free = s["free"].to(torch.float32)
        coverage = s["covered"].to(torch.float32) / free
        team = self._c_cov * (newly.to(torch.float32) / free) - self._c_time
        reward = team[:, None] - self._c_coll * collided.to(torch.float32) - self._c_near * near.to(torch.float32)
        terminated = coverage >= self._c_target
        truncated = (s["t"] >= self.config.max_steps) & ~terminated
        s["ep_reward"] = s["ep_reward"] + reward
        s["ep_collisions"] = s["ep_collisions"] + collided.sum(1)
        s["ep_near_misses"] = s["ep_near_misses"] + near.sum(1)
        info = {
            "coverage": coverage, "collisions": collided, "near_misses": near,
            "final_obs": self._observe(s),
            # Copies: the reset below overwrites the state in place.
            "episode_return": mean_return(s["ep_reward"]), "episode_length": s["t"].clone(),
            "episode_coverage": coverage, "episode_collisions": s["ep_collisions"].clone(),
            "episode_near_misses": s["ep_near_misses"].clone(),
        }
        self._state = s
        done = terminated | truncated
        obs = self._restart(done, info["final_obs"])
        return obs, reward, terminated, truncated, info

    def _restart(self, mask: torch.Tensor, obs: dict[str, torch.Tensor] | None = None):
        """Begin the next episode where ``mask``; return observations of all envs if ``obs`` given."""
        s = self._state
        if self.reset_mode == "dense":
            fresh = self._fresh(self.env_index, _next(s["episode"]))
            self._state = {k: torch.where(mask.view(-1, *([1] * (v.dim() - 1))), fresh[k], v) for k, v in s.items()}
            if obs is None:
                return None
            new_obs = self._observe(fresh)
            return {k: torch.where(mask.view(-1, *([1] * (v.dim() - 1))), new_obs[k], v) for k, v in obs.items()}
        ids = mask.nonzero().squeeze(1)  # host sync on a GPU: that is why CUDA defaults to "dense"
        if ids.numel() == 0:  # the shape is known on the host already: skip all the copies
            return obs
        fresh = self._fresh(self.env_index[ids], _next(s["episode"][ids]))
        for k, v in s.items():
            v.index_copy_(0, ids, fresh[k])
        if obs is None:
            return None
        new_obs = self._observe(fresh)
        return {k: v.index_copy(0, ids, new_obs[k]) for k, v in obs.items()}  # a copy: final_obs stays intact

    # -- input checks ----------------------------------------------------------------------------
    def _check_actions(self, actions: Any) -> None:
        expected = (self.num_envs, self.num_uavs)
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor of shape {expected}, got {type(actions).__name__}")
        if actions.dtype != torch.int64:
            raise TypeError(f"actions must have dtype torch.int64, got {actions.dtype}")
        if tuple(actions.shape) != expected:
            raise ValueError(f"actions must have shape {expected} (num_envs, num_uavs), got {tuple(actions.shape)}")
        if actions.device != self.device:
            raise ValueError(f"actions must be on {self.device}, got {actions.device}")
        if self.check_action_range and bool(((actions < 0) | (actions >= self.num_actions)).any()):
            bad = actions[(actions < 0) | (actions >= self.num_actions)]
            raise ValueError(f"actions must be in [0, {self.num_actions}), got values {bad.unique()[:8].tolist()}")

    def _check_mask(self, mask: Any) -> None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a torch.bool tensor of shape ({self.num_envs},), got {mask!r:.80}")
        if tuple(mask.shape) != (self.num_envs,):
            raise ValueError(f"mask must have shape ({self.num_envs},), got {tuple(mask.shape)}")
        if mask.device != self.device:
            raise ValueError(f"mask must be on {self.device}, got {mask.device}")

    # -- checkpointing and rendering ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (tensors are copies on the env's device)."""
        if self._state is None:
            raise RuntimeError("call reset() before state_dict()")
        return {"config": self.config.to_dict(), "seed": self.seed, "num_envs": self.num_envs,
                "first_env_index": int(self.env_index[0]), "state": {k: v.clone() for k, v in self._state.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Continue from `state_dict()`'s output; anything else is a `TypeError` / `ValueError`
        naming what does not fit (this env's identity, a tensor's dtype or shape, values out of
        range)."""
        state = checked_state(self, d)
        self._state = {k: state[k].to(self.device).clone() for k in STATE_KEYS}

    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation of every environment (no step)."""
        if self._state is None:
            raise RuntimeError("call reset() before observe()")
        return self._observe(self._state)

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The live state tensors (read-only by convention: for policies, rendering and tests)."""
        if self._state is None:
            raise RuntimeError("call reset() before reading the state")
        return self._state

    def render(self, env_index: int = 0, cell_px: int = 8) -> Any:
        """RGB uint8 ``[H * cell_px, W * cell_px, 3]`` NumPy image of one environment."""
        from uavsim.render import render_env  # keeps the step module free of drawing code

        return render_env(self, env_index, cell_px)
