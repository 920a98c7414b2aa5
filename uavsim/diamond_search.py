"""The window paths' search with 4 moves in 3 ops a round (`uavsim.window_paths` takes 4): the
window turned by 45 degrees, so that a move reaches only the rows above and below.

Cell ``(i, j)`` of a ``w x w`` window goes to row ``u = i + j`` (``2w - 1`` rows) and bit
``(j - i + w - 1) // 2`` of it: a row holds every other diagonal, and its 4-neighbours lie in the
rows ``u - 1`` and ``u + 1``, on the same bit and the one beside it (to the right from an even row,
to the left from an odd one). A round is then: the OR of the rows above and below, one read of a
table that widens it by a bit on the right side, and the AND with the open cells. Bit ``w`` of a
row says that the row is even; the OR of an odd row's neighbours (both even) carries it, so the
table (``2^(w + 1)`` entries) knows which side to widen, and writes the flag of the row it builds.

The sets so grown, ``S_k``, are the cells a walk of exactly ``k`` moves from a goal reaches
through open cells (a walk may not stand still: the search does not add the row itself, which
would cost a fourth op), not those within ``k``. A cell's distance is still the first ``k`` with
the cell in ``S_k``: the shortest path is such a walk, and any walk is at least as long. The
distances are read as the first round holding the cell (`DiamondSearch.distances`).
"""

from __future__ import annotations

import torch
from torch import nn

from uavsim import rules
from uavsim.compile_compat import into
from uavsim.config import EnvConfig


