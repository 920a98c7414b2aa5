"""`EnvConfig.window_paths`: the moves toward the nearest uncovered free cell of each UAV's window."""

import numpy as np
import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.env import AUTORESET_MODES
from uavsim.reference import window_paths_reference
from uavsim.window_paths import WindowPaths

from .helpers import run_lockstep
from .test_equivalence import SMALL_8_MOVES, SMALL_MAP_SET, TALL_SPARSE

# A UAV at the centre (3, 3) of a 7x7 window: the one uncovered cell (U) is straight north of it,
# behind a wall (# blocked, . covered). Round the wall's west end: 6 moves; round its east end: 8.
WALLED = [
    ".......",
    "...U...",
    "..####.",
    ".......",
    ".......",
    ".......",
    ".......",
]


def windows(rows: list[str]) -> tuple[np.ndarray, np.ndarray]:
    grid = np.array([list(r) for r in rows])
    return grid == "#", grid == "U"


def test_the_path_goes_round_a_wall_the_straight_line_would_hit():
    cfg = EnvConfig(obs_radius=3, window_paths=True)  # moves 4: north, south, west, east
    blocked, uncovered = windows(WALLED)
    got = window_paths_reference(cfg, blocked, uncovered)
    assert got.tolist() == [0.0, 0.0, 1.0, 0.0, np.float32(6) / np.float32(7)]  # north, south, west, east; 6 / (6 + 1)
    module = WindowPaths(cfg)
    out = module(torch.from_numpy(blocked).view(1, 1, -1), torch.from_numpy(uncovered).view(1, 1, -1))
    assert np.array_equal(out[0, 0].numpy(), got)


def test_a_cell_out_of_reach_reads_as_far_and_no_move_is_closer():
    cfg = EnvConfig(obs_radius=2, window_paths=True)
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[1, :] = True  # a full wall: the uncovered corner cannot be reached in the window
    uncovered = np.zeros((5, 5), dtype=bool)
    uncovered[0, 0] = True
    assert window_paths_reference(cfg, blocked, uncovered).tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    uncovered[4, 4] = True  # and one that can: 2 + 2 moves, south or east get closer
    got = window_paths_reference(cfg, blocked, uncovered).tolist()
    assert got == [0.0, 1.0, 0.0, 1.0, np.float32(4) / np.float32(5)]


# Every form of the bit sets: a row table over int16 sets (windows up to 15 cells across: radius 7),
# shifts on int32 rows (17 to 31 cells: radius 8 to 15) and on int64 rows (beyond).
@pytest.mark.parametrize("moves, radius", [(4, 1), (4, 6), (8, 3), (4, 7), (8, 7), (8, 8), (4, 12), (8, 31)])
def test_the_bit_set_search_equals_the_breadth_first_reference(moves, radius):
    cfg = EnvConfig(obs_radius=radius, moves=moves, window_paths=True, grid_height=64, grid_width=64)
    w = cfg.window
    g = torch.Generator().manual_seed(radius)
    blocked = torch.rand(6, 4, w * w, generator=g) < 0.35
    uncovered = torch.rand(6, 4, w * w, generator=g) < 0.05
    out = WindowPaths(cfg)(blocked, uncovered)
    assert out.shape == (6, 4, moves + 1) and out.dtype == torch.float32
    for f in range(6):
        for n in range(4):
            ref = window_paths_reference(cfg, blocked[f, n].view(w, w).numpy(), uncovered[f, n].view(w, w).numpy())
            assert np.array_equal(out[f, n].numpy(), ref), (f, n)


