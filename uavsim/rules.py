"""The rules of the cooperative coverage task, and the constant tables both implementations share.

This module is the single statement of the rules. ``uavsim.env.UAVSwarmEnv`` (batched torch) and
``uavsim.reference.ReferenceEnv`` (one environment, NumPy) both implement exactly this, and the
tests check that they agree step for step, bit for bit. It imports NumPy only.

World
    A ``grid_height x grid_width`` map of cells, addressed ``(row, col)``, row 0 at the top.
    Outside the map counts as blocked.

Episode start (``seed``, ``env_index``, ``episode`` fix everything, through ``uavsim.rng``)
    * The episode index counts from 0, modulo 2**31 (the RNG's key range): after 2**31 episodes an
      environment's maps repeat.
    * ``num_obstacles`` rectangles. Obstacle ``k`` uses draws ``4k .. 4k+3``:
      height ``h = min + below(d0, max - min + 1)``, width ``w`` likewise from ``d1``,
      top row ``below(d2, H - h + 1)``, left column ``below(d3, W - w + 1)``
      (``min``/``max`` are ``obstacle_min_size``/``obstacle_max_size``). Rectangles may overlap.
    * Then ``num_walls`` walls, one cell thick. Wall ``k`` uses draws ``4(num_obstacles + k) ..``
      ``+3``: vertical when ``below(d0, 2) == 1`` (else horizontal), length
      ``l = wall_min_length + below(d1, wall_max_length - wall_min_length + 1)``; it is then the
      rectangle of height ``l`` and width 1 (vertical) or height 1 and width ``l``, placed from ``d2``
      and ``d3`` as above. Walls may cross rectangles and each other.
    * The launch area, the ``launch_size`` square in the top-left corner, is then cleared of
      obstacles. Launch cell ``j`` is ``(j // launch_size, j % launch_size)`` and gets the key
      ``hash(draw 4*(num_obstacles + num_walls) + j) * L + j`` (``L`` launch cells; keys are distinct). UAV ``n``
      starts on the launch cell with the ``n``-th smallest key, so starts are distinct.
    * Every UAV covers its sensor footprint (below). No reward is given for this.
    * With a map set (``EnvConfig.maps``, `uavsim.maps`: ``M`` maps in the set's order) no
      rectangles are drawn: the map is map ``below(draw 0, M)`` of the set (`MAP_DRAW`), as it is
      (the set is checked to keep the launch area free), and launch cell ``j`` uses draw ``1 + j``.
      ``num_obstacles``, ``num_walls`` and their sizes play no part.

Step (all UAVs act at once)
    * Action ``a`` moves a UAV by ``MOVES[a]`` (0 hovers; 1-4 N, S, W, E; with ``moves=8`` also
      5-8 NW, NE, SW, SE). A move whose target is blocked (an obstacle or off the map) leaves the
      UAV where it was and counts as a **collision** for that UAV. UAVs never block each other.
    * A UAV that ends the step in a cell shared with another UAV has a **near miss**.
    * Each UAV covers the free cells of its footprint: offsets ``(dr, dc)`` with
      ``dr^2 + dc^2 <= sensor_radius^2``. Coverage never decreases within an episode.
    * ``coverage = covered free cells / free cells`` (float32).
    * Reward of UAV ``i`` (float32 arithmetic, in this order)::

          team = coverage_reward * (newly_covered / free_cells) - time_penalty
          r_i  = team - collision_penalty * collided_i - near_miss_penalty * near_miss_i

    * ``terminated`` when ``coverage >= target_coverage``; ``truncated`` when the episode has
      taken ``max_steps`` steps and is not terminated (the two are never both true).
    * The episode's return (``info["episode_return"]``) is the mean over UAVs of their float32
      reward sums, summed in float64 (``mean_return``): exact for a few float32 values, whatever
      the order of the additions.

Local observation of UAV ``i`` (float32, ``local_obs_dim = 3 * window^2 + 3``, + the memory below)
    Three egocentric ``window x window`` channels (``window = 2 * obs_radius + 1``, rows then
    columns, ``dr`` and ``dc`` from ``-obs_radius`` to ``obs_radius``), then three scalars:
    ``[blocked (obstacle or off-map: 1), covered (1), other UAVs (count in the cell, self excluded),
    row / (H - 1), col / (W - 1), t / max_steps]``.

Onboard memory (``comm_radius`` not None; `uavsim.memory`)
    Each UAV remembers a code per map cell: 0 unknown, else 4 + the cell's state when last seen
    (free 4, covered 5, blocked 7). At the episode start after the launch, and every step after
    the moves and the coverage: each UAV writes the cells of its observation window (their state
    now) into its memory; then each takes the element-wise max of the memories (just written) of
    the UAVs within Chebyshev distance ``comm_radius`` of it, itself included (one hop per step;
    ``comm_radius`` 0: none, not even on a shared cell). Its local observation then ends with
    ``[known blocked cells / cells per block (P^2), known covered cells / cells per block (P^2),
    heading (3)]`` (``local_obs_dim`` grows by ``2 * P^2 + 3``; blocks as in the global state).
    The heading points to the nearest block (squared distance between the UAV's cell and the mean
    cell of the block; the lowest block index on ties) holding a cell the UAV knows neither blocked
    nor covered: ``(d_row / (H - 1), d_col / (W - 1), (distance / diagonal)^2)`` with diagonal
    ``hypot(H - 1, W - 1)``, zeros when there is none (`uavsim.heading`).

Window paths (``window_paths``; `uavsim.window_paths`)
    The local observation then ends with ``moves + 1`` values: breadth-first distances, in moves of
    the move set, from each cell of the UAV's window to the nearest window cell that is free and not
    covered, through window cells that are not blocked (outside the window: blocked), searched
    ``window_path_rounds`` deep (farther: that + 1); for each move ``1 .. moves`` 1 if its cell is
    closer than the UAV's own, else 0; then the own cell's distance / (``window_path_rounds`` + 1).
    With ``path_radius`` R > 0 (onboard memory needed) the same search runs over the UAV's memory in
    the ``(2R + 1)^2`` square centred on it instead of its window: goals are the square's map cells
    the memory does not know blocked or covered (codes 0 and 4: unknown or last seen free), paths
    pass through its map cells not known blocked (off the map: blocked), ``2R`` rounds deep. A
    corridor's exit farther than the window then still shows.

Global state (float32, ``state_dim = 2 * P^2 + 2 * N + 2`` with ``P = state_pool``)
    Cell ``(r, c)`` belongs to block ``(r * P // H, c * P // W)``. The state is
    ``[blocked cells / cells per block (P^2), covered cells / cells per block (P^2),
    (row / (H - 1), col / (W - 1)) of each UAV (2N), t / max_steps, coverage]``.
"""

