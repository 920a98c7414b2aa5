"""Shortest paths inside a UAV's window (``EnvConfig.window_paths``): which moves lead toward the
nearest uncovered free cell it can see.

Why: the memory's heading (`uavsim.heading`) is a straight line. With few UAVs a UAV can end up
beside an uncovered cell it sees behind a wall, its heading pointing at the wall: trained policies
then hover there for the rest of the episode (4 UAVs on 36x36 maps, `configs/size_agnostic.yaml`
seed 0: in 8 of 64 episodes every UAV sat on one or two cells for the last 49 steps). A
multilayer perceptron over a flattened window does not learn path search from a few million
steps; the search is cheap to do for it. Only the window is searched: what the UAV sees now, no
map prior and no memory.

For each UAV: breadth-first distances, in moves of the env's move set, from every window cell to
the nearest window cell that is free and not covered, through window cells that are not blocked,
searched ``2 * obs_radius`` rounds (farther: ``rounds + 1``; outside the window counts as blocked).
The observation gets ``moves + 1`` float32 values: for each move (1 .. moves, `rules.MOVES` order)
1 where the cell it leads to is closer than the UAV's own cell, else 0; then the own cell's
distance / ``(rounds + 1)`` (1: no uncovered free cell within reach in the window). Integers and
one IEEE division: the NumPy reference gets the same bits.
"""

from __future__ import annotations

import torch
from torch import nn

from uavsim import rules
from uavsim.config import EnvConfig


class WindowPaths(nn.Module):
    """`forward(blocked, uncovered [F, N, win^2] bool) -> [F, N, moves + 1]` float32 (module
    docstring) for windows of `cfg`. Buffers only.

    The search runs on bit sets, one int64 per window row (bit ``c``: column ``c``): the cells
    within ``k`` moves of an uncovered free cell, grown by one move per round with shifts and ORs,
    masked by the open cells. A cell's distance is the number of rounds before it joins. On one
    thread of the 2-core AMD EPYC (Zen 4), 64 environments x 10 UAVs, 13x13 windows, 12 rounds:
    the distance grids by relaxation took 2.5-12 ms (int16 slices), by max pooling ~50 ms, the bit
    sets 1.6-3.1 ms (a loaded machine, all in one run); they read only the 1 + moves cells the
    observation needs."""

    def __init__(self, cfg: EnvConfig):
        super().__init__()
        if cfg.window > 63:
            raise ValueError(f"window_paths needs a window of at most 63 cells (obs_radius <= 31), got {cfg.window}")
        self.win, self.rounds, self.diagonal = cfg.window, rules.window_path_rounds(cfg), cfg.moves == 8
        moves = rules.move_table(cfg)  # [1 + moves, 2]: hover (the UAV's own cell) first
        c = cfg.obs_radius
        self.register_buffer("rows", torch.as_tensor(c + moves[:, 0], dtype=torch.int64), persistent=False)
        self.register_buffer("cols", torch.as_tensor(c + moves[:, 1], dtype=torch.int64), persistent=False)
        self.register_buffer("bits", 2 ** torch.arange(cfg.window, dtype=torch.int64), persistent=False)
        self.register_buffer("far", torch.tensor(float(self.rounds + 1)), persistent=False)

    def grow(self, reach: torch.Tensor, open_: torch.Tensor) -> torch.Tensor:
        """The cells one move from ``reach`` or in it (``[F, N, win]`` row bit sets), open ones only."""
        across = reach | (reach << 1) | (reach >> 1)  # bits past the window are masked off below
        step = across if self.diagonal else reach
        out = across.clone()
        out[..., 1:] |= step[..., :-1]  # from the row above
        out[..., :-1] |= step[..., 1:]  # from the row below
        return out & open_

    def distances(self, blocked: torch.Tensor, uncovered: torch.Tensor) -> torch.Tensor:
        """``[F, N, 1 + moves]`` int64: moves from the UAV's own cell, then from each move's cell, to
        the nearest uncovered free cell (``rounds + 1`` where none is within ``rounds``)."""
        f, n, _ = blocked.shape
        w = self.win
        free = ~blocked.view(f, n, w, w)
        open_ = (free.long() * self.bits).sum(-1)  # [F, N, win] row bit sets
        reach = ((free & uncovered.view(f, n, w, w)).long() * self.bits).sum(-1)
        joined = torch.zeros(f, n, len(self.rows), dtype=torch.int64, device=blocked.device)
        for k in range(self.rounds + 1):
            joined += (reach.index_select(2, self.rows) >> self.cols) & 1
            if k < self.rounds:
                reach = self.grow(reach, open_)
        return self.rounds + 1 - joined

    def forward(self, blocked: torch.Tensor, uncovered: torch.Tensor) -> torch.Tensor:
        dist = self.distances(blocked, uncovered)
        here = dist[..., :1]
        closer = (dist[..., 1:] < here).float()
        return torch.cat([closer, here.float() / self.far], -1)