@pytest.mark.parametrize("radius", [1, 6, 7])
def test_the_search_from_float_channels_equals_the_reference(radius):
    # The turned search's open and goal rows as one product of the observation's (blocked, covered)
    # float32 channels (`WindowPaths.search_channels`): the goals are the free cells.
    cfg = EnvConfig(obs_radius=radius, window_paths=True, grid_height=64, grid_width=64)
    w, paths = cfg.window, WindowPaths(cfg)
    assert paths.can_search_channels(torch.float32) and not paths.can_search_channels(torch.bfloat16)
    code = torch.randint(0, 3, (6, 4, w * w), generator=torch.Generator().manual_seed(radius))  # free, covered, blocked
    code[..., : w * w // 3] = 1  # a third of each window covered: some goals far or out of reach
    blocked, covered = code == 2, code == 1
    out = paths.search_channels(torch.cat([blocked, covered], -1).float(), torch.empty(6, 4, 5))
    for f in range(6):
        for n in range(4):
            free = ~(blocked[f, n] | covered[f, n])
            ref = window_paths_reference(cfg, blocked[f, n].view(w, w).numpy(), free.view(w, w).numpy())
            assert np.array_equal(out[f, n].numpy(), ref), (f, n)


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize(
    "cfg",
    [SMALL_8_MOVES.replace(window_paths=True), TALL_SPARSE.replace(window_paths=True, comm_radius=0)],
    ids=["small-8-moves", "tall-with-memory"],
)
def test_window_paths_match_the_reference_step_for_step(cfg, autoreset_mode):
    assert run_lockstep(cfg, 4, 3, 90, "prepared", partial_reset_every=11, autoreset_mode=autoreset_mode) >= 4


def test_window_paths_on_a_map_set_and_the_default_task_with_memory():
    assert run_lockstep(SMALL_MAP_SET.replace(window_paths=True, comm_radius=2), 3, 5, 60, "prepared") >= 3
    run_lockstep(EnvConfig(window_paths=True, comm_radius=0, obs_radius=6), 2, 2, 40, "prepared")  # asserts each step


def test_the_paths_are_the_local_observations_tail_and_off_by_default():
    cfg = EnvConfig(obs_radius=6, comm_radius=0)
    on = cfg.replace(window_paths=True)
    assert on.local_obs_dim == cfg.local_obs_dim + cfg.moves + 1 and cfg.paths_obs_dim == 0
    a, b = UAVSwarmEnv(cfg, num_envs=2, seed=4), UAVSwarmEnv(on, num_envs=2, seed=4)
    oa, ob = a.reset(), b.reset()
    assert torch.equal(ob["local"][..., : cfg.local_obs_dim], oa["local"])  # the rest unchanged
    tail = ob["local"][..., cfg.local_obs_dim :]
    assert ((tail[..., :-1] == 0) | (tail[..., :-1] == 1)).all() and (tail[..., -1] > 0).all()


@pytest.mark.parametrize("value", [1, "yes", None])
def test_window_paths_must_be_a_bool(value):
    with pytest.raises(TypeError, match="EnvConfig.window_paths must be a bool"):
        EnvConfig(window_paths=value)


def test_window_paths_refuse_windows_wider_than_a_bit_set():
    # the config refuses it (the NumPy reference, and so its adapters, would have played it; the batched env not)
    with pytest.raises(ValueError, match=r"EnvConfig.obs_radius must be <= 31 with window_paths"):
        EnvConfig(obs_radius=32, grid_height=34, grid_width=34, window_paths=True)
    widest = EnvConfig(obs_radius=31, grid_height=34, grid_width=34, window_paths=True, num_uavs=2, max_steps=3)
    UAVSwarmEnv(widest, num_envs=1).reset()
    assert EnvConfig(obs_radius=32, grid_height=34, grid_width=34).obs_radius == 32  # without the paths: any radius


def test_the_observation_space_holds_the_memory_heading_and_the_paths():
    # the heading's offsets are negative to the north and west: the space's low bound says so
    from uavsim.adapters.spaces import local_space

    cfg = EnvConfig(comm_radius=0, window_paths=True, num_uavs=4)
    space = local_space(cfg)
    env = UAVSwarmEnv(cfg, num_envs=3, seed=2)
    obs, negative = env.reset(), False
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        for row in obs["local"].reshape(-1, cfg.local_obs_dim).numpy():
            assert space.contains(row)
        negative |= bool((obs["local"] < 0).any())
        obs, *_ = env.step(torch.randint(0, cfg.num_actions, (3, 4), generator=g))
    assert negative  # the case the bound is for did occur
