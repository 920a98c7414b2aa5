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
from uavsim.config import EnvConfig


class DiamondSearch(nn.Module):
    """`distances(cells [F, N, 2, w^2] bool) -> [F, N, 1 + moves]` int64, as
    `uavsim.window_paths.WindowPaths.distances`, for 4 moves and windows up to ``max_win`` across
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
        # the start of the blocked and goal rows: no bit, and the even rows' flag (kept by S_0 = goal & open)
        self.register_buffer("start", torch.stack([torch.zeros_like(flag), flag]).to(self.row_dtype), persistent=False)
        self.register_buffer("valid", (valid | flag).to(self.row_dtype), persistent=False)  # open = valid ^ blocked
        x = torch.arange(1 << (w + 1), dtype=torch.int64)
        bits, odd_target = x & ((1 << w) - 1), (x >> w) & 1  # OR of an odd row's neighbours: both flagged
        wide = torch.where(odd_target == 1, bits | (bits >> 1), bits | (bits << 1)) & ((1 << w) - 1)
        self.register_buffer("table", (wide | ((1 - odd_target) << w)).to(self.row_dtype), persistent=False)
        moves = torch.as_tensor(rules.move_table(cfg))  # [1 + moves, 2]: hover first
        u, v = 2 * c + moves[:, 0] + moves[:, 1], moves[:, 1] - moves[:, 0] + 2 * c
        # the read cells' rows in the band u = 2c - 1 .. 2c + 1 (`distances`), and their bits
        self.register_buffer("band_rows", (u - (2 * c - 1)).to(torch.int64), persistent=False)
        self.register_buffer("band_bits", (1 << (v // 2)).to(self.row_dtype), persistent=False)
        self.centre = c
        self.register_buffer("far", torch.tensor(rounds + 1), persistent=False)  # a tensor: a Python int is a kernel

    def distances(self, cells: torch.Tensor, goals_open: bool = False) -> torch.Tensor:
        """``goals_open``: no goal is blocked (the window's free cells), so the goals need no mask."""
        f, n = cells.shape[:2]
        rounds, u = self.rounds, self.rows
        # reach[0]: the blocked rows; reach[1 + k]: S_k (the goals at k = 0), each with an empty row
        # above and below (the rounds read shifted slices)
        reach = torch.empty(rounds + 2, f, n, u + 2, dtype=self.row_dtype, device=cells.device)
        rows = reach[:2, ..., 1:-1].permute(1, 2, 0, 3)  # [F, N, 2, 2w - 1]: blocked, goal
        rows.copy_(self.start.expand(f, n, 2, u))
        rows.index_add_(3, self.cell_row, cells * self.cell_bit)  # distinct bits: the sum is their OR
        reach[..., :: u + 1].zero_()
        open_ = reach[0, ..., 1:-1] ^ self.valid
        if not goals_open:
            reach[1, ..., 1:-1].bitwise_and_(open_)
        index = torch.empty(f, n, u, dtype=torch.int32, device=cells.device)
        for k in range(1, rounds + 1):
            now = reach[k]
            _into(index, torch.bitwise_or, now[..., :-2], now[..., 2:])
            grown = self.table.index_select(0, index.view(-1)).view(f, n, u)
            _into(reach[k + 1, ..., 1:-1], torch.bitwise_and, grown, open_)
        band = reach[1:, ..., 2 * self.centre : 2 * self.centre + 3]  # rows 2c - 1 .. 2c + 1
        seen = band.index_select(3, self.band_rows) & self.band_bits  # [rounds + 1, F, N, 1 + moves]
        top, first = seen.max(0)  # the first round with the cell in S_k (max's first maximum), if any
        return torch.where(top != 0, first, self.far)


def _into(out: torch.Tensor, op, *args) -> torch.Tensor:
    """`uavsim.dynamics.into` (which imports this module): ``op(*args, out=out)``, compiled a copy."""
    if torch.compiler.is_compiling():
        return out.copy_(op(*args))
    return op(*args, out=out)
