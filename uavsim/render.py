"""Offscreen rendering to RGB uint8 NumPy images: no display, no pyglet.

Colours: free cells light grey, covered cells green, obstacles dark grey, sensor footprints a
lighter tint, UAVs as coloured squares (one hue each), optional trajectories as dots.
"""

from __future__ import annotations

import colorsys
from collections import abc
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from uavsim import rules
from uavsim.checks import check_int
from uavsim.config import EnvConfig

_FREE = np.array([225, 225, 225], dtype=np.uint8)
_COVERED = np.array([120, 200, 120], dtype=np.uint8)
_BLOCKED = np.array([60, 60, 70], dtype=np.uint8)


class BatchedEnv(Protocol):
    """What the drawing reads of a batched env: `uavsim.env.UAVSwarmEnv`, which imports this module
    to draw itself (``env.render()``), so it is named here by what it offers, not imported."""

    config: EnvConfig
    num_envs: int

    def read_state(self, *keys: str) -> tuple[Any, ...]: ...


def uav_colors(n: int) -> np.ndarray:
    """``[n, 3]`` uint8 distinct hues."""
    return np.array(
        [[int(255 * c) for c in colorsys.hsv_to_rgb(i / max(n, 1), 0.85, 0.9)] for i in range(n)], dtype=np.uint8
    )


def check_cell_px(cell_px: object) -> int:
    """``cell_px`` as a plain int if it is an integer >= 2 (pixels per grid cell; NumPy's too), else a
    `TypeError` / `ValueError`: the adapters check it when built, not at their first ``render()``."""
    return check_int("cell_px", cell_px, 2)


def check_env_index(env: BatchedEnv, env_index: Any) -> int:
    """``env_index`` as a plain int if it names one environment of ``env``."""
    return check_int("env_index", env_index, 0, env.num_envs)


def _env_index_list(env: BatchedEnv, env_indices: Any) -> list[int]:
    """A sequence, 1-D array or 1-D tensor of environment indices as a list of plain ints."""
    if hasattr(env_indices, "dtype") and hasattr(env_indices, "shape"):  # NumPy array or torch tensor
        dtype = str(env_indices.dtype)  # by name: this module draws for torch-free workers too
        if len(env_indices.shape) != 1 or "int" not in dtype:
            raise TypeError(f"env_indices must be 1-D integers, got {dtype} of shape {tuple(env_indices.shape)}")
        env_indices = env_indices.tolist()  # the image is drawn on the host anyway
    elif isinstance(env_indices, (str, bytes, abc.Mapping)) or not isinstance(env_indices, abc.Iterable):
        raise TypeError(f"env_indices must be a sequence of ints, got {type(env_indices).__name__}")
    else:  # a generator, a range, a set: drawn in the order it gives
        env_indices = list(env_indices)
    if len(env_indices) == 0:
        raise ValueError("env_indices must not be empty")
    return [check_int(f"env_indices[{k}]", i, 0, env.num_envs) for k, i in enumerate(env_indices)]


