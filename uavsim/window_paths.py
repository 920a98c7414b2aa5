"""Shortest paths inside a UAV's window (``EnvConfig.window_paths``): which moves lead toward the
nearest uncovered free cell it can see.

Why: the memory's heading (`uavsim.heading`) is a straight line. With few UAVs a UAV can end up
beside an uncovered cell it sees behind a wall, its heading pointing at the wall: trained policies
then hover there for the rest of the episode (4 UAVs on 36x36 maps, `configs/size_agnostic.yaml`
seed 0: in 8 of 64 episodes every UAV sat on one or two cells for the last 49 steps). A
multilayer perceptron over a flattened window does not learn path search from a few million
steps; the search is cheap to do for it. By default only the window is searched: what the UAV
sees now, no map prior and no memory.

With ``EnvConfig.path_radius`` R > 0 the search runs over the UAV's onboard memory in the square of
half side R around it (`memory_square`): the window still holds the truth (it was just sensed),
beyond it what the UAV remembers, its unknown cells counted open and as goals. Why: in the
example office corridors (`examples/maps/office_corridors.txt`, walls of 29 cells with the exit
at one end) a UAV more than ``obs_radius`` cells from the exit sees no goal in its window and its
heading points through the wall.

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
    docstring) for windows of `cfg` (the squares of ``path_radius`` where that is set). Buffers only.

    The search runs on bit sets, one int64 per window row (bit ``c``: column ``c``): the cells
    within ``k`` moves of an uncovered free cell, grown by one move per round with shifts and ORs,
    masked by the open cells. A cell's distance is the number of rounds before it joins. On one
    thread of the 2-core AMD EPYC (Zen 4), 64 environments x 10 UAVs, 13x13 windows, 12 rounds:
    the distance grids by relaxation took 2.5-12 ms (int16 slices), by max pooling ~50 ms, the bit
    sets 1.6-3.1 ms (a loaded machine, all in one run); they read only the 1 + moves cells the
    observation needs."""

    def __init__(self, cfg: EnvConfig):
        super().__init__()
        c = rules.path_search_radius(cfg)  # the square's half side: the window's, or path_radius's
        if 2 * c + 1 > 63:
            raise ValueError(f"window_paths searches at most 63 cells across (a radius <= 31), got {2 * c + 1}")
        self.win, self.rounds, self.diagonal = 2 * c + 1, rules.window_path_rounds(cfg), cfg.moves == 8
        moves = rules.move_table(cfg)  # [1 + moves, 2]: hover (the UAV's own cell) first
        self.register_buffer("rows", torch.as_tensor(c + moves[:, 0], dtype=torch.int64), persistent=False)
        self.register_buffer("cols", torch.as_tensor(c + moves[:, 1], dtype=torch.int64), persistent=False)
        self.register_buffer("bits", 2 ** torch.arange(self.win, dtype=torch.int64), persistent=False)
        self.register_buffer("far", torch.tensor(float(self.rounds + 1)), persistent=False)

    def distances(self, blocked: torch.Tensor, uncovered: torch.Tensor) -> torch.Tensor:
        """``[F, N, 1 + moves]`` int64: moves from the UAV's own cell, then from each move's cell, to
        the nearest uncovered free cell (``rounds + 1`` where none is within ``rounds``).

        Each round grows the reached cells (``[F, N, win]`` row bit sets) by one move, open cells
        only, and keeps their bits at the 1 + moves cells read; the distances are counted once, at
        the end. The row sets live in buffers with an empty row above and below, so the moves
        between rows read shifted slices: 8 tensor operations a round where the small tensors make
        each one's dispatch the cost (the clone-and-update form took 12)."""
        f, n, _ = blocked.shape
        w, rounds, dev = self.win, self.rounds, blocked.device
        free = ~blocked.view(f, n, w, w)
        open_ = (free.long() * self.bits).sum(-1)  # [F, N, win] row bit sets
        reach = torch.zeros(f, n, w + 2, dtype=torch.int64, device=dev)  # an empty row at either end
        reach[..., 1:-1] = ((free & uncovered.view(f, n, w, w)).long() * self.bits).sum(-1)
        across = torch.zeros_like(reach) if self.diagonal else None  # with 8 moves, rows reach diagonally
        read = torch.empty(rounds + 1, f, n, len(self.rows), dtype=torch.int64, device=dev)
        for k in range(rounds + 1):
            now = reach[..., 1:-1]
            torch.index_select(now, 2, self.rows, out=read[k])
            if k == rounds:
                break
            sideways = now | (now << 1)  # bits past the window are masked off below
            if across is None:
                sideways |= now >> 1
                between = reach  # 4 moves: from the rows above and below, straight
            else:
                torch.bitwise_or(sideways, now >> 1, out=across[..., 1:-1])
                sideways, between = across[..., 1:-1], across
            grown = sideways | between[..., :-2]
            grown |= between[..., 2:]
            torch.bitwise_and(grown, open_, out=now)
        joined = ((read >> self.cols) & 1).sum(0)  # rounds in which each read cell was reached
        return rounds + 1 - joined

    def forward(self, blocked: torch.Tensor, uncovered: torch.Tensor) -> torch.Tensor:
        """``blocked``, ``uncovered``: ``[F, N, win^2]`` bool, the square's cells row-major."""
        dist = self.distances(blocked, uncovered)
        here = dist[..., :1]
        closer = (dist[..., 1:] < here).float()
        return torch.cat([closer, here.float() / self.far], -1)


class MemorySquare(nn.Module):
    """With ``path_radius`` R: `forward(memory [M, N, G] uint8, cell [M, N] int64) -> (blocked, goal)`,
    each ``[M, N, (2R + 1)^2]`` bool: the square of half side R around each UAV read from its memory
    codes (`uavsim.memory`, the packed grid's cells ``G``), row-major as `WindowPaths` takes it:
    blocked where known blocked, a goal where neither known blocked nor known covered.

    Off the map needs no mask. The packed grid's border (`uavsim.dynamics`: ``EnvConfig.pad`` >= 1
    cells at either end of every row, and as many rows above and below) is known blocked in every
    memory. A square wider than the border reads, past it, the cells of a neighbouring row (or,
    clamped into the grid, border cells again); those lie beyond a band of blocked border cells that
    crosses every row of the square, so no path joins them to the UAV, with 4 moves or 8, and the
    distances the observation reads are those of the map alone (`reference.ReferenceEnv`, which
    blocks off the map outright, checks it step for step)."""

    def __init__(self, cfg: EnvConfig, row_stride: int, grid_cells: int):
        super().__init__()
        from uavsim.memory import KNOWN_BLOCKED  # the memory's codes (uavsim.memory imports no paths)

        side = torch.arange(-cfg.path_radius, cfg.path_radius + 1, dtype=torch.int64)
        self.known_blocked, self.grid_cells = KNOWN_BLOCKED, grid_cells
        self.register_buffer("flat", (side[:, None] * row_stride + side[None, :]).view(-1), persistent=False)

    def forward(self, memory: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = (cell[:, :, None] + self.flat).clamp_(0, self.grid_cells - 1)  # [M, N, S^2]
        code = memory.gather(2, index)
        # 0 unknown and 4 last seen free are goals; 5 covered and 7 blocked have bit 0 set
        return code == self.known_blocked, (code & 1) == 0
