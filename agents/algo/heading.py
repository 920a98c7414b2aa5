"""What the actor sees of the shared coverage map (`model.actor_shared_map`).

The global state's pooled map (blocked and covered fractions of `P x P` blocks) is in absolute
coordinates, so each UAV also gets its egocentric heading (`uavsim.heading`) to the nearest block
that still holds uncovered free cells, computed from the same state.

    heading [F, N, 3] = (d_row / (H - 1), d_col / (W - 1), distance / diagonal); zeros when the map
    has no uncovered block left.
"""

from __future__ import annotations

import torch

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.heading import HEADING_DIM, BlockHeading

__all__ = ["HEADING_DIM", "MapHeading"]


class MapHeading(BlockHeading):
    """`forward(state [F, S]) -> heading [F, N, 3]` float32 for the task `env_cfg`; ties go to the
    lowest block index. Buffers only (no parameters, nothing in the state dict)."""

    def __init__(self, env_cfg: EnvConfig):
        super().__init__(env_cfg)
        self.num_uavs = env_cfg.num_uavs
        # A block holds an uncovered free cell where its blocked and covered fractions (whole cells
        # each) sum to less than 1 - 1/cells: below 1 - 0.5/cells, which absorbs their rounding.
        cells = torch.as_tensor(rules.cells_per_block(env_cfg), dtype=torch.float64)
        self.register_buffer("filled_below", (1.0 - 0.5 / cells).float(), persistent=False)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        p2, n = self.pool**2, self.num_uavs
        # summed in float32 (the cast is a no-op for a float32 state)
        filled = state[:, :p2].float() + state[:, p2 : 2 * p2]
        flagged = (filled < self.filled_below)[:, None, :]  # [F, 1, P^2]: one map for every UAV
        # Positions are fractions of (H - 1, W - 1), rounded in the state's dtype: back to whole
        # cells (the product with the float32 scale is in float32).
        cell = (state[:, 2 * p2 : 2 * p2 + 2 * n].view(-1, n, 2) * self.scale).round()  # [F, N, 2]
        row, col = cell.long().unbind(-1)
        return super().forward(flagged, row, col)
