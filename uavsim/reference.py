"""`ReferenceEnv`: one coverage environment in plain NumPy, the rules of `uavsim.rules` as written.

This is the honest baseline: NumPy inside the environment and a loop over UAVs, the way the
team's original ``CTDEMultiUAVEnv`` stepped. The batched torch env must match it bit for bit
(tests/uavsim/test_equivalence.py); the benchmarks measure speedups against it. It never imports
torch, so it also serves the PettingZoo adapter and gymnasium's process-parallel vector env.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.maps import load_map_set
from uavsim.rng import MAX_KEY, below, hash32


def check_key(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) < MAX_KEY:
        raise ValueError(f"{name} must be in [0, 2**31), got {value}")
    return int(value)


class ReferenceEnv:
    """A single environment. ``step`` does not reset: the caller calls ``reset`` when done.

    ``reset() -> {"local": [N, local_obs_dim], "state": [state_dim]}`` (float32) and
    ``step(actions[N]) -> (obs, reward [N] float32, terminated bool, truncated bool, info)``.

    Args:
        config: the task (default ``EnvConfig()``).
        seed: the RNG seed, in ``[0, 2**31)``.
        env_index: which environment of the seed's stream (the batched env's global index).
    """

    def __init__(self, config: EnvConfig | None = None, seed: int = 0, env_index: int = 0):
        self.config = cfg = config if config is not None else EnvConfig()
        if not isinstance(cfg, EnvConfig):
            raise TypeError(f"config must be an EnvConfig, got {type(cfg).__name__}")
        self.seed = check_key("seed", seed)
        self.env_index = check_key("env_index", env_index)
        self.num_uavs, self.num_actions = cfg.num_uavs, cfg.num_actions
        self.local_obs_dim, self.state_dim = cfg.local_obs_dim, cfg.state_dim
        self.episode = -1  # index of the current episode; the first reset makes it 0
        self._moves = rules.move_table(cfg)
        radius = cfg.sensor_radius
        self._disk = np.zeros((2 * radius + 1, 2 * radius + 1), dtype=bool)  # the sensor footprint
        foot = rules.footprint_offsets(cfg) + radius
        self._disk[foot[:, 0], foot[:, 1]] = True
        self._block = rules.block_of_cell(cfg)
        self._block_cells = rules.cells_per_block(cfg).astype(np.float32)
        self._scale = np.array([cfg.grid_height - 1, cfg.grid_width - 1], dtype=np.float32)
        self._maps = load_map_set(cfg.maps, cfg).blocked if cfg.maps is not None else None  # [M, H, W] bool

    # -- episode start -----------------------------------------------------------------------
    def _draws(self, first: int, count: int) -> np.ndarray:
        draw = np.arange(first, first + count, dtype=np.uint64)
        return hash32(np.uint64(self.seed), np.uint64(self.env_index), np.uint64(self.episode), draw)

    def reset(self) -> dict[str, np.ndarray]:
        """Start the next episode; returns its first observation."""
        cfg, p = self.config, self.config.pad
        self.episode = (self.episode + 1) % MAX_KEY  # after 2**31 episodes the maps repeat, as in the batched env
        grid = self._random_obstacles() if self._maps is None else self._map_of_set()

        # Padded grids: off-map cells are blocked, so windows and footprints never leave the array.
        self.blocked = np.ones((cfg.grid_height + 2 * p, cfg.grid_width + 2 * p), dtype=bool)
        self.blocked[p:-p, p:-p] = grid
        self.covered = np.zeros_like(self.blocked)
        self.free_cells = int((~grid).sum())

        num_launch = cfg.launch_size**2
        keys = self._draws(rules.launch_draw(cfg, 0), num_launch).astype(np.int64)
        keys = keys * num_launch + np.arange(num_launch)
        order = np.argsort(keys, kind="stable")[: cfg.num_uavs]
        self.pos = rules.launch_cells(cfg)[order]  # [N, 2] int64 (row, col)

        for i in range(cfg.num_uavs):
            self._cover(i)
        self.memory = np.zeros((cfg.num_uavs, *self.blocked.shape), dtype=np.uint8)  # rules: "Onboard memory"
        self._sense_and_share()
        self.t = 0
        self.episode_reward = np.zeros(cfg.num_uavs, dtype=np.float32)
        self.episode_collisions = 0
        self.episode_near_misses = 0
        return self._observe()

    def _random_obstacles(self) -> np.ndarray:
        cfg, lo, hi = self.config, self.config.obstacle_min_size, self.config.obstacle_max_size
        grid = np.zeros((cfg.grid_height, cfg.grid_width), dtype=bool)
        for k in range(cfg.num_obstacles):
            d = self._draws(rules.obstacle_draw(k), 4).astype(np.int64)
            h = lo + int(below(d[0], hi - lo + 1))
            w = lo + int(below(d[1], hi - lo + 1))
            top = int(below(d[2], cfg.grid_height - h + 1))
            left = int(below(d[3], cfg.grid_width - w + 1))
            grid[top : top + h, left : left + w] = True
        lo, hi = cfg.wall_min_length, cfg.wall_max_length
        for k in range(cfg.num_walls):
            d = self._draws(rules.wall_draw(cfg, k), 4).astype(np.int64)
            length = lo + int(below(d[1], hi - lo + 1))
            h, w = (length, 1) if int(below(d[0], 2)) == 1 else (1, length)
            top = int(below(d[2], cfg.grid_height - h + 1))
            left = int(below(d[3], cfg.grid_width - w + 1))
            grid[top : top + h, left : left + w] = True
        grid[: cfg.launch_size, : cfg.launch_size] = False
        return grid

    def _map_of_set(self) -> np.ndarray:
        """The map set's map for this episode: map ``below(draw MAP_DRAW, M)``, as it is."""
        d = self._draws(rules.MAP_DRAW, 1)[0]
        return self._maps[int(below(d, np.uint64(len(self._maps))))].copy()

    # -- dynamics ------------------------------------------------------------------------------
    def _cover(self, i: int) -> None:
        p, s = self.config.pad, self.config.sensor_radius
        row, col = self.pos[i] + p
        area = (slice(row - s, row + s + 1), slice(col - s, col + s + 1))
        self.covered[area] |= self._disk & ~self.blocked[area]

    def _sense_and_share(self) -> None:
        """Each UAV writes its window into its memory (code 4 + covered + 3 * blocked), then (comm_radius
        > 0) takes the max of the memories of the UAVs within Chebyshev distance comm_radius (itself included)."""
        cfg, p, r = self.config, self.config.pad, self.config.obs_radius
        if cfg.comm_radius is None:
            return
        for i in range(cfg.num_uavs):
            row, col = self.pos[i] + p
            area = (slice(row - r, row + r + 1), slice(col - r, col + r + 1))
            self.memory[i][area] = 4 + self.covered[area] + 3 * self.blocked[area]
        if cfg.comm_radius == 0:  # own memory only, even for UAVs on the same cell
            return
        sensed = self.memory.copy()  # one hop: everyone merges what was sensed this step
        for i in range(cfg.num_uavs):
            in_range = np.abs(self.pos - self.pos[i]).max(axis=1) <= cfg.comm_radius
            self.memory[i] = sensed[in_range].max(axis=0)

    def _heading(self, flagged: np.ndarray, row: int, col: int) -> np.ndarray:
        """``[3]`` float32 offset (of ``(H - 1, W - 1)``) and squared distance (of the diagonal) from ``(row, col)``
        to the nearest flagged block's centre (the first on ties); zeros when none is flagged."""
        cfg = self.config
        h, w = cfg.grid_height, cfg.grid_width
        if not flagged.any():
            return np.zeros(3, dtype=np.float32)
        rows, cols = np.divmod(np.arange(h * w), w)
        centre = np.stack(
            [np.bincount(self._block, weights=a, minlength=len(flagged)) for a in (rows, cols)], -1
        ) / self._block_cells[:, None].astype(np.float64)  # [P^2, 2]: the mean cell of each block
        twice = np.rint(2 * (centre - np.array([row, col]))).astype(np.int64)
        sq = np.where(flagged, (twice**2).sum(1), np.iinfo(np.int64).max)
        b = int(np.argmin(sq))
        off = centre[b].astype(np.float32) - np.array([row, col], dtype=np.float32)
        scale = np.maximum(np.array([h - 1, w - 1], dtype=np.float32), np.float32(1))
        per = 0.5 / (math.hypot(h - 1, w - 1) or 1.0)
        distance = np.float32(sq[b]) * np.float32(per * per)  # squared (uavsim.heading: why)
        return np.append(off / scale, distance).astype(np.float32)

    def _memory_square(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """UAV ``i``'s ``(blocked, goal)`` ``[2R + 1, 2R + 1]`` bool over its memory around it
        (``path_radius`` R; rules, "Window paths"): off the map blocked; on it blocked where known
        blocked (7), a goal where unknown (0) or last seen free (4)."""
        cfg, r = self.config, self.config.path_radius
        side = 2 * r + 1
        blocked, goal = np.ones((side, side), dtype=bool), np.zeros((side, side), dtype=bool)
        for a in range(side):
            for b in range(side):
                row, col = self.pos[i, 0] + a - r, self.pos[i, 1] + b - r
                if 0 <= row < cfg.grid_height and 0 <= col < cfg.grid_width:
                    code = self.memory[i][row + cfg.pad, col + cfg.pad]
                    blocked[a, b], goal[a, b] = code == 7, code in (0, 4)
        return blocked, goal

    def _check_actions(self, actions: Any) -> np.ndarray:
        a = np.asarray(actions)
        if a.shape != (self.num_uavs,):
            raise ValueError(f"actions must have shape ({self.num_uavs},), got {a.shape}")
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"actions must be integers, got dtype {a.dtype}")
        if not isinstance(actions, np.ndarray) and any(isinstance(x, (bool, np.bool_)) for x in actions):
            # beside integers, NumPy would quietly read True as action 1
            raise TypeError(f"actions must be integers, got a {type(actions).__name__} holding bools")
        if a.min() < 0 or a.max() >= self.num_actions:
            raise ValueError(f"actions must be in [0, {self.num_actions}), got values {a.min()}..{a.max()}")
        return a.astype(np.int64)

    def step(self, actions: Any):
        """Advance one step with ``actions [N]`` ints (see the class docstring); the ``info`` keys are
        the batched env's, less ``final_obs``. Raises RuntimeError before ``reset()``, TypeError or
        ValueError for bad actions."""
        if self.episode < 0:
            raise RuntimeError("call reset() before step()")
        cfg, p = self.config, self.config.pad
        a = self._check_actions(actions)
        collided = np.zeros(cfg.num_uavs, dtype=bool)
        for i in range(cfg.num_uavs):
            target = self.pos[i] + self._moves[a[i]]
            if self.blocked[target[0] + p, target[1] + p]:
                collided[i] = a[i] != 0
            else:
                self.pos[i] = target
        same_cell = (self.pos[:, None, :] == self.pos[None, :, :]).all(axis=2)
        near = same_cell.sum(axis=1) > 1  # every UAV shares its cell with itself

        before = int(self.covered.sum())
        for i in range(cfg.num_uavs):
            self._cover(i)
        newly = int(self.covered.sum()) - before
        self._sense_and_share()
        self.t += 1

        free = np.float32(self.free_cells)
        coverage = np.float32(self.covered.sum()) / free
        team = np.float32(cfg.coverage_reward) * (np.float32(newly) / free) - np.float32(cfg.time_penalty)
        reward = (
            team
            - np.float32(cfg.collision_penalty) * collided.astype(np.float32)
            - np.float32(cfg.near_miss_penalty) * near.astype(np.float32)
        )
        terminated = bool(coverage >= np.float32(cfg.target_coverage))
        truncated = self.t >= cfg.max_steps and not terminated

        self.episode_reward += reward
        self.episode_collisions += int(collided.sum())
        self.episode_near_misses += int(near.sum())
        info = {
            "coverage": coverage,
            "collisions": collided,
            "near_misses": near,
            "episode_return": rules.mean_return(self.episode_reward),
            "episode_length": self.t,
            "episode_coverage": coverage,
            "episode_collisions": self.episode_collisions,
            "episode_near_misses": self.episode_near_misses,
        }
        return self._observe(), reward, terminated, truncated, info

    # -- observations --------------------------------------------------------------------------
    def _observe(self) -> dict[str, np.ndarray]:
        cfg, p, r = self.config, self.config.pad, self.config.obs_radius
        n, win = cfg.num_uavs, cfg.window
        local = np.zeros((n, cfg.local_obs_dim), dtype=np.float32)
        rel = self.pos[None, :, :] - self.pos[:, None, :]  # [observer, other, 2]
        visible = (np.abs(rel) <= r).all(axis=2) & ~np.eye(n, dtype=bool)
        for i in range(n):
            row, col = self.pos[i] + p
            area = (slice(row - r, row + r + 1), slice(col - r, col + r + 1))
            local[i, : win * win] = self.blocked[area].ravel()
            local[i, win * win : 2 * win * win] = self.covered[area].ravel()
            others = np.zeros((win, win), dtype=np.float32)
            np.add.at(others, (rel[i, visible[i], 0] + r, rel[i, visible[i], 1] + r), 1)
            local[i, 2 * win * win : 3 * win * win] = others.ravel()
        positions = self.pos.astype(np.float32) / self._scale  # [N, 2]
        time = np.float32(self.t) / np.float32(cfg.max_steps)
        scalars = 3 * win * win  # row, col, time; then the pooled memory
        local[:, scalars : scalars + 2] = positions
        local[:, scalars + 2] = time

        interior = (slice(p, p + cfg.grid_height), slice(p, p + cfg.grid_width))
        pools = cfg.state_pool**2
        blocked = np.bincount(self._block, weights=self.blocked[interior].ravel(), minlength=pools)
        covered = np.bincount(self._block, weights=self.covered[interior].ravel(), minlength=pools)
        if cfg.comm_radius is not None:  # per UAV: known blocked (code 7), then known covered (5), per block
            for i in range(n):
                known = [
                    np.bincount(self._block, weights=self.memory[i][interior].ravel() == code, minlength=pools)
                    for code in (7, 5)
                ]
                for k in range(2):
                    local[i, scalars + 3 + k * pools : scalars + 3 + (k + 1) * pools] = (
                        known[k].astype(np.float32) / self._block_cells
                    )
                # then the heading to the nearest block it does not know to be all blocked or covered
                heading = scalars + 3 + 2 * pools
                local[i, heading : heading + 3] = self._heading(known[0] + known[1] < self._block_cells, *self.pos[i])
        if cfg.window_paths:  # then the moves toward the nearest uncovered free cell of the window
            for i in range(n):
                if cfg.path_radius:  # or of the memory near the UAV
                    blocked_near, goal = self._memory_square(i)
                else:
                    row, col = self.pos[i] + p
                    area = (slice(row - r, row + r + 1), slice(col - r, col + r + 1))
                    blocked_near, goal = self.blocked[area], ~self.covered[area] & ~self.blocked[area]
                local[i, cfg.local_obs_dim - cfg.paths_obs_dim :] = window_paths_reference(cfg, blocked_near, goal)
        coverage = np.float32(self.covered.sum()) / np.float32(self.free_cells)
        state = np.concatenate(
            [
                blocked.astype(np.float32) / self._block_cells,
                covered.astype(np.float32) / self._block_cells,
                positions.ravel(),
                np.array([time, coverage], dtype=np.float32),
            ]
        )
        return {"local": local, "state": state}


