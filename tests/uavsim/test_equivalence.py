"""Step-exact equivalence: env i of a batch plays exactly ReferenceEnv(seed, env_index=i)."""

from pathlib import Path

import pytest
import torch

from uavsim import EnvConfig
from uavsim.env import AUTORESET_MODES, RESET_MODES

from .helpers import run_lockstep

SMALL_8_MOVES = EnvConfig(
    grid_height=10,
    grid_width=12,
    num_uavs=3,
    num_obstacles=6,
    max_steps=30,
    launch_size=2,
    sensor_radius=1,
    obs_radius=2,
    moves=8,
    target_coverage=0.6,
    state_pool=4,
)
TALL_SPARSE = EnvConfig(
    grid_height=20,
    grid_width=9,
    num_uavs=4,
    num_obstacles=3,
    max_steps=25,
    obstacle_max_size=6,
    launch_size=3,
    sensor_radius=3,
    obs_radius=1,
    moves=4,
    target_coverage=0.5,
    state_pool=3,
)
LARGE = EnvConfig(
    grid_height=48,
    grid_width=40,
    num_uavs=12,
    num_obstacles=60,
    max_steps=40,
    obstacle_max_size=5,
    launch_size=4,
    sensor_radius=2,
    obs_radius=4,
    moves=8,
    state_pool=8,
)
# long walls crossing rectangles and each other (rows and columns of one cell), on a non-square map
WALLS = TALL_SPARSE.replace(num_obstacles=4, num_walls=5, wall_min_length=3, wall_max_length=9, target_coverage=0.8)
# 64 UAVs: the grid's UAV counts need 13 bits, so the grid is int16 (BLOCKED is 3 << 13); its episode start once
# wrote the obstacles through a uint8 product that wrapped to 0, and every obstacle was lost. Onboard memory too.
CROWD = EnvConfig(
    grid_height=20,
    grid_width=20,
    num_uavs=64,
    launch_size=8,
    num_obstacles=15,
    max_steps=30,
    sensor_radius=1,
    obs_radius=2,
    state_pool=4,
    comm_radius=0,
    target_coverage=0.7,
)
# a sensor wider than the grid's short side (its footprint's offsets past a side cover nothing): the episode
# bounds sliced NumPy arrays from their ends there, and the batched env could not be built
WIDE_SENSOR = EnvConfig(
    grid_height=4,
    grid_width=8,
    num_uavs=2,
    launch_size=2,
    num_obstacles=2,
    obstacle_max_size=2,
    sensor_radius=5,
    max_steps=12,
    state_pool=2,
)
MAPS = Path(__file__).resolve().parents[2] / "examples" / "maps"
EXAMPLE_MAPS = EnvConfig(maps=str(MAPS))  # the default task on the example map set
# a map set of SMALL_8_MOVES's size (tests/uavsim/maps): rooms, a ring, and a pocket whose launch
# footprints already meet the target (one-step episodes)
SMALL_MAP_SET = SMALL_8_MOVES.replace(maps=str(Path(__file__).resolve().parent / "maps"))


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
@pytest.mark.parametrize(
    "cfg, num_envs, seed, steps",
    [
        (EnvConfig(), 4, 0, 450),  # default task: 4 moves, 32x32, two full episodes (truncations)
        (SMALL_8_MOVES, 7, 11, 400),  # many terminations and truncations
        (TALL_SPARSE, 3, 2**31 - 1, 300),  # non-square grid, uneven pooling blocks, largest seed
        (LARGE, 2, 5, 90),
        (WALLS, 5, 3, 300),
        (EXAMPLE_MAPS, 4, 0, 450),  # map sets: each episode plays one of the set's maps
        (SMALL_MAP_SET, 7, 11, 300),
        (CROWD, 2, 1, 70),
        (WIDE_SENSOR, 3, 4, 40),
    ],
    ids=[
        "default",
        "small-8-moves",
        "tall",
        "large",
        "walls",
        "example-maps",
        "small-map-set",
        "crowd-64",
        "wide-sensor",
    ],
)
def test_batched_matches_reference(cfg, num_envs, seed, steps, reset_mode, autoreset_mode):
    ended = run_lockstep(cfg, num_envs, seed, steps, reset_mode, autoreset_mode=autoreset_mode)
    assert ended >= num_envs  # auto-resets were exercised


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
@pytest.mark.parametrize("cfg", [SMALL_8_MOVES, SMALL_MAP_SET], ids=["small-8-moves", "small-map-set"])
def test_equivalence_through_partial_resets(cfg, reset_mode, autoreset_mode):
    ended = run_lockstep(
        cfg, 6, 3, 240, reset_mode, partial_reset_every=17, action_seed=1, autoreset_mode=autoreset_mode
    )
    assert ended > 0


