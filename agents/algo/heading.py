"""What the actor sees of the shared coverage map (`model.actor_shared_map`).

The global state's pooled map (blocked and covered fractions of `P x P` blocks) is in absolute
coordinates; a UAV far from every uncovered cell would have to learn, from its two position
scalars, where the map's uncovered blocks lie relative to itself (without help some episodes
stall: docs/performance.md, "Design choices, measured"). So each UAV also gets an egocentric
heading, computed from the same state: the offset to the centre of the nearest block that still
holds uncovered free cells (straight-line distance, obstacles ignored: the local window handles
those), and that distance.

    heading [F, N, 3] = (d_row / (H - 1), d_col / (W - 1), distance / diagonal); zeros when the map
    has no uncovered block left.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from uavsim.config import EnvConfig

HEADING_DIM = 3


class MapHeading(nn.Module):
    """`forward(state [F, S]) -> heading [F, N, 3]` float32 for the task `env_cfg`; ties go to the
    lowest block index. Buffers only (no parameters, nothing in the state dict)."""

    def __init__(self, env_cfg: EnvConfig):
        super().__init__()
        h, w, p = env_cfg.grid_height, env_cfg.grid_width, env_cfg.state_pool
        self.num_uavs, self.pool = env_cfg.num_uavs, p
        # A UAV stands on a whole cell and a block's centre is the mean of whole rows and columns, so
        # twice an offset is a whole number: squared distances come, exact, from two small integer
        # tables summed by broadcasting, in int16 where they fit (one [F, N, P^2] int16 tensor per
        # step instead of float offsets: docs/performance.md, "Design choices, measured"). The
        # tables are int32 buffers cast per step: DDP broadcasts every buffer, and neither gloo nor
        # NCCL takes int16.
        # Cell r belongs to block r * P // H (as in the env): count cells and average coordinates.
        row_count, row_centre = _block_centres(h, p)
        col_count, col_centre = _block_centres(w, p)
        twice_dr = (2 * (row_centre[None, :] - torch.arange(h, dtype=torch.float64)[:, None])).round().long()
        twice_dc = (2 * (col_centre[None, :] - torch.arange(w, dtype=torch.float64)[:, None])).round().long()
        self.far = int(twice_dr.square().max() + twice_dc.square().max()) + 1  # above every squared distance
        self.sq_dtype = torch.int16 if self.far <= torch.iinfo(torch.int16).max else torch.int32
        self.register_buffer("row_sq", twice_dr.square().int(), persistent=False)  # [H, P]: (2 dr)^2
        self.register_buffer("col_sq", twice_dc.square().int(), persistent=False)  # [W, P]: (2 dc)^2
        # [P^2, 2]: block b's centre (row, column) in cells, read with one gather of the nearest block
        centre = torch.stack(torch.broadcast_tensors(row_centre[:, None], col_centre[None, :]), -1).view(-1, 2)
        self.register_buffer("centre", centre.float(), persistent=False)
        # A block holds an uncovered free cell where its blocked and covered fractions (whole cells
        # each) sum to less than 1 - 1/cells: below 1 - 0.5/cells, which absorbs their rounding.
        cells = (row_count[:, None] * col_count[None, :]).view(-1)
        self.register_buffer("filled_below", (1.0 - 0.5 / cells).float(), persistent=False)
        self.register_buffer("scale", torch.tensor([h - 1.0, w - 1.0]).clamp_min(1.0), persistent=False)
        self.diagonal = math.hypot(h - 1, w - 1) or 1.0

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        p, p2, n = self.pool, self.pool**2, self.num_uavs
        # summed in float32 (the cast is a no-op for a float32 state)
        filled = state[:, :p2].float() + state[:, p2 : 2 * p2]
        has = (filled < self.filled_below).view(-1, 1, p, p)
        # Positions are fractions of (H - 1, W - 1), rounded in the state's dtype: back to whole
        # cells (the product with the float32 scale is in float32).
        cell = (state[:, 2 * p2 : 2 * p2 + 2 * n].view(-1, n, 2) * self.scale).round()  # [F, N, 2]
        row, col = cell.long().unbind(-1)  # [F, N]
        row_sq, col_sq = self.row_sq.to(self.sq_dtype), self.col_sq.to(self.sq_dtype)
        sq = row_sq[row][:, :, :, None] + col_sq[col][:, :, None, :]  # [F, N, P, P]: (2 d)^2
        nearest, idx = torch.where(has, sq, self.far).view(-1, n, p2).min(-1)  # [F, N]
        off = self.centre[idx] - cell
        heading = torch.cat([off / self.scale, (nearest.float().sqrt() * (0.5 / self.diagonal))[..., None]], -1)
        return torch.where((nearest < self.far)[..., None], heading, 0.0)


def _block_centres(cells: int, pool: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(cells per block [P], mean coordinate per block [P])` float64 along one side of the map."""
    coords = torch.arange(cells, dtype=torch.float64)
    block = (coords * pool // cells).long()
    count = torch.zeros(pool, dtype=torch.float64).index_add_(0, block, torch.ones(cells, dtype=torch.float64))
    return count, torch.zeros(pool, dtype=torch.float64).index_add_(0, block, coords) / count
