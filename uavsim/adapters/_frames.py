"""Drawing a `ReferenceEnv` with `uavsim.render` (NumPy only: no torch in reference workers)."""

from __future__ import annotations

import numpy as np

from uavsim import rules
from uavsim.reference import ReferenceEnv
from uavsim.render import render_grid


def reference_codes(ref: ReferenceEnv) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [H, W] uint8, pos [N, 2] int64)`` of a reset `ReferenceEnv`, in `rules` cell codes."""
    if ref.episode < 0:
        raise RuntimeError("call reset() before rendering")
    cfg, p = ref.config, ref.config.pad
    interior = (slice(p, p + cfg.grid_height), slice(p, p + cfg.grid_width))
    blocked, covered = ref.blocked[interior], ref.covered[interior]
    codes = np.where(blocked, rules.BLOCKED, np.where(covered, rules.COVERED, rules.FREE)).astype(np.uint8)
    return codes, ref.pos.copy()


def render_reference(ref: ReferenceEnv, cell_px: int = 8, trail: np.ndarray | None = None) -> np.ndarray:
    """RGB uint8 ``[H * cell_px, W * cell_px, 3]`` image of a `ReferenceEnv`."""
    codes, pos = reference_codes(ref)
    return render_grid(ref.config, codes, pos, cell_px, trail)
