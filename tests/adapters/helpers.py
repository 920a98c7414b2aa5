"""Shared small config and comparisons for the adapter tests."""

from __future__ import annotations

import numpy as np

from uavsim import EnvConfig

# Small and short (max_steps=12): episodes end often, so autoreset paths run within a few steps.
SMALL = EnvConfig(grid_height=12, grid_width=12, num_uavs=4, num_obstacles=8, max_steps=12, launch_size=2)
# The same map, easy to finish: some episodes terminate instead of truncating.
EASY = SMALL.replace(target_coverage=0.3, max_steps=20)


def as_np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def assert_obs_row(batched: dict, i: int, ref: dict, where: str) -> None:
    """Environment ``i`` of a batched observation equals a reference observation, bit for bit."""
    for key in ("local", "state"):
        got, want = as_np(batched[key][i]), ref[key]
        assert got.dtype == want.dtype == np.float32, (where, key)
        assert np.array_equal(got, want), f"{where}: obs[{key!r}] of env {i} differs"