def window_paths_reference(cfg: EnvConfig, blocked: np.ndarray, uncovered: np.ndarray) -> np.ndarray:
    """One UAV's ``[moves + 1]`` float32 values from its ``[win, win]`` bool windows (the squares
    of ``path_radius`` where that is set), by a breadth-first search (the plain statement of
    `uavsim.window_paths.WindowPaths`)."""
    centre, rounds = rules.path_search_radius(cfg), rules.window_path_rounds(cfg)
    w = 2 * centre + 1
    far = rounds + 1
    dist = np.full((w, w), far, dtype=np.int64)
    frontier = list(zip(*np.nonzero(uncovered & ~blocked)))
    for r, c in frontier:
        dist[r, c] = 0
    moves = rules.move_table(cfg)[1:]
    for d in range(1, rounds + 1):
        nxt = []
        for r, c in frontier:
            for dr, dc in moves:
                rr, cc = r + dr, c + dc
                if 0 <= rr < w and 0 <= cc < w and not blocked[rr, cc] and dist[rr, cc] > d:
                    dist[rr, cc] = d
                    nxt.append((rr, cc))
        frontier = nxt
    here = dist[centre, centre]
    closer = [np.float32(dist[centre + dr, centre + dc] < here) for dr, dc in moves]
    return np.array([*closer, np.float32(here) / np.float32(far)], dtype=np.float32)
