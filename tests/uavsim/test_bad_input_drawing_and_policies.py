"""Bad arguments to rendering, the scripted policies and the reference env: clear TypeError / ValueError."""

import numpy as np
import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.coordinated import CoordinatedFrontierPolicy
from uavsim.policies import GreedyFrontierPolicy, RandomPolicy
from uavsim.reference import ReferenceEnv
from uavsim.render import render_tiled

SMALL = EnvConfig(grid_height=12, grid_width=12, num_uavs=4, num_obstacles=8, max_steps=30, launch_size=2)


@pytest.fixture(scope="module")
def env():
    e = UAVSwarmEnv(SMALL, num_envs=3, seed=0)
    e.reset()
    return e


@pytest.mark.parametrize(
    "bad, error",
    [
        (True, TypeError),
        (0.5, TypeError),
        ("0", TypeError),
        (None, TypeError),
        (np.float64(1.0), TypeError),
        (3, ValueError),
        (-1, ValueError),
    ],
)
def test_render_env_index_must_name_an_environment(env, bad, error):
    with pytest.raises(error, match=r"env_index must be (an int )?in \[0, 3\)"):
        env.render(bad)


def test_render_takes_numpy_integers(env):
    assert np.array_equal(env.render(np.int64(2), 2), env.render(2, 2))


@pytest.mark.parametrize(
    "indices", [np.array([0, 2]), torch.tensor([0, 2]), (0, 2), range(0, 3, 2), [np.int32(0), np.int64(2)]]
)
def test_render_tiled_takes_arrays_tensors_and_sequences_of_ints(env, indices):
    assert np.array_equal(render_tiled(env, indices, cell_px=2), render_tiled(env, [0, 2], cell_px=2))


@pytest.mark.parametrize(
    "indices, error, match",
    [
        ([], ValueError, "empty"),
        (np.array([], dtype=np.int64), ValueError, "empty"),
        ([0, True], TypeError, r"env_indices\[1\]"),
        ([0, 3], ValueError, r"env_indices\[1\] must be in \[0, 3\)"),
        (np.array([0.0, 1.0]), TypeError, "1-D integers"),
        (torch.tensor([True, False]), TypeError, "1-D integers"),
        (np.array([[0, 1]]), TypeError, "1-D integers"),
        (2, TypeError, "sequence of ints"),
        ("01", TypeError, "sequence of ints"),
    ],
)
def test_render_tiled_rejects_bad_env_indices(env, indices, error, match):
    with pytest.raises(error, match=match):
        render_tiled(env, indices)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(cols=0), ValueError, "cols must be >= 1, got 0"),
        (dict(cols=-1), ValueError, "cols must be >= 1"),
        (dict(cols=1.5), TypeError, "cols must be an int"),
        (dict(cols=True), TypeError, "cols must be an int"),
        (dict(gap=-100), ValueError, "gap must be >= 0, got -100"),
        (dict(gap=0.5), TypeError, "gap must be an int"),
    ],
)
def test_render_tiled_rejects_bad_layout(env, kwargs, error, match):
    with pytest.raises(error, match=match):
        render_tiled(env, [0, 1], **kwargs)


def test_render_tiled_layout_arguments_still_work(env):
    tiled = render_tiled(env, [0, 1, 2], cols=np.int64(1), gap=0, cell_px=2)
    assert tiled.shape == (3 * 24, 24, 3)


