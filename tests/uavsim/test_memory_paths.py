"""`EnvConfig.path_radius`: the window paths search the onboard memory around each UAV."""

import numpy as np
import pytest
import torch

from uavsim import EnvConfig
from uavsim.dynamics import Layout
from uavsim.env import AUTORESET_MODES
from uavsim.memory import KNOWN_BLOCKED, KNOWN_COVERED, map_cells

from .helpers import run_lockstep
from .test_equivalence import SMALL_MAP_SET, WALLS

MEMORY_PATHS = dict(window_paths=True, comm_radius=0)


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize(
    "cfg",
    [
        WALLS.replace(**MEMORY_PATHS, path_radius=6),  # walls, a square far wider than the 3x3 window
        SMALL_MAP_SET.replace(window_paths=True, comm_radius=2, path_radius=5),  # shared memories, 8 moves
    ],
    ids=["walls-own-memory", "map-set-shared-memory"],
)
def test_memory_paths_match_the_reference_step_for_step(cfg, autoreset_mode):
    assert run_lockstep(cfg, 4, 3, 90, "prepared", partial_reset_every=11, autoreset_mode=autoreset_mode) >= 4


def test_memory_paths_on_the_default_task():
    run_lockstep(EnvConfig(**MEMORY_PATHS, obs_radius=6, path_radius=16), 2, 2, 40, "prepared")  # asserts each step


def paths_of(cfg: EnvConfig, known: np.ndarray, row: int, col: int) -> list[float]:
    """The paths values of one UAV at (row, col) whose memory holds the codes ``known [H, W]``."""
    lay = Layout(cfg, torch.device("cpu"))
    memory = lay.memory.blank.clone().view(1, 1, -1)
    map_cells(lay, memory).copy_(torch.from_numpy(known).view(1, 1, *known.shape))
    cell = lay.cells_of(torch.tensor([[[row, col]]]))
    if lay.path_square is None:  # the window: its codes are the truth, which the memory holds there
        window = torch.from_numpy(np.pad(known, cfg.obs_radius, constant_values=KNOWN_BLOCKED))
        r = cfg.obs_radius
        square = window[row : row + 2 * r + 1, col : col + 2 * r + 1].reshape(1, 1, -1)
        blocked, goal = square == KNOWN_BLOCKED, (square & 1) == 0
    else:
        blocked, goal = lay.path_square(memory, cell)
    return lay.paths(blocked, goal)[0, 0].tolist()


def test_the_memory_finds_the_way_round_a_wall_longer_than_the_window():
    # 20x20, everything known covered but one cell never seen (row 5, col 2), north of a wall along
    # row 9 from col 0 to col 7; the UAV at (10, 2) just south of it. The way: east to col 8, north
    # to row 5, west to col 2: 17 moves, past the 5x5 window, which shows no goal.
    known = np.full((20, 20), KNOWN_COVERED, dtype=np.uint8)
    known[9, :8] = KNOWN_BLOCKED
    known[5, 2] = 0
    base = EnvConfig(grid_height=20, grid_width=20, obs_radius=2, **MEMORY_PATHS)
    assert paths_of(base, known, 10, 2) == [0.0, 0.0, 0.0, 0.0, 1.0]  # north, south, west, east; far
    got = paths_of(base.replace(path_radius=10), known, 10, 2)  # 20 rounds
    assert got == [0.0, 0.0, 0.0, 1.0, np.float32(17) / np.float32(21)]  # east, 17 moves
    assert paths_of(base.replace(path_radius=8), known, 10, 2)[-1] == 1.0  # 16 rounds: out of reach


def test_off_the_map_is_blocked_and_a_cell_last_seen_free_is_a_goal():
    # The UAV in the corner (0, 0), all known covered but (0, 3), last seen free: east it is, 3
    # moves; the square reaches 6 cells past the map's north and west edges, none of them open.
    known = np.full((12, 12), KNOWN_COVERED, dtype=np.uint8)
    known[0, 3] = KNOWN_COVERED - 1  # 4: seen free
    cfg = EnvConfig(grid_height=12, grid_width=12, obs_radius=1, path_radius=6, **MEMORY_PATHS)
    assert paths_of(cfg, known, 0, 0) == [0.0, 0.0, 0.0, 1.0, np.float32(3) / np.float32(13)]
    known[0, 3] = KNOWN_COVERED
    assert paths_of(cfg, known, 0, 0) == [0.0, 0.0, 0.0, 0.0, 1.0]  # nothing left to visit


def test_memory_paths_keep_the_observation_size():
    cfg = EnvConfig(obs_radius=6, **MEMORY_PATHS)
    assert cfg.replace(path_radius=16).local_obs_dim == cfg.local_obs_dim


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(path_radius=-1), "EnvConfig.path_radius must be >= 0"),
        (dict(path_radius=8, window_paths=False), "must be 0 without window_paths"),
        (dict(path_radius=8, comm_radius=None), "must be 0 without onboard memory"),
        (dict(path_radius=2), r"must be >= obs_radius \(3\) or 0"),
        (dict(path_radius=32, grid_height=80, grid_width=80), "must be <= 31"),
    ],
)
def test_bad_path_radius_is_an_error_that_names_it(changes, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**{**MEMORY_PATHS, "obs_radius": 3, **changes})


def test_path_radius_must_be_an_int():
    with pytest.raises(TypeError, match="EnvConfig.path_radius must be an int"):
        EnvConfig(**MEMORY_PATHS, path_radius=8.0)
