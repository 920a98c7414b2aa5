"""CoverageReferenceEnv: gymnasium.Env over ReferenceEnv; torch-free; AsyncVectorEnv against the batched env."""

import subprocess
import sys
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import uavsim  # noqa: F401 -- registers the ids
from tests.adapters.helpers import EASY, SMALL, assert_obs_row
from uavsim import UAVSwarmEnv, rules
from uavsim.adapters.gymnasium_single import CoverageReferenceEnv
from uavsim.env import mean_return
from uavsim.reference import ReferenceEnv


def test_gymnasium_env_checker_passes():
    env = gym.make("uavsim/CoverageReference-v0", config=SMALL, render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)


def test_make_matches_reference_and_reward_is_the_uav_mean():
    env = gym.make("uavsim/CoverageReference-v0", config=SMALL, seed=2, env_index=5)
    ref = ReferenceEnv(SMALL, seed=2, env_index=5)
    obs, info = env.reset()
    assert info["episode_index"] == 0
    assert_obs_row({k: v[None] for k, v in obs.items()}, 0, ref.reset(), "reset")
    rng = np.random.default_rng(0)
    for t in range(SMALL.max_steps):
        actions = rng.integers(0, SMALL.num_actions, SMALL.num_uavs)
        obs, reward, terminated, truncated, info = env.step(actions)
        r_obs, r_reward, r_term, r_trunc, r_info = ref.step(actions)
        assert_obs_row({k: v[None] for k, v in obs.items()}, 0, r_obs, f"step {t}")
        assert isinstance(reward, float) and reward == float(rules.mean_return(r_reward))
        assert np.array_equal(info["uav_rewards"], r_reward) and (terminated, truncated) == (r_term, r_trunc)
        assert ("episode_return" in info) == (r_term or r_trunc)
    assert truncated and info["episode_length"] == SMALL.max_steps
    with pytest.raises(RuntimeError, match="reset"):
        env.step(actions)  # the episode is over
    obs, info = env.reset()
    assert info["episode_index"] == 1


def test_seeded_reset_restarts_episode_zero_of_the_stream():
    env = CoverageReferenceEnv(SMALL, seed=0, env_index=3)
    env.reset()
    env.reset()
    obs, info = env.reset(seed=9)
    assert info["episode_index"] == 0
    assert np.array_equal(obs["local"], ReferenceEnv(SMALL, seed=9, env_index=3).reset()["local"])


def test_async_vector_env_matches_the_batched_env():
    """One worker process per environment, SAME_STEP autoreset: env i of UAVSwarmEnv, step for step."""
    num_envs, seed = 2, 4
    workers = gym.vector.AsyncVectorEnv(
        [partial(CoverageReferenceEnv, config=EASY, seed=seed, env_index=i) for i in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    batched = UAVSwarmEnv(EASY, num_envs=num_envs, seed=seed)
    try:
        obs, _ = workers.reset()
        b_obs = batched.reset()
        gen = torch.Generator().manual_seed(1)
        ended = 0
        for t in range(30):
            for key in ("local", "state"):
                assert np.array_equal(obs[key], b_obs[key].numpy()), (t, key)
            actions = torch.randint(0, EASY.num_actions, (num_envs, EASY.num_uavs), generator=gen)
            obs, reward, terminated, truncated, infos = workers.step(actions.numpy())
            b_obs, b_reward, b_term, b_trunc, b_info = batched.step(actions)
            assert np.array_equal(reward, mean_return(b_reward).numpy())
            assert np.array_equal(terminated, b_term.numpy()) and np.array_equal(truncated, b_trunc.numpy())
            for i in np.flatnonzero(terminated | truncated):
                ended += 1
                assert np.array_equal(infos["final_obs"][i]["local"], b_info["final_obs"]["local"][i].numpy())
        assert ended >= 2
    finally:
        workers.close()


def test_importing_and_stepping_never_imports_torch():
    code = (
        "import sys\n"
        "from uavsim.adapters.gymnasium_single import CoverageReferenceEnv\n"
        "env = CoverageReferenceEnv({'grid_height': 8, 'grid_width': 8, 'num_uavs': 2, 'num_obstacles': 2,"
        " 'launch_size': 2}, render_mode='rgb_array')\n"
        "env.reset(seed=1)\n"
        "env.step(env.action_space.sample())\n"
        "assert env.render().shape == (64, 64, 3)\n"
        "assert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')], 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_render():
    env = CoverageReferenceEnv(SMALL, render_mode="rgb_array", cell_px=4)
    env.reset()
    image = env.render()
    assert image.dtype == np.uint8 and image.shape == (48, 48, 3)
    batched = UAVSwarmEnv(SMALL, num_envs=1, seed=0)  # the same episode in the batched env, drawn from its state
    batched.reset()
    assert np.array_equal(image, batched.render(0, 4))


class TestBadInput:
    def test_actions(self):
        env = CoverageReferenceEnv(SMALL)
        with pytest.raises(RuntimeError, match="reset"):
            env.step(np.zeros(4, dtype=np.int64))
        env.reset()
        with pytest.raises(ValueError, match=r"shape \(4,\)"):
            env.step(np.zeros(5, dtype=np.int64))
        with pytest.raises(TypeError, match="integers"):
            env.step(np.zeros(4))
        with pytest.raises(ValueError, match=r"\[0, 5\)"):
            env.step(np.array([0, 1, 2, 5]))

    def test_arguments(self):
        with pytest.raises(ValueError, match="num_drones"):
            CoverageReferenceEnv({"num_drones": 2})
        with pytest.raises(TypeError, match="config"):
            CoverageReferenceEnv("small")
        with pytest.raises(ValueError, match="env_index"):
            CoverageReferenceEnv(SMALL, env_index=-1)
        with pytest.raises(ValueError, match="render_mode"):
            CoverageReferenceEnv(SMALL, render_mode="human")
        with pytest.raises(ValueError, match="options"):
            CoverageReferenceEnv(SMALL).reset(options={"difficulty": 2})


def test_the_vector_envs_rewards_are_the_single_envs_bit_for_bit_on_the_default_task():
    # the vector env took torch's float32 mean and the single env NumPy's: ten UAVs' rewards summed in different
    # orders, 1 ulp apart on many steps of the default task (the per-UAV rewards and observations equal)
    num_envs = 3
    venv = gym.make_vec("uavsim/Coverage-v0", num_envs=num_envs, output="numpy")
    singles = [gym.make("uavsim/Coverage-v0", env_index=i) for i in range(num_envs)]
    venv.reset()
    for single in singles:
        single.reset()
    rng = np.random.default_rng(0)
    for _ in range(40):
        actions = rng.integers(0, 5, (num_envs, 10))
        _, rewards, _, _, _ = venv.step(actions)
        for i, single in enumerate(singles):
            assert np.float32(single.step(actions[i])[1]) == rewards[i]