@pytest.mark.parametrize("policy_cls", [GreedyFrontierPolicy, CoordinatedFrontierPolicy])
@pytest.mark.parametrize("check_every, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_greedy_check_every_must_be_a_positive_int(env, policy_cls, check_every, error):
    with pytest.raises(error, match="check_every"):
        policy_cls(env, check_every=check_every)


@pytest.mark.parametrize(
    "claim_radius, error, match",
    [
        (-1, ValueError, r"claim_radius must be >= 0, got -1"),
        (1.5, TypeError, "claim_radius must be an int"),
        (True, TypeError, "claim_radius must be an int"),
        ("2", TypeError, "claim_radius must be an int"),
    ],
)
def test_coordinated_claim_radius_must_be_a_non_negative_int(env, claim_radius, error, match):
    with pytest.raises(error, match=match):
        CoordinatedFrontierPolicy(env, claim_radius=claim_radius)


def test_coordinated_takes_numpy_integers_and_defaults_to_the_sensor_radius(env):
    assert CoordinatedFrontierPolicy(env).claim_radius == SMALL.sensor_radius
    policy = CoordinatedFrontierPolicy(env, seed=np.int64(1), check_every=np.int64(2), claim_radius=np.int64(0))
    assert policy.claim_radius == 0 and type(policy.claim_radius) is int
    assert policy(env).shape == (3, SMALL.num_uavs)


def test_greedy_takes_numpy_integers(env):
    policy = GreedyFrontierPolicy(env, seed=np.int64(1), check_every=np.int64(2))
    assert policy(env).shape == (3, SMALL.num_uavs)


@pytest.mark.parametrize(
    "other, field",
    [
        (SMALL.replace(grid_height=14), "grid_height=12.*grid_height=14"),
        (SMALL.replace(grid_width=14), "grid_width=12.*grid_width=14"),
        (SMALL.replace(obs_radius=5), "pad=3.*pad=5"),  # a wider padded map
        (SMALL.replace(moves=8), "moves=4.*moves=8"),
    ],
)
@pytest.mark.parametrize("policy_cls", [GreedyFrontierPolicy, CoordinatedFrontierPolicy])
def test_greedy_refuses_an_env_of_another_layout(env, other, field, policy_cls):
    policy = policy_cls(env)
    other_env = UAVSwarmEnv(other, num_envs=3, seed=0)
    other_env.reset()
    with pytest.raises(ValueError, match=f"this {policy_cls.__name__} was built for an env with {field}"):
        policy(other_env)
    with pytest.raises(TypeError, match="UAVSwarmEnv"):
        policy(None)


@pytest.mark.parametrize("policy_cls", [GreedyFrontierPolicy, CoordinatedFrontierPolicy])
def test_greedy_acts_on_another_env_of_the_same_layout(env, policy_cls):
    other = UAVSwarmEnv(SMALL.replace(time_penalty=0.5), num_envs=5, seed=3)  # rewards do not matter to it
    other.reset()
    assert policy_cls(env)(other).shape == (5, SMALL.num_uavs)


@pytest.mark.parametrize("policy_cls", [RandomPolicy, GreedyFrontierPolicy, CoordinatedFrontierPolicy])
def test_policies_check_env_and_seed(env, policy_cls):
    with pytest.raises(TypeError, match="env must be a UAVSwarmEnv, got NoneType"):
        policy_cls(None)
    with pytest.raises(TypeError, match="seed must be an int"):
        policy_cls(env, seed=1.5)
    with pytest.raises(TypeError, match="seed must be an int"):
        policy_cls(env, seed=True)
    with pytest.raises(ValueError, match=r"seed must be in \[-9223372036854775808, 2\*\*64\)"):
        policy_cls(env, seed=2**64)
    policy_cls(env, seed=-1)  # torch's manual_seed takes negative seeds


def test_random_policy_takes_a_numpy_seed(env):
    a = RandomPolicy(env, seed=np.int64(7))(env)
    assert torch.equal(a, RandomPolicy(env, seed=7)(env))


def test_reference_refuses_bools_among_integer_actions():
    ref = ReferenceEnv(SMALL)
    ref.reset()
    for actions in ([True, 0, 0, 0], (0, np.bool_(True), 0, 0), np.array([True, False, False, False])):
        with pytest.raises(TypeError, match="integers"):
            ref.step(actions)
    ref.step([np.int64(1), 0, 0, 0])  # NumPy integers are integers


@pytest.mark.parametrize("cell_px", [2, 3, 4, 8])
def test_every_uav_is_drawn_at_every_accepted_cell_size(cell_px):
    from uavsim import rules
    from uavsim.render import render_grid, uav_colors

    codes = np.full((6, 6), rules.FREE)
    pos = np.array([[1, 1], [4, 3]])
    img = render_grid(SMALL, codes, pos, cell_px=cell_px)
    for (r, c), color in zip(pos, uav_colors(len(pos))):
        cell = img[r * cell_px : (r + 1) * cell_px, c * cell_px : (c + 1) * cell_px]
        assert (cell == color).all(-1).any(), f"UAV at {(r, c)} not drawn at cell_px={cell_px}"
