"""The heading to the nearest pooled block that still needs a visit, in one UAV's frame.

A UAV that has covered everything around it has to know where to go next; its pooled map says
which blocks still hold cells to cover, but in absolute coordinates, which a network would have to
learn to subtract its own position from (without help some episodes stall: docs/performance.md,
"Design choices, measured"). The heading is that subtraction done for it: the offset to the centre
of the nearest block still flagged (straight-line distance, obstacles ignored: the local window
handles those) and that distance.

    heading [F, N, 3] = (d_row / (H - 1), d_col / (W - 1), distance / diagonal) float32; zeros when
    no block is flagged. Ties go to the lowest block index. With ``squared_distance`` the third is
    (distance / diagonal)^2: torch 2.13's float32 sqrt is not IEEE-rounded on the CPU (it differs
    from NumPy's in the last bit on 57,474 of the first 300,000 integers, with the AVX-512 and with
    the AVX2 kernels, on a Zen 4 EPYC), and an observation must match the NumPy reference bit for
    bit; a product does.

Two users flag blocks differently: the onboard memory (`uavsim.memory`) flags a block its UAV does
not yet know to be all covered or blocked; the shared-map actor (`agents.algo.heading`) flags a
block of the global state that still holds uncovered free cells.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from uavsim.config import EnvConfig

HEADING_DIM = 3


class BlockHeading(nn.Module):
    """`forward(flagged [F, N or 1, P^2] bool, row [F, N], col [F, N] int64) -> heading [F, N, 3]`
    float32 for the map of `env_cfg` (a flag row of 1: one map for every UAV). Buffers only (no
    parameters, nothing in the state dict)."""

    def __init__(self, env_cfg: EnvConfig, squared_distance: bool = False):
        super().__init__()
        self.squared_distance = squared_distance
        h, w, p = env_cfg.grid_height, env_cfg.grid_width, env_cfg.state_pool
        self.pool = p
        # A UAV stands on a whole cell and a block's centre is the mean of whole rows and columns, so
        # twice an offset is a whole number: squared distances come, exact, from two small integer
        # tables summed by broadcasting, in int16 where they fit (one [F, N, P^2] int16 tensor per
        # step instead of float offsets: docs/performance.md, "Design choices, measured"). The
        # tables are int32 buffers cast per step: DDP broadcasts every buffer, and neither gloo nor
        # NCCL takes int16.
        row_centre, col_centre = block_centres(h, p), block_centres(w, p)
        twice_dr = (2 * (row_centre[None, :] - np.arange(h)[:, None])).round().astype(np.int64)  # [H, P]
        twice_dc = (2 * (col_centre[None, :] - np.arange(w)[:, None])).round().astype(np.int64)  # [W, P]
        self.far = int((twice_dr**2).max() + (twice_dc**2).max()) + 1  # above every squared distance
        self.sq_dtype = torch.int16 if self.far <= torch.iinfo(torch.int16).max else torch.int32
        self.register_buffer("row_sq", torch.from_numpy(twice_dr**2).int(), persistent=False)  # (2 dr)^2
        self.register_buffer("col_sq", torch.from_numpy(twice_dc**2).int(), persistent=False)  # (2 dc)^2
        # [P^2, 2]: block b's centre (row, column) in cells, read with one gather of the nearest block
        centre = np.stack(np.broadcast_arrays(row_centre[:, None], col_centre[None, :]), -1).reshape(-1, 2)
        self.register_buffer("centre", torch.from_numpy(centre).float(), persistent=False)
        self.register_buffer("scale", torch.tensor([h - 1.0, w - 1.0]).clamp_min(1.0), persistent=False)
        # (2 d) -> d / diagonal as a float32 tensor (a Python float would be a double in compiled code)
        per = 0.5 / (math.hypot(h - 1, w - 1) or 1.0)
        self.register_buffer("distance_scale", torch.tensor(per * per if squared_distance else per), persistent=False)

    def forward(self, flagged: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        p, n = self.pool, row.shape[-1]
        row_sq, col_sq = self.row_sq.to(self.sq_dtype), self.col_sq.to(self.sq_dtype)
        sq = row_sq[row][:, :, :, None] + col_sq[col][:, :, None, :]  # [F, N, P, P]: (2 d)^2
        flagged = flagged.unflatten(-1, (p, p))  # [F, N or 1, P, P]
        nearest, idx = torch.where(flagged, sq, self.far).view(-1, n, p * p).min(-1)  # [F, N]
        off = self.centre[idx] - torch.stack([row, col], -1).float()
        distance = nearest.float() if self.squared_distance else nearest.float().sqrt()
        heading = torch.cat([off / self.scale, (distance * self.distance_scale)[..., None]], -1)
        return torch.where((nearest < self.far)[..., None], heading, 0.0)


def block_centres(cells: int, pool: int) -> np.ndarray:
    """``[P]`` float64 mean coordinate of each block's cells along one side of the map (cell ``r`` in
    block ``r * P // cells``, as `rules.block_of_cell` pools them)."""
    coords = np.arange(cells)
    block = coords * pool // cells
    return np.bincount(block, weights=coords, minlength=pool) / np.bincount(block, minlength=pool)