@pytest.mark.parametrize("obs_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize(
    "cfg, num_envs, steps", [(EnvConfig(), 3, 230), (SMALL_8_MOVES, 5, 120)], ids=["default", "small-8-moves"]
)
def test_narrow_observations_are_the_references_cast_exactly(cfg, num_envs, steps, autoreset_mode, obs_dtype):
    # Positions, time, pools and coverage are fractions: rounded once, from the rules' float32 value.
    ended = run_lockstep(cfg, num_envs, 4, steps, "prepared", autoreset_mode=autoreset_mode, obs_dtype=obs_dtype)
    assert ended >= num_envs


def test_episode_return_and_the_episode_counter_match_the_reference_exactly_at_their_limits():
    # The mean over UAVs is summed in float64 on both sides: torch's and NumPy's float32 reductions
    # add in different orders and used to differ in the last bit on the default task. And both wrap
    # the episode index at the end of the RNG's key range (the reference used to raise, torch to run
    # past it).
    import numpy as np
    import torch

    from uavsim.env import UAVSwarmEnv
    from uavsim.reference import ReferenceEnv
    from uavsim.rng import MAX_KEY

    cfg = EnvConfig(max_steps=1)
    env, ref = UAVSwarmEnv(cfg, num_envs=1, seed=2), ReferenceEnv(cfg, seed=2)
    env.reset()
    ref.reset()  # both play episode 0's map; relabel it as two episodes before the key range ends
    state = env.state_dict()
    state["state"]["episode"][:] = MAX_KEY - 2
    env.load_state_dict(state)
    ref.episode = MAX_KEY - 2
    for step in range(4):  # one-step episodes: the next ones are MAX_KEY - 1, 0, 1, 2
        actions = (torch.arange(cfg.num_uavs) + step) % cfg.num_actions
        obs, _, _, _, info = env.step(actions.view(1, -1))
        _, _, _, _, r_info = ref.step(actions.numpy())
        assert info["episode_return"][0].numpy() == r_info["episode_return"]
        r_obs = ref.reset()
        assert int(env.state["episode"][0]) == ref.episode == (MAX_KEY - 1 + step) % MAX_KEY
        assert np.array_equal(obs["state"][0].numpy(), r_obs["state"])


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
@pytest.mark.parametrize("comm_radius", [None, 0, 3, 64], ids=["no-memory", "own-memory", "radius-3", "everyone"])
def test_memory_and_sharing_match_the_reference(comm_radius, reset_mode, autoreset_mode):
    # The pooled memory in obs["local"] after every step, reset and partial reset; 64 is past the map.
    cfg = SMALL_8_MOVES.replace(comm_radius=comm_radius, num_uavs=4)
    ended = run_lockstep(cfg, 5, 7, 120, reset_mode, partial_reset_every=13, autoreset_mode=autoreset_mode)
    assert ended >= 5


@pytest.mark.parametrize(
    "cfg, obs_dtype",
    [
        (EnvConfig(comm_radius=4), torch.float32),  # the default task, memory sharing within 4 cells
        (TALL_SPARSE.replace(comm_radius=2), torch.bfloat16),  # uneven pooling blocks, narrow observations
        (SMALL_MAP_SET.replace(comm_radius=3), torch.float32),
    ],
    ids=["default", "tall-bf16", "small-map-set"],
)
def test_memory_matches_the_reference_on_other_tasks(cfg, obs_dtype):
    assert run_lockstep(cfg, 3, 1, 240, "prepared", obs_dtype=obs_dtype) >= 3


@pytest.mark.parametrize("cfg", [EnvConfig(), SMALL_8_MOVES, LARGE], ids=["default", "small-8-moves", "large"])
def test_the_team_reward_table_holds_the_steps_own_arithmetic_bit_for_bit(cfg):
    # Every (free, newly) pair a step can meet, in the narrow integer dtypes the step used to divide.
    from uavsim.dynamics import Layout, team_reward_table

    table = team_reward_table(cfg)
    lay = Layout(cfg, torch.device("cpu"))
    dtype = lay.record.fields["clock"].dtype
    rows, cols = table.shape
    assert rows == cfg.grid_height * cfg.grid_width + 1 and cols == cfg.num_uavs * (1 + lay.edges.shape[1]) + 1
    free = torch.arange(1, rows, dtype=dtype)[:, None].expand(-1, cols)
    newly = torch.arange(cols, dtype=dtype)[None, :].expand(rows - 1, -1)
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    direct = torch.div(newly, free).mul_(f32(cfg.coverage_reward)).sub_(f32(cfg.time_penalty))
    assert torch.equal(table[1:].view(torch.int32), direct.view(torch.int32))


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
def test_without_the_team_reward_table_the_step_still_matches_the_reference(monkeypatch, autoreset_mode):
    # Maps too large for the table (`dynamics.TEAM_REWARD_MAX_BYTES`) divide in the step instead.
    from uavsim import dynamics

    monkeypatch.setattr(dynamics, "TEAM_REWARD_MAX_BYTES", 0)
    assert dynamics.Layout(SMALL_8_MOVES, torch.device("cpu")).team_reward is None
    ended = run_lockstep(SMALL_8_MOVES, 7, 11, 200, "prepared", autoreset_mode=autoreset_mode)
    assert ended >= 7