from __future__ import annotations

import numpy as np

from uavsim.config import EnvConfig

# Cell codes of the padded grid the batched env keeps (the reference keeps two bool grids).
# Chosen so that bit 1 means blocked and bit 0 means covered: observations decode them by shifts.
FREE, COVERED, BLOCKED = 0, 1, 2

_MOVES_8 = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1], [-1, -1], [-1, 1], [1, -1], [1, 1]], dtype=np.int64)
_ACTION_NAMES_8 = ("hover", "north", "south", "west", "east", "northwest", "northeast", "southwest", "southeast")


def move_table(cfg: EnvConfig) -> np.ndarray:
    """``[num_actions, 2]`` int64 (d_row, d_col) of each action."""
    return _MOVES_8[: cfg.num_actions].copy()


def action_names(cfg: EnvConfig) -> list[str]:
    """The name of each action, in ``move_table``'s order (north: row - 1)."""
    return list(_ACTION_NAMES_8[: cfg.num_actions])


def footprint_offsets(cfg: EnvConfig) -> np.ndarray:
    """``[F, 2]`` int64 offsets a UAV covers, row-major order."""
    r = cfg.sensor_radius
    return np.array(
        [(dr, dc) for dr in range(-r, r + 1) for dc in range(-r, r + 1) if dr * dr + dc * dc <= r * r],
        dtype=np.int64,
    )


def window_offsets(cfg: EnvConfig, radius: int | None = None) -> np.ndarray:
    """``[window^2, 2]`` int64 offsets of the egocentric window, row-major order (of the square of
    half side ``radius`` if given)."""
    r = cfg.obs_radius if radius is None else radius
    return np.array([(dr, dc) for dr in range(-r, r + 1) for dc in range(-r, r + 1)], dtype=np.int64)


def launch_cells(cfg: EnvConfig) -> np.ndarray:
    """``[launch_size^2, 2]`` int64 cells of the launch area; index ``j`` is launch cell ``j``."""
    j = np.arange(cfg.launch_size**2, dtype=np.int64)
    return np.stack([j // cfg.launch_size, j % cfg.launch_size], axis=1)


def path_search_radius(cfg: EnvConfig) -> int:
    """The half side of the square the window paths search (`uavsim.window_paths`): the window's,
    or ``path_radius`` where that searches the onboard memory."""
    return cfg.path_radius or cfg.obs_radius


def window_path_rounds(cfg: EnvConfig) -> int:
    """How deep the window paths search (`uavsim.window_paths`): any path within one side of the square."""
    return 2 * path_search_radius(cfg)


def block_of_cell(cfg: EnvConfig) -> np.ndarray:
    """``[H * W]`` int64 pooled-block index of each map cell (row-major)."""
    rows = np.arange(cfg.grid_height, dtype=np.int64) * cfg.state_pool // cfg.grid_height
    cols = np.arange(cfg.grid_width, dtype=np.int64) * cfg.state_pool // cfg.grid_width
    return (rows[:, None] * cfg.state_pool + cols[None, :]).reshape(-1)


def cells_per_block(cfg: EnvConfig) -> np.ndarray:
    """``[P^2]`` int64 number of map cells in each pooled block."""
    return np.bincount(block_of_cell(cfg), minlength=cfg.state_pool**2).astype(np.int64)


def obstacle_draw(k: int) -> int:
    """First draw index of obstacle ``k`` (it uses four: height, width, top row, left column)."""
    return 4 * k


def wall_draw(cfg: EnvConfig, k: int) -> int:
    """First draw index of wall ``k`` (four: orientation, length, top row, left column), after the rectangles'."""
    return 4 * (cfg.num_obstacles + k)


MAP_DRAW = 0  # with a map set: the draw that picks the episode's map


def launch_draw(cfg: EnvConfig, j: int) -> int:
    """Draw index of launch cell ``j``'s ordering key (after the obstacles' draws, or the map's)."""
    return (MAP_DRAW + 1 if cfg.maps is not None else 4 * (cfg.num_obstacles + cfg.num_walls)) + j


def mean_return(episode_reward: np.ndarray) -> np.float32:
    """The episode's return: the mean of the UAVs' float32 reward sums ``[N]``, summed in float64
    (the batched env computes the same in torch, ``uavsim.env.mean_return``)."""
    return np.float32(episode_reward.astype(np.float64).sum() / episode_reward.shape[0])
