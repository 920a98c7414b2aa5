"""What the actor sees of the shared coverage map (`model.actor_shared_map`).

The global state's pooled map (blocked and covered fractions of `P x P` blocks) is in absolute
coordinates; a UAV far from every uncovered cell would have to learn, from its two position
scalars, where the map's uncovered blocks lie relative to itself. Measured: without help, a few
percent of episodes stall with the last cells out of every UAV's window. So each UAV also gets an
egocentric heading, computed from the same state: the offset to the centre of the nearest block
that still holds uncovered free cells (straight-line distance, obstacles ignored: the local window
handles those), and that distance.

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
    """`forward(state [F, S]) -> heading [F, N, 3]` float32. Buffers only (no parameters, nothing
    in the state dict)."""

    def __init__(self, env_cfg: EnvConfig):
        super().__init__()
        h, w, p = env_cfg.grid_height, env_cfg.grid_width, env_cfg.state_pool
        self.num_uavs, self.pool = env_cfg.num_uavs, p
        # Cell r belongs to block r * P // H (as in the env): count cells and average coordinates.
        rows = torch.arange(h, dtype=torch.float64)
        cols = torch.arange(w, dtype=torch.float64)
        row_block, col_block = (rows * p // h).long(), (cols * p // w).long()
        row_count = torch.zeros(p, dtype=torch.float64).index_add_(0, row_block, torch.ones(h, dtype=torch.float64))
        col_count = torch.zeros(p, dtype=torch.float64).index_add_(0, col_block, torch.ones(w, dtype=torch.float64))
        row_centre = torch.zeros(p, dtype=torch.float64).index_add_(0, row_block, rows) / row_count
        col_centre = torch.zeros(p, dtype=torch.float64).index_add_(0, col_block, cols) / col_count
        centres = torch.stack(torch.meshgrid(row_centre, col_centre, indexing="ij"), -1).view(p * p, 2)
        self.register_buffer("centres", centres.float(), persistent=False)  # [P^2, 2] in cells
        self.register_buffer("cells", (row_count[:, None] * col_count[None, :]).view(-1).float(), persistent=False)
        self.register_buffer("scale", torch.tensor([h - 1.0, w - 1.0]).clamp_min(1.0), persistent=False)
        self.diagonal = math.hypot(h - 1, w - 1) or 1.0

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        p2, n = self.pool**2, self.num_uavs
        s = state.float()
        uncovered = (1.0 - s[:, :p2] - s[:, p2:2 * p2]) * self.cells  # free cells not yet covered
        has = uncovered > 0.5  # counts are whole numbers; 0.5 absorbs the fractions' rounding
        pos = s[:, 2 * p2:2 * p2 + 2 * n].view(-1, n, 2) * self.scale  # [F, N, 2] cells
        offset = self.centres - pos[:, :, None, :]  # [F, N, P^2, 2]
        dist = offset.square().sum(-1).sqrt()
        dist = torch.where(has[:, None, :], dist, torch.full_like(dist, math.inf))
        nearest, idx = dist.min(-1)  # [F, N]
        found = torch.isfinite(nearest)
        off = offset.gather(2, idx[:, :, None, None].expand(-1, -1, 1, 2)).squeeze(2) / self.scale
        heading = torch.cat([off, (nearest / self.diagonal)[..., None]], -1)
        return torch.where(found[..., None], heading, torch.zeros_like(heading))