def render_grid(
    cfg: EnvConfig, codes: np.ndarray, pos: np.ndarray, cell_px: int = 8, trail: np.ndarray | None = None
) -> np.ndarray:
    """Draw one map.

    Args:
        cfg: the task (for the sensor footprint).
        codes: ``[H, W]`` cell codes (``rules.FREE/COVERED/BLOCKED``) of the map, no border.
        pos: ``[N, 2]`` UAV (row, col).
        cell_px: pixels per grid cell, >= 2.
        trail: optional ``[T, N, 2]`` earlier positions, drawn as small dots.

    Returns:
        ``[H * cell_px, W * cell_px, 3]`` uint8.
    """
    cell_px = check_cell_px(cell_px)
    h, w = codes.shape
    rgb = np.where(
        (codes == rules.BLOCKED)[..., None], _BLOCKED, np.where((codes == rules.COVERED)[..., None], _COVERED, _FREE)
    ).astype(np.int32)
    foot = rules.footprint_offsets(cfg)
    tint = np.zeros((h, w), dtype=bool)
    for r, c in pos:
        rr, cc = r + foot[:, 0], c + foot[:, 1]
        ok = (rr >= 0) & (rr < h) & (cc >= 0) & (cc < w)
        tint[rr[ok], cc[ok]] = True
    rgb[tint & (codes != rules.BLOCKED)] += 25
    img = np.repeat(np.repeat(np.clip(rgb, 0, 255).astype(np.uint8), cell_px, 0), cell_px, 1)
    colors = uav_colors(len(pos))
    if trail is not None:
        half, dot = cell_px // 2, max(1, cell_px // 4)
        for step in trail:
            for i, (r, c) in enumerate(step):
                y, x = r * cell_px + half, c * cell_px + half
                img[y - dot // 2 : y - dot // 2 + dot, x - dot // 2 : x - dot // 2 + dot] = colors[i]
    m = min(max(1, cell_px // 6), (cell_px - 1) // 2)  # the UAV's margin in its cell; at 2 px: none, the whole cell
    for i, (r, c) in enumerate(pos):
        img[r * cell_px + m : (r + 1) * cell_px - m, c * cell_px + m : (c + 1) * cell_px - m] = colors[i]
    return img


def env_codes(env: BatchedEnv, env_index: int) -> tuple[np.ndarray, np.ndarray]:
    """``(codes [H, W], pos [N, 2])`` of one environment of a batched env, on the host."""
    cfg, p = env.config, env.config.pad
    env_index = check_env_index(env, env_index)
    cells, pos = env.read_state("cells", "pos")  # not the whole state: it decodes every UAV's memory too
    grid = cells[env_index].view(cfg.grid_height + 2 * p, -1)[p : p + cfg.grid_height, p : p + cfg.grid_width]
    # copies (CPU arrays would alias the state); int64 positions: pixel arithmetic on int16 would wrap
    return grid.cpu().numpy().copy(), pos[env_index].cpu().numpy().astype(np.int64)


def render_env(env: BatchedEnv, env_index: int = 0, cell_px: int = 8, trail: np.ndarray | None = None) -> np.ndarray:
    """`render_grid` of environment ``env_index`` of a batched env."""
    codes, pos = env_codes(env, env_index)
    return render_grid(env.config, codes, pos, cell_px, trail)


def render_frames(env: BatchedEnv, env_indices: Any, cell_px: int = 4) -> list[np.ndarray]:
    """`render_env` of each of ``env_indices`` (as `render_tiled` takes them), the state read from the
    device once for all of them (one read each would be thousands of device reads for a whole batch)."""
    env_indices = _env_index_list(env, env_indices)
    cfg, p = env.config, env.config.pad
    cells, pos = env.read_state("cells", "pos")
    grid = cells[env_indices].view(len(env_indices), cfg.grid_height + 2 * p, -1)  # a list index: a copy
    codes = grid[:, p : p + cfg.grid_height, p : p + cfg.grid_width].cpu().numpy()
    pos = pos[env_indices].cpu().numpy().astype(np.int64)  # int64: pixel arithmetic on int16 would wrap
    return [render_grid(cfg, codes[k], pos[k], cell_px) for k in range(len(env_indices))]


def render_tiled(
    env: BatchedEnv, env_indices: Sequence[int], cols: int | None = None, cell_px: int = 4, gap: int = 2
) -> np.ndarray:
    """Several environments side by side in a grid of tiles, white gaps between them.

    Args:
        env: the batched env.
        env_indices: a sequence, 1-D array or 1-D tensor of ints.
        cols: tiles per row (None: about the square root of their number).
        cell_px: pixels per grid cell.
        gap: pixels between tiles.

    Returns:
        One ``[height, width, 3]`` uint8 image.
    """
    env_indices = _env_index_list(env, env_indices)
    cols = int(np.ceil(np.sqrt(len(env_indices)))) if cols is None else check_int("cols", cols, 1)
    gap = check_int("gap", gap, 0)
    tiles = render_frames(env, env_indices, cell_px)
    rows = -(-len(tiles) // cols)
    th, tw = tiles[0].shape[:2]
    out = np.full((rows * (th + gap) - gap, cols * (tw + gap) - gap, 3), 255, dtype=np.uint8)
    for k, tile in enumerate(tiles):
        r, c = divmod(k, cols)
        out[r * (th + gap) : r * (th + gap) + th, c * (tw + gap) : c * (tw + gap) + tw] = tile
    return out
