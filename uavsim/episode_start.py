"""Episode starts for the batched env: the first state of episodes, built straight into state records,
and a lower bound on how soon an episode can end (what lets the env prepare starts ahead).

`start_episodes` writes the start of episode ``episode[m]`` of environment ``m`` (its map, random
rectangles or one of a map set's held on the device; launch order, the launch footprint, zeroed
counters: `uavsim.rules`, "Episode start") into the record views ``v`` of ``M`` environments, with
no data-dependent shape and no host read.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.dynamics import Layout, cover, edge_sets, into
from uavsim.maps import load_map_set
from uavsim.memory import clear as clear_memory
from uavsim.memory import sense_and_share
from uavsim.rng import draw_hash, episode_key, salted_draw


def min_episode_length(cfg: EnvConfig, fewest_free: int | None = None) -> int:
    """See `episode_bounds`: the fewest steps any episode of ``cfg`` takes (>= 1)."""
    return episode_bounds(cfg, fewest_free)[0]


def launch_can_end(cfg: EnvConfig, fewest_free: int | None = None) -> bool:
    """Whether the launch footprints alone can reach the target coverage on some map (`episode_bounds`)."""
    return episode_bounds(cfg, fewest_free)[1]


@functools.lru_cache(maxsize=64)
def episode_bounds(cfg: EnvConfig, fewest_free: int | None = None) -> tuple[int, bool]:
    """``(a length no episode can be shorter than (>= 1), whether the launch can already reach the
    target)``, whatever the map and actions.

    An episode ends by truncation after ``max_steps`` steps, or when ``covered >= target * free``
    (float32). The fewest covered cells that can end one, ``c_min``, is that of the map with the
    fewest free cells: ``fewest_free`` for a map set (`StartTables.fewest_free`); for random maps
    (None), every obstacle and wall of the largest size, none overlapping another or the launch area.
    After ``t`` steps a UAV is at most ``t`` moves from the launch area, so the covered
    cells lie within the footprint of such cells: at most ``reach(t)`` of them; and each step
    covers at most ``num_uavs x`` (the most footprint cells one move brings in) new cells on top
    of the launch footprints. The bound is the first ``t`` at which both allow ``c_min``.
    """
    h, w, ls = cfg.grid_height, cfg.grid_width, cfg.launch_size
    most_blocked = cfg.num_obstacles * cfg.obstacle_max_size**2 + cfg.num_walls * cfg.wall_max_length
    free_min = h * w - min(most_blocked, h * w - ls * ls)
    if fewest_free is not None:  # a map set's maps are known
        free_min = fewest_free
    target = float(np.float32(cfg.target_coverage))
    c_min = max(1, math.ceil(target * free_min * (1 - 2.0**-22)))  # float32 coverage rounds by < 2**-23
    dr = np.maximum(0, np.arange(h) - (ls - 1))[:, None]  # moves from the launch square, obstacles ignored
    dc = np.maximum(0, np.arange(w) - (ls - 1))[None, :]
    dist = (dr + dc) if cfg.moves == 4 else np.maximum(dr, dc)
    reach = np.full((h, w), np.iinfo(np.int64).max, dtype=np.int64)  # steps before a cell can be covered
    for oy, ox in rules.footprint_offsets(cfg):  # cell (i, j) is covered from (i - oy, j - ox)
        if abs(oy) >= h or abs(ox) >= w:  # a sensor wider than a side: this offset covers no cell
            continue
        src = dist[max(0, -oy) : h - max(0, oy), max(0, -ox) : w - max(0, ox)]
        dst = reach[max(0, oy) : h - max(0, -oy), max(0, ox) : w - max(0, -ox)]
        np.minimum(dst, src, out=dst)
    by_reach = np.sort(reach.reshape(-1))
    t_reach = int(by_reach[c_min - 1])
    per_step = cfg.num_uavs * max(len(e) for e in edge_sets(cfg))
    launch = int((reach == 0).sum())  # cells the launch footprints can cover
    t_rate = math.ceil(max(0, c_min - launch) / max(1, per_step))
    return max(1, min(cfg.max_steps, max(t_reach, t_rate))), launch >= c_min


class StartTables:
    """The constant tables `start_episodes` needs, on the env's device; with a map set
    (``EnvConfig.maps``), the set as ``maps [M, H, W]`` (1: obstacle) and its ``fewest_free`` cells."""

    def __init__(self, lay: Layout):
        cfg, dev = lay.cfg, lay.device
        k, h, w = cfg.num_obstacles + cfg.num_walls, cfg.grid_height, cfg.grid_width
        self.maps, self.fewest_free = None, None
        if cfg.maps is not None:  # read and checked once, here; the step never touches the files
            map_set = load_map_set(cfg.maps, cfg)
            self.maps = torch.as_tensor(map_set.blocked).to(lay.record.fields["pools"].dtype).to(dev)
            self.fewest_free = int(map_set.free_cells.min())
        self.launch_first = rules.launch_draw(cfg, 0)
        self.num_draws = self.launch_first + cfg.launch_size**2
        self.draws = salted_draw(torch.arange(self.num_draws, device=dev))
        self.size_span = cfg.obstacle_max_size - cfg.obstacle_min_size + 1
        self.wall_span = cfg.wall_max_length - cfg.wall_min_length + 1
        self.room = torch.tensor([h + 1, w + 1], device=dev)  # top row < H - h + 1, left col < W - w + 1
        self.raster_strides = torch.tensor([w + 1, 1], device=dev)
        # +1 at a rectangle's top-left and bottom-right corners, -1 at the other two: prefix sums raster it
        self.corner_signs = torch.tensor([1, -1, -1, 1], dtype=self.raster_dtype(cfg), device=dev).repeat(k)
        outside = torch.ones(h, w, dtype=torch.bool)
        outside[: cfg.launch_size, : cfg.launch_size] = False  # the launch area is cleared of obstacles
        self.outside_launch = outside.to(dev)
        self.hw = torch.tensor(h * w, dtype=lay.count_dtype, device=dev)
        self.uavs = torch.ones(cfg.num_uavs, dtype=lay.grid_dtype, device=dev)  # one more UAV on each launch cell

    @staticmethod
    def raster_dtype(cfg: EnvConfig) -> torch.dtype:
        """Prefix sums of the corner marks count overlapping rectangles: at most ``num_obstacles + num_walls``."""
        for dtype in (torch.int8, torch.int16, torch.int32):
            if cfg.num_obstacles + cfg.num_walls <= torch.iinfo(dtype).max:
                return dtype
        return torch.int64


def start_episodes(
    lay: Layout,
    tab: StartTables,
    buf: torch.Tensor,
    env_key: torch.Tensor,
    episode: torch.Tensor,
    first: torch.Tensor | None = None,
) -> None:
    """Write the first state of episodes into state records, in place.

    Args:
        lay: the layout.
        tab: its `StartTables`.
        buf: ``[M, record bytes]`` uint8 state records, overwritten.
        env_key: ``[M]`` the environments' keys (`uavsim.rng.env_key`).
        episode: ``[M]`` int64 episode indices.
        first: `cover`'s scratch for ``M x num_uavs x footprint`` cells (allocated when None).
    """
    cfg, v = lay.cfg, lay.record.views(buf)
    m, h, w = episode.shape[0], cfg.grid_height, cfg.grid_width
    d = draw_hash(episode_key(env_key, episode)[:, None], tab.draws)  # [M, draws] in [0, 2**32)
    if tab.maps is None:
        blocked = random_obstacles(lay, tab, d, v["pools"].dtype)
    else:  # map below(draw MAP_DRAW, number of maps) of the set: one gather
        blocked = tab.maps.index_select(0, (d[:, rules.MAP_DRAW] * tab.maps.shape[0]) >> 32)

    grid = v["grid"]
    grid.fill_(lay.blocked_value)
    # in the grid's dtype: from 64 UAVs the grid is int16 and BLOCKED is 3 << 13, which a product in the pools'
    # uint8 wrapped to 0 (every obstacle lost); up to 63 both are uint8 and this is no extra op
    into(lay.map_view(grid), torch.mul, blocked.to(grid.dtype), lay.blocked_value)
    into(v["free"], torch.sub, tab.hw, blocked.view(m, h * w).sum(1))
    if "reward_row" in v:
        v["reward_row"].copy_(v["free"])
    v["max_steps"].fill_(cfg.max_steps)
    lay.record.span(buf, "ep_reward", "ep_counts").zero_()  # t too; `covered` is counted below
    pools = v["pools"]
    pools.zero_()
    pools[:, 0].index_add_(1, lay.block_of_cell, blocked.view(m, h * w))

    # Launch cell j's key is hash * L + j: a stable sort of the hashes orders them alike.
    order = d[:, tab.launch_first :].argsort(dim=1, stable=True)[:, : cfg.num_uavs]
    cell = v["cell"]
    into(cell, torch.gather, lay.launch_cell.expand(m, -1), 1, order)
    grid.scatter_add_(1, cell, tab.uavs.expand(m, -1))
    cover(lay, v, (cell[:, :, None] + lay.foot).view(m, -1), first, out=v["covered"])
    v["episode"].copy_(episode)
    if lay.memory is not None:  # what the UAVs see at launch, shared once, as after every step
        clear_memory(lay, v)
    sense_and_share(lay, v)


def random_obstacles(lay: Layout, tab: StartTables, d: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[M, H, W]`` 0/1 in ``dtype``: the rules' rectangles and walls of the draws ``d [M, draws]``,
    the launch area cleared."""
    cfg = lay.cfg
    m, k, h, w = d.shape[0], cfg.num_obstacles + cfg.num_walls, cfg.grid_height, cfg.grid_width
    rect = d[:, : 4 * k].view(m, k, 4)
    size = cfg.obstacle_min_size + ((rect[:, : cfg.num_obstacles, :2] * tab.size_span) >> 32)  # [M, K, (h, w)]
    if cfg.num_walls > 0:  # a wall is a rectangle one cell thick: (length, 1) when vertical, else (1, length)
        wall = rect[:, cfg.num_obstacles :]
        length = cfg.wall_min_length + ((wall[..., 1] * tab.wall_span) >> 32)
        vertical = ((wall[..., 0] * 2) >> 32) == 1
        one = torch.ones_like(length)
        wall_size = torch.stack([torch.where(vertical, length, one), torch.where(vertical, one, length)], dim=-1)
        size = torch.cat([size, wall_size], dim=1)
    top_left = (rect[..., 2:] * (tab.room - size)) >> 32  # [M, K, (top, left)]
    rows_cols = torch.stack([top_left, top_left + size], dim=-1)  # [M, K, (row, col), (start, end)]
    corners = rows_cols[..., 0, :, None] * (w + 1) + rows_cols[..., 1, None, :]  # [M, K, 2, 2]
    raster = torch.zeros(m, (h + 1) * (w + 1), dtype=tab.corner_signs.dtype, device=lay.device)
    raster.scatter_add_(1, corners.view(m, 4 * k), tab.corner_signs.expand(m, -1))
    raster = raster.view(m, h + 1, w + 1).cumsum(2, dtype=raster.dtype).cumsum(1, dtype=raster.dtype)
    blocked = torch.empty(m, h, w, dtype=dtype, device=lay.device)  # 0/1, summed into the pools
    return torch.logical_and(raster[:, :h, :w] > 0, tab.outside_launch, out=blocked)
