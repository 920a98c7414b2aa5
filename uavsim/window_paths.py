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
from uavsim.compile_compat import into
from uavsim.config import EnvConfig
from uavsim.diamond_search import DiamondSearch


class WindowPaths(nn.Module):
    """`forward(blocked, uncovered [F, N, win^2] bool) -> [F, N, moves + 1]` float32 (module
    docstring) for windows of `cfg` (the squares of ``path_radius`` where that is set). Buffers only.

    The search runs on bit sets, one integer per window row (bit ``c``: column ``c``): the cells
    within ``k`` moves of an uncovered free cell, grown by one move per round and masked by the
    open cells. A cell's distance is the number of rounds before it joins. Each round is 4 tensor
    ops on ``[F, N, win]`` rows: the step is launch-bound on a GPU, so ops count more than bytes.
    With 4 moves and windows up to 15 cells across, the window turned by 45 degrees takes 3 ops a
    round (`uavsim.diamond_search`: 36 kernels instead of 48 for the 13x13 window's 12 rounds).
    A row's dilation along itself (``x | x << 1 | x >> 1``) is one gather from a table of every
    row (``2^win`` entries, windows up to 16 cells across; 16 KiB for 13x13), else three shifts.
    The rounds are kept in int32 up to 31 cells across (int64 beyond), which the table's gather
    takes as indices; the sets a round builds are int16 up to 15 cells across (half the bytes).
    """

    TABLE_MAX_WIN = 16  # a row table of 2^16 entries at most

    def __init__(self, cfg: EnvConfig):
        super().__init__()
        c = rules.path_search_radius(cfg)  # the half side, <= 31 (EnvConfig): a row is one int64 bit set
        self.win, self.rounds, self.diagonal = 2 * c + 1, rules.window_path_rounds(cfg), cfg.moves == 8
        w = self.win
        self.row_dtype = torch.int32 if w <= 31 else torch.int64  # the kept rounds: the table's indices
        self.set_dtype = torch.int16 if w <= 15 else self.row_dtype  # a round's sets: 2^(w-1) fits
        moves = rules.move_table(cfg)  # [1 + moves, 2]: hover (the UAV's own cell) first
        self.centre = c
        # the read cells' rows in the band of the centre row and its neighbours (`distances`)
        self.register_buffer("rows", torch.as_tensor(1 + moves[:, 0], dtype=torch.int64), persistent=False)
        self.register_buffer("cols", torch.as_tensor(c + moves[:, 1], dtype=self.row_dtype), persistent=False)
        self.register_buffer("bits", 2 ** torch.arange(w, dtype=self.set_dtype), persistent=False)
        self.register_buffer("far", torch.tensor(float(self.rounds + 1)), persistent=False)
        self.full = (1 << w) - 1
        table = None
        if w <= self.TABLE_MAX_WIN:
            x = torch.arange(1 << w, dtype=torch.int64)
            table = ((x | (x << 1) | (x >> 1)) & self.full).to(self.set_dtype)
        self.register_buffer("dilate_table", table, persistent=False)
        # 4 moves in a table-sized window: the turned window's 3 ops a round (uavsim.diamond_search)
        self.diamond = None
        if cfg.moves == 4 and w < self.TABLE_MAX_WIN:
            self.diamond = DiamondSearch(cfg, w, self.rounds, self.TABLE_MAX_WIN - 1)

    def _along_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``x | x << 1 | x >> 1`` of contiguous row bit sets (bits past the window: the caller masks them)."""
        if self.dilate_table is not None:
            return self.dilate_table.index_select(0, x.view(-1)).view(x.shape)
        out = x | (x << 1)
        return out.bitwise_or_(x >> 1)

    def distances(self, cells: torch.Tensor, goals_open: bool = False) -> torch.Tensor:
        """``[F, N, 1 + moves]`` int64: moves from the UAV's own cell, then from each move's cell, to
        the nearest uncovered free cell (``rounds + 1`` where none is within ``rounds``), of
        ``cells [F, N, 2, win^2]`` bool (blocked, uncovered; row-major); ``goals_open``: no
        uncovered cell is blocked (the turned search then skips a mask).

        Round ``k``'s reached rows are kept (``[rounds + 1, F, N, win + 2]``, an empty row above and
        below: the moves between rows read shifted slices); the distances are counted once, at the end."""
        if self.diamond is not None:
            here, moves = self.diamond.distances(cells, goals_open)
            return torch.cat([here, moves.reshape(*here.shape[:2], 4)], -1)
        f, n = cells.shape[:2]
        w, rounds = self.win, self.rounds
        rows = (cells.view(f, n, 2, w, w) * self.bits).sum(-1, dtype=self.set_dtype)  # [F, N, 2, win] bit sets
        open_ = rows[:, :, 0] ^ self.full
        reach = torch.empty(rounds + 1, f, n, w + 2, dtype=self.row_dtype, device=cells.device)
        reach[..., :: w + 1].zero_()  # the empty rows at either end
        into(reach[0, ..., 1:-1], torch.bitwise_and, rows[:, :, 1], open_)
        for k in range(rounds):
            now = reach[k]
            if self.diagonal:  # 8 moves: the rows above and below, dilated along the row like the own
                grown = now[..., :-2] | now[..., 1:-1]
                grown = self._along_rows(grown.bitwise_or_(now[..., 2:]))
            else:  # 4 moves: along the own row, straight from the rows above and below
                grown = self._along_rows(now)[..., 1:-1] | now[..., :-2]
                grown.bitwise_or_(now[..., 2:])
            into(reach[k + 1, ..., 1:-1], torch.bitwise_and, grown, open_)
        band = reach[..., self.centre : self.centre + 3]  # window rows centre - 1 .. centre + 1
        joined = ((band.index_select(3, self.rows) >> self.cols) & 1).sum(0)  # rounds each read cell was in
        return rounds + 1 - joined

    def search(self, cells: torch.Tensor, out: torch.Tensor | None = None, goals_open: bool = False) -> torch.Tensor:
        """`forward` of ``cells [F, N, 2, win^2]`` bool (blocked, uncovered), into ``out`` if given;
        ``goals_open``: no uncovered cell is blocked (the window's free cells: one op less)."""
        if out is None:
            out = torch.empty(*cells.shape[:2], self.rows.shape[0], dtype=torch.float32, device=cells.device)
        if self.diamond is not None:  # the moves' distances as (up, down), (left, right): no reordering op
            here, moves = self.diamond.distances(cells, goals_open)
            into(out[..., :-1].unflatten(-1, (2, 2)), torch.lt, moves, here[..., None])
        else:
            dist = self.distances(cells, goals_open)
            here = dist[..., :1]
            into(out[..., :-1], torch.lt, dist[..., 1:], here)
        into(out[..., -1:], torch.div, here, self.far)  # float32, as the reference divides
        return out

    def search_channels(self, channels: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`search` of the window's free cells, given as the observation's ``channels [F, N, 2 win^2]``
        (blocked, covered) when they are float32 and the turned search applies (`can_search_channels`)."""
        here, moves = self.diamond.distances_of_channels(channels)
        into(out[..., :-1].unflatten(-1, (2, 2)), torch.lt, moves, here[..., None])
        into(out[..., -1:], torch.div, here, self.far)  # float32, as the reference divides
        return out

    def can_search_channels(self, dtype: torch.dtype) -> bool:
        """Whether `search_channels` takes channels of ``dtype`` (float32 only: the product must be exact)."""
        return self.diamond is not None and dtype == torch.float32

    def forward(self, blocked: torch.Tensor, uncovered: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``blocked``, ``uncovered``: ``[F, N, win^2]`` bool, the square's cells row-major; into
        ``out`` (``[F, N, moves + 1]``, any float dtype: the float32 values cast) if given."""
        return self.search(torch.stack([blocked, uncovered], 2), out)


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
