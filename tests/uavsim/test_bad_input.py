"""Bad input gets a clear ValueError/TypeError naming what was wrong and what was expected."""

import numpy as np
import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.reference import ReferenceEnv


@pytest.fixture
def env():
    e = UAVSwarmEnv(EnvConfig(), num_envs=3)
    e.reset()
    return e


def test_actions_wrong_shape(env):
    with pytest.raises(ValueError, match=r"shape \(3, 10\).*got \(3, 9\)"):
        env.step(torch.zeros(3, 9, dtype=torch.int64))


def test_actions_wrong_dtype(env):
    with pytest.raises(TypeError, match="torch.int64.*torch.int32"):
        env.step(torch.zeros(3, 10, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        env.step(np.zeros((3, 10), dtype=np.int64))


@pytest.mark.parametrize("bad", [-1, 5])
def test_actions_out_of_range(env, bad):
    actions = torch.zeros(3, 10, dtype=torch.int64)
    actions[1, 2] = bad
    with pytest.raises(ValueError, match=rf"\[0, 5\).*{bad}"):
        env.step(actions)


def test_actions_wrong_device(env):
    with pytest.raises(ValueError, match="must be on cpu.*meta"):
        env.step(torch.zeros(3, 10, dtype=torch.int64, device="meta"))


def test_step_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        UAVSwarmEnv(EnvConfig(), num_envs=2).step(torch.zeros(2, 10, dtype=torch.int64))


def test_bad_mask(env):
    with pytest.raises(TypeError, match="bool"):
        env.reset(torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        env.reset(torch.ones(4, dtype=torch.bool))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(grid_height=0), "grid_height"),
        (dict(grid_width=-3), "grid_width"),
        (dict(num_uavs=0), "num_uavs"),
        (dict(num_uavs=17, launch_size=4), "num_uavs"),  # more UAVs than the launch area holds
        (dict(obstacle_max_size=40), "obstacle_max_size"),  # obstacles that cannot fit
        (dict(obstacle_min_size=3, obstacle_max_size=2), "obstacle_max_size"),
        (dict(sensor_radius=32), "sensor_radius"),  # radii too large for the grid
        (dict(obs_radius=40), "obs_radius"),
        (dict(obs_radius=0), "obs_radius"),
        (dict(moves=6), "moves"),
        (dict(max_steps=0), "max_steps"),
        (dict(target_coverage=1.5), "target_coverage"),
        (dict(time_penalty=-1.0), "time_penalty"),
        (dict(coverage_reward=float("nan")), "coverage_reward"),
        (dict(coverage_reward=1e39), "coverage_reward"),  # finite in float64, inf in the float32 rewards
        (dict(near_miss_penalty=-1e39), "near_miss_penalty"),
        (dict(coverage_reward=10**400), "coverage_reward"),  # an int no float can hold
        (dict(num_obstacles=32 * 32 + 1), "num_obstacles"),  # more rectangles than cells
        (dict(num_walls=-1), "num_walls"),
        (dict(num_walls=32 * 32 + 1), "num_walls"),
        (dict(num_walls=2, wall_max_length=33), "wall_max_length"),  # walls that cannot fit
        (dict(num_walls=2, wall_min_length=9, wall_max_length=8), "wall_max_length"),
        (dict(num_walls=2, wall_min_length=0), "wall_min_length"),
        (dict(max_steps=2**63), "max_steps"),  # would wrap on the device
        (dict(time_penalty=3.4e38, collision_penalty=3.4e38, max_steps=3), "coverage_reward"),  # -inf rewards
        (dict(coverage_reward=1e37), "coverage_reward"),  # finite per step, x 200 steps an infinite return
        (dict(state_pool=33), "state_pool"),
        (dict(launch_size=0), "launch_size"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"EnvConfig.{field}"):
        EnvConfig(**kwargs)


def test_config_types_are_checked():
    with pytest.raises(TypeError, match="EnvConfig.num_uavs must be an int"):
        EnvConfig(num_uavs=2.5)
    with pytest.raises(TypeError, match="EnvConfig.time_penalty must be a float"):
        EnvConfig(time_penalty="0.1")
    with pytest.raises(TypeError, match="EnvConfig.num_uavs must be an int"):
        EnvConfig(num_uavs=True)


def test_numpy_integers_are_ints():
    # sizes computed with NumPy arrive as np.int64: accepted and stored as plain ints
    cfg = EnvConfig(num_uavs=np.int64(4), launch_size=np.int32(2))
    assert cfg == EnvConfig(num_uavs=4, launch_size=2) and type(cfg.num_uavs) is int
    env = UAVSwarmEnv(cfg, num_envs=np.int64(3), seed=np.int64(5), first_env_index=np.uint16(2))
    assert (type(env.num_envs), type(env.seed)) == (int, int) and env.env_index.tolist() == [2, 3, 4]
    assert env.reset()["local"].shape[0] == 3


def test_the_new_bounds_sit_exactly_where_they_say():
    EnvConfig(num_obstacles=32 * 32)  # as many rectangles as cells: allowed
    EnvConfig(max_steps=2**31 - 1)
    for kwargs, field in (
        (dict(max_steps=2**40), "max_steps"),
        (dict(near_miss_penalty=1e37), "coverage_reward"),
        (dict(time_penalty=1e37), "coverage_reward"),
        (dict(collision_penalty=1e37), "coverage_reward"),
    ):
        with pytest.raises(ValueError, match=f"EnvConfig.{field}"):  # each term of the return bound counts
            EnvConfig(**kwargs)


def test_the_return_bound_leaves_room_for_float32_rounding():
    # (penalty x max_steps) <= float32's max in float64 was not enough: float32 rounds each partial sum up as often
    # as down, and -FLOAT32_MAX / 10 added ten times reached -inf
    from uavsim.config import FLOAT32_MAX

    with pytest.raises(ValueError, match="EnvConfig.coverage_reward"):
        EnvConfig(max_steps=10, time_penalty=FLOAT32_MAX / 10, coverage_reward=0.0)
    cfg = EnvConfig(max_steps=10, time_penalty=FLOAT32_MAX / 10 / (1 + 14 * 2**-23), coverage_reward=0.0, **NO_RISK)
    env = UAVSwarmEnv(cfg, num_envs=1)
    env.reset()
    for _ in range(10):
        info = env.step(torch.zeros(1, cfg.num_uavs, dtype=torch.int64))[-1]
    assert torch.isfinite(info["episode_return"]).all()


NO_RISK = dict(collision_penalty=0.0, near_miss_penalty=0.0)


def test_obstacle_sizes_need_not_fit_where_no_obstacle_is_drawn():
    # a 3-cell corridor without obstacles, as without walls: the default sizes are not a reason to refuse it
    cfg = EnvConfig(grid_height=3, grid_width=40, num_obstacles=0, launch_size=2, num_uavs=2, state_pool=3)
    env = UAVSwarmEnv(cfg, num_envs=2)
    env.reset()
    env.step(torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="EnvConfig.obstacle_max_size"):
        cfg.replace(num_obstacles=1)


def test_numpy_floats_are_floats():
    cfg = EnvConfig(coverage_reward=np.float32(2.5), time_penalty=np.float64(0.02))
    assert cfg == EnvConfig(coverage_reward=2.5, time_penalty=0.02) and type(cfg.coverage_reward) is float


def test_unknown_config_field_is_named():
    with pytest.raises(ValueError, match="num_drones"):
        EnvConfig.from_dict({"num_drones": 3})
    with pytest.raises(ValueError, match=r"unknown EnvConfig field\(s\) \['b', 1\]"):  # keys that do not compare
        EnvConfig.from_dict({1: 2, "b": 3})
    with pytest.raises(TypeError):
        EnvConfig(num_drones=3)  # the dataclass itself refuses it too


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="num_envs"):
        UAVSwarmEnv(EnvConfig(), num_envs=0)
    with pytest.raises(ValueError, match="seed"):
        UAVSwarmEnv(EnvConfig(), num_envs=1, seed=-1)
    with pytest.raises(ValueError, match="reset_mode"):
        UAVSwarmEnv(EnvConfig(), num_envs=1, reset_mode="lazy")
    with pytest.raises(ValueError, match="autoreset_mode must be one of \\('same_step', 'next_step'\\)"):
        UAVSwarmEnv(EnvConfig(), num_envs=1, autoreset_mode="NEXT_STEP")
    with pytest.raises(TypeError, match="obs_dtype must be one of"):
        UAVSwarmEnv(EnvConfig(), num_envs=1, obs_dtype=torch.uint8)
    with pytest.raises(TypeError, match="config"):
        UAVSwarmEnv({"num_uavs": 3})
    assert UAVSwarmEnv(EnvConfig(), num_envs=1, check_action_range=np.bool_(False)).check_action_range is False
    with pytest.raises(TypeError, match="check_action_range must be a bool, got str"):
        UAVSwarmEnv(EnvConfig(), num_envs=1, check_action_range="no")


def test_reference_bad_actions():
    ref = ReferenceEnv(EnvConfig(num_uavs=2, launch_size=2))
    ref.reset()
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        ref.step([0, 0, 0])
    with pytest.raises(TypeError, match="integers"):
        ref.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        ref.step([0, 7])
    with pytest.raises(ValueError, match="seed"):
        ReferenceEnv(EnvConfig(), seed=2**31)