class DiamondSearch(nn.Module):
    """`distances(cells [F, N, 2, w^2] bool) -> (here, moves)` int64, the distances of
    `uavsim.window_paths.WindowPaths.distances` split in two views, for 4 moves and windows up to ``max_win`` across
    (the table's ``2^(w + 1)`` entries). Buffers only."""

    def __init__(self, cfg: EnvConfig, win: int, rounds: int, max_win: int):
        super().__init__()
        if cfg.moves != 4 or win > max_win:
            raise ValueError(f"the diamond search takes 4 moves and windows up to {max_win} across")
        w, c = win, win // 2
        self.win, self.rounds, self.rows = w, rounds, 2 * w - 1
        # rows of w + 1 bits; the table's index is int32 (what index_select takes)
        self.row_dtype = torch.int16 if w + 1 <= 15 else torch.int32
        i, j = torch.arange(w).repeat_interleave(w), torch.arange(w).repeat(w)  # row-major cells
        self.register_buffer("cell_row", i + j, persistent=False)  # [w^2] int64: the row u of each cell
        self.register_buffer("cell_bit", (1 << ((j - i + w - 1) // 2)).to(self.row_dtype), persistent=False)
        even = torch.arange(self.rows) % 2 == 0
        flag = even.to(torch.int64) << w
        # the rows' bits that are window cells: row u has min(u, 2w - 2 - u) + 1 of them, every other diagonal
        valid = torch.zeros(self.rows, dtype=torch.int64)
        valid.index_add_(0, i + j, 1 << ((j - i + w - 1) // 2))
        # the start of the open and goal rows: every window cell and the even rows' flag, the flag; the
        # blocked cells' bits are then subtracted from the first (blocked bits are valid: open = valid - blocked)
        start = torch.stack([valid | flag, flag])
        self.register_buffer("start", start.to(self.row_dtype), persistent=False)
        sign = torch.tensor([[-1], [1]], dtype=self.row_dtype)
        self.register_buffer("signed_bit", sign * self.cell_bit, persistent=False)  # [2, w^2]: blocked, goal
        x = torch.arange(1 << (w + 1), dtype=torch.int64)
        bits, odd_target = x & ((1 << w) - 1), (x >> w) & 1  # OR of an odd row's neighbours: both flagged
        wide = torch.where(odd_target == 1, bits | (bits >> 1), bits | (bits << 1)) & ((1 << w) - 1)
        self.register_buffer("table", (wide | ((1 - odd_target) << w)).to(self.row_dtype), persistent=False)
        moves = rules.move_table(cfg)  # [1 + moves, 2]: hover first, then up, down, left, right
        assert [tuple(int(x) for x in m) for m in moves] == [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]
        # The read cells in the band of rows u = 2c - 1 .. 2c + 1 (`distances`), two slots a row (the
        # rows innermost: contiguous): up, the own cell and down (bits c, c and c - 1), then left, none
        # and right (bits c - 1 and c): the moves' cells in the order up, down, left, right.
        bits = [[1 << c, 1 << c, 1 << (c - 1)], [1 << (c - 1), 0, 1 << c]]
        self.register_buffer("band_bits", torch.tensor(bits, dtype=self.row_dtype), persistent=False)
        # `distances_of_channels`: the open and goal rows as one product of a window's float32 (blocked,
        # covered) 0/1 channels: each cell's bit subtracted from the open row where blocked and from the goal
        # row where blocked or covered (goal: free), from rows holding every cell. Integers below 2**15, exact.
        weight = torch.zeros(2, w * w, 2, self.rows)  # [channel, cell, (open, goal), row]
        minus_bit = -(1 << ((j - i + w - 1) // 2)).float()
        weight[0, torch.arange(w * w), 0, i + j] = minus_bit
        weight[:, torch.arange(w * w), 1, i + j] = minus_bit
        self.register_buffer("channel_weight", weight.view(2 * w * w, 2 * self.rows), persistent=False)
        self.register_buffer("channel_start", (valid | flag).float().repeat(2), persistent=False)
        self.centre = c
        self._scratch: dict[tuple, tuple] = {}  # `_reach`: kept for two shapes at most

    def _reach(self, f: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list]:
        """``(reach, index, rounds)``. ``reach [rounds + 3, F, N, 2w + 1]``: the open rows, then ``S_0 ..
        S_rounds``, then a last set holding every cell (a cell in no ``S_k`` is read there: ``rounds + 1``,
        far), each row with an empty one above and below (the rounds read shifted slices); ``index [F, N,
        2w - 1]`` int32, the table's index; ``rounds``: each round's views (the rows above and below, the set
        it writes), made once (their Python was a fifth of an eager CPU search at 64 environments). The empty rows
        and the last set are written once per shape: eager calls reuse the tensors (an env asks for one or
        two shapes); compiled, fresh ones (no state kept across graphs)."""
        key = (f, n, device)
        scratch = None if torch.compiler.is_compiling() else self._scratch.get(key)
        if scratch is None:
            reach = torch.zeros((self.rounds + 3, f, n, self.rows + 2), dtype=self.row_dtype, device=device)
            reach[-1].fill_(-1)
            index = torch.empty(f, n, self.rows, dtype=torch.int32, device=device)
            sets = range(1, self.rounds + 1)
            rounds = [(reach[k, ..., :-2], reach[k, ..., 2:], reach[k + 1, ..., 1:-1]) for k in sets]
            scratch = (reach, index, rounds)
            if not torch.compiler.is_compiling() and len(self._scratch) < 2:
                self._scratch[key] = scratch
        return scratch

    def distances(self, cells: torch.Tensor, goals_open: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(here [F, N, 1], moves [F, N, 2, 2])`` int64 distances (`search`) of the own cell and of
        the moves' cells ((up, down), (left, right)): views of one tensor. ``goals_open``: no goal is
        blocked (the window's free cells), so the goals need no mask."""
        f, n = cells.shape[:2]
        scratch = self._reach(f, n, cells.device)
        reach = scratch[0]
        rows = reach[:2, ..., 1:-1].permute(1, 2, 0, 3)  # [F, N, 2, 2w - 1]: open, goal
        rows.copy_(self.start.expand(f, n, 2, self.rows))
        rows.index_add_(3, self.cell_row, cells * self.signed_bit)  # distinct bits: the sum is their OR
        if not goals_open:
            reach[1, ..., 1:-1].bitwise_and_(reach[0, ..., 1:-1])
        return self._grow(scratch)

    def distances_of_channels(self, channels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`distances` of the window's cells given as ``channels [F, N, 2 w^2]`` float32 0/1, (blocked,
        covered) (the observation's first channels), uncovered free cells the goals: the open and goal rows
        in one product (`channel_weight`) and one cast instead of a comparison and three ops."""
        f, n = channels.shape[:2]
        scratch = self._reach(f, n, channels.device)
        rows = torch.addmm(self.channel_start, channels.reshape(f * n, -1), self.channel_weight)
        scratch[0][:2, ..., 1:-1].permute(1, 2, 0, 3).copy_(rows.view(f, n, 2, self.rows))
        return self._grow(scratch)

    def _grow(self, scratch: tuple[torch.Tensor, torch.Tensor, list]) -> tuple[torch.Tensor, torch.Tensor]:
        """The rounds from the open and goal rows in `_reach`'s ``scratch``, and the distances read."""
        reach, index, rounds = scratch
        f, n = reach.shape[1:3]
        open_, flat = reach[0, ..., 1:-1], index.view(-1)
        for above, below, grown_set in rounds:
            into(index, torch.bitwise_or, above, below)
            into(grown_set, torch.bitwise_and, self.table.index_select(0, flat).view(f, n, self.rows), open_)
        band = reach[1:, ..., 2 * self.centre : 2 * self.centre + 3].permute(0, 3, 1, 2)  # rows 2c - 1 .. 2c + 1
        # The read cells' bits, UAVs innermost ([rounds + 2, 2, 3, F, N]): with the 3 slots innermost a CPU's
        # inner loop ran over 3 elements (docs/performance.md, "Design choices, measured"; the same op and bytes).
        cells = torch.empty(band.shape[0], 2, 3, f, n, dtype=band.dtype, device=band.device)
        into(cells, torch.bitwise_and, band[:, None], self.band_bits[:, :, None, None])
        # the first set holding each cell (max's first maximum; the last set holds every cell)
        first = cells.max(0).indices.permute(2, 3, 0, 1)  # [F, N, 2, 3]
        return first[..., 0, 1:2], first[..., ::2]