class CellHeading:
    """`BlockHeading` (squared distance) tabulated for UAVs on the cells of a grid: the heading of
    a UAV on grid cell ``g`` to block ``b`` is ``table[g, 1 + b]``, the module's own output for that
    cell with only that block flagged (so bit for bit its values), and ``table[g, 0]``, zeros, is the
    heading when no block is flagged. The nearest block is one `argmin` over ``1 + P^2`` keys
    (`cell_key`: the squared distance ``(2 d)^2`` to each block after a column 0 of ``far``; an
    unflagged block reads ``far`` too): its first minimum is the nearest block, ties to the lowest
    block index, or column 0 when none is flagged (`flag_buffer` keeps column 0 flagged). Why: the
    module's ~20 small ops per step (positions, two table reads, offsets, a concatenation, a mask)
    become 4 (`write`), and an eager step on a GPU costs a launch per op. Tables past
    `TABLE_MAX_BYTES` (large maps with fine pools) are not built: `write` then runs the module itself.

    ``rows``, ``cols``: ``[G]`` int64 NumPy map row and column of each grid cell (any value off the
    map, ``on_map`` False: a UAV is never there; those rows hold zeros)."""

    TABLE_MAX_BYTES = 64 << 20  # 1.5 MiB on the default task (1,678 grid cells x 65 columns)

    def __init__(self, env_cfg: EnvConfig, rows: np.ndarray, cols: np.ndarray, on_map: np.ndarray, device):
        self.module = module = BlockHeading(env_cfg, squared_distance=True).to(device)
        p2 = env_cfg.state_pool**2
        self.p2, self.far = p2, module.far
        self.tables: dict[torch.dtype, torch.Tensor] = {}
        self._flags: dict[tuple, torch.Tensor] = {}  # `flag_buffer`: kept for two shapes at most
        sq_dtype = module.sq_dtype
        if len(rows) * (1 + p2) * (HEADING_DIM * 4 + sq_dtype.itemsize) > self.TABLE_MAX_BYTES:
            rc = np.stack([np.where(on_map, rows, 0), np.where(on_map, cols, 0)], -1)
            self.cell_rc = torch.as_tensor(rc, dtype=torch.int64, device=device)  # [G, 2] for the module
            return
        module = BlockHeading(env_cfg, squared_distance=True)  # on the CPU, to build the tables
        r = torch.as_tensor(rows[on_map], dtype=torch.int64)
        c = torch.as_tensor(cols[on_map], dtype=torch.int64)
        # [G, 1 + P^2] (2 d)^2 after a column of far: off the map (never stood on) far everywhere, column 0 wins
        cell_sq = torch.full((len(rows), 1 + p2), module.far, dtype=sq_dtype)
        on = torch.as_tensor(on_map)
        row_sq, col_sq = module.row_sq.to(sq_dtype), module.col_sq.to(sq_dtype)
        cell_sq[on, 1:] = (row_sq[r][:, :, None] + col_sq[c][:, None, :]).view(-1, p2)
        table = torch.zeros(len(rows), 1 + p2, HEADING_DIM)
        for b in range(p2):  # the module itself, block b alone flagged, for every cell on the map
            one_block = torch.zeros(len(r), 1, p2, dtype=torch.bool)
            one_block[..., b] = True
            table[on, 1 + b] = module(one_block, r[:, None], c[:, None])[:, 0]
        self.cell_key = cell_sq.to(device)  # [G, 1 + P^2]
        self.far_key = torch.tensor(module.far, dtype=sq_dtype, device=device)  # a tensor: a Python int is a kernel
        self.tables[torch.float32] = table.to(device)

    def table(self, dtype: torch.dtype) -> torch.Tensor:
        """``[G, 1 + P^2, 3]``: the float32 values cast to ``dtype``."""
        if dtype not in self.tables:
            self.tables[dtype] = self.tables[torch.float32].to(dtype)
        return self.tables[dtype]

    def flag_buffer(self, m: int, n: int, device: torch.device) -> torch.Tensor:
        """``[M, N, 1 + P^2]`` bool for `write`'s flags, column 0 True: the caller writes the blocks'
        flags into ``[..., 1:]``. Eager calls reuse one tensor per shape; compiled, a fresh one (no
        state kept across graphs)."""
        key = (m, n, device)
        flags = None if torch.compiler.is_compiling() else self._flags.get(key)
        if flags is None:
            flags = torch.ones(m, n, 1 + self.p2, dtype=torch.bool, device=device)
            if not torch.compiler.is_compiling() and len(self._flags) < 2:
                self._flags[key] = flags
        return flags

    def write(
        self, flags: torch.Tensor, cell: torch.Tensor, out: torch.Tensor, key: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The heading of UAVs on grid cells ``cell [M, N]`` int64 (any strides) to the nearest of the
        blocks flagged in ``flags [M, N, 1 + P^2]`` bool (`flag_buffer`: column 0 True, then the
        blocks), into ``out [M, N, 3]`` (any float dtype: the float32 values cast). Ties go to the
        lowest block index, as `BlockHeading`'s. ``key``: ``cell_key`` at the cells ``[M, N, 1 + P^2]``
        if the caller read it (tabulated only)."""
        if not self.tables:  # too large to tabulate
            rc = self.cell_rc[cell]
            return out.copy_(self.module(flags[..., 1:], rc[..., 0], rc[..., 1]))
        if key is None:
            key = self.cell_key[cell]
        nearest = torch.where(flags, key, self.far_key).argmin(-1)  # [M, N]: the first minimum, 0 if none flagged
        table = self.table(out.dtype)
        if torch.compiler.is_compiling():  # no non-contiguous out= there (`uavsim.compile_compat.into`)
            return out.copy_(table[cell, nearest])
        return torch.ops.aten.index.Tensor_out(table, [cell, nearest], out=out)
