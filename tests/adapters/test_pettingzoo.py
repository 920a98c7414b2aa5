"""CoverageParallelEnv: PettingZoo's own API and seed tests, and ReferenceEnv episodes through it."""

from functools import partial

import numpy as np
import pytest

pytest.importorskip("pettingzoo")  # the "peers" extra
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from tests.adapters.helpers import EASY, SMALL  # noqa: E402
from uavsim.adapters._frames import render_reference  # noqa: E402
from uavsim.adapters.pettingzoo_env import CoverageParallelEnv  # noqa: E402
from uavsim.reference import ReferenceEnv  # noqa: E402


@pytest.mark.parametrize("cfg", [SMALL, EASY], ids=["truncates", "terminates"])
def test_parallel_api_test_passes(cfg):
    parallel_api_test(CoverageParallelEnv(cfg), num_cycles=100)


def test_parallel_seed_test_passes():
    parallel_seed_test(partial(CoverageParallelEnv, SMALL), num_cycles=50)


def test_spaces_and_agents():
    env = CoverageParallelEnv(SMALL)
    assert env.possible_agents == ["uav_0", "uav_1", "uav_2", "uav_3"] and env.agents == []
    assert env.action_space("uav_2").n == SMALL.num_actions
    assert env.observation_space("uav_0").shape == (SMALL.local_obs_dim,)
    assert env.observation_space("uav_0").high.max() == SMALL.num_uavs - 1  # the "other UAVs" counts
    assert env.state_space.shape == (SMALL.state_dim,)


def test_matches_reference_until_all_agents_leave():
    env, ref = CoverageParallelEnv(EASY, seed=3, env_index=2), ReferenceEnv(EASY, seed=3, env_index=2)
    obs, infos = env.reset()
    r_obs = ref.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        for i, agent in enumerate(env.possible_agents):
            assert np.array_equal(obs[agent], r_obs["local"][i])
        assert np.array_equal(env.state(), r_obs["state"])
        joint = rng.integers(0, EASY.num_actions, EASY.num_uavs)
        obs, rewards, terms, truncs, infos = env.step({a: joint[i] for i, a in enumerate(env.agents)})
        r_obs, r_reward, r_term, r_trunc, r_info = ref.step(joint)
        assert [rewards[a] for a in env.possible_agents] == r_reward.tolist()
        assert set(terms.values()) == {r_term} and set(truncs.values()) == {r_trunc}
        assert [infos[a]["collision"] for a in env.possible_agents] == r_info["collisions"].tolist()
        if r_term or r_trunc:
            ended += 1
            assert env.agents == [] and infos["uav_1"]["episode_length"] == r_info["episode_length"]
            obs, _ = env.reset()
            r_obs = ref.reset()
    assert ended >= 2


def test_render():
    env = CoverageParallelEnv(SMALL, render_mode="rgb_array", cell_px=2, seed=3, env_index=1)
    env.reset()
    image = env.render()
    assert image.shape == (24, 24, 3)
    ref = ReferenceEnv(SMALL, seed=3, env_index=1)
    ref.reset()
    assert np.array_equal(image, render_reference(ref, 2))  # this env's own map and UAVs
    other = ReferenceEnv(SMALL, seed=3, env_index=2)
    other.reset()
    assert not np.array_equal(image, render_reference(other, 2))
    with pytest.raises(ValueError, match="cell_px"):  # when built, not at the first render()
        CoverageParallelEnv(SMALL, render_mode="rgb_array", cell_px=1)


class TestBadInput:
    @pytest.fixture
    def env(self):
        e = CoverageParallelEnv(SMALL)
        e.reset(seed=1)
        return e

    def test_missing_and_unknown_agents(self, env):
        with pytest.raises(ValueError, match=r"missing \['uav_3'\]"):
            env.step({"uav_0": 0, "uav_1": 0, "uav_2": 0})
        with pytest.raises(ValueError, match=r"unknown or finished \['uav_9'\]"):
            env.step({**dict.fromkeys(env.agents, 0), "uav_9": 1})
        with pytest.raises(TypeError, match="dict"):
            env.step([0, 0, 0, 0])

    def test_bad_actions(self, env):
        with pytest.raises(ValueError, match=r"\[0, 5\)"):
            env.step({**dict.fromkeys(env.agents, 0), "uav_2": 7})
        with pytest.raises(TypeError, match="integers"):
            env.step(dict.fromkeys(env.agents, 1.5))
        with pytest.raises(ValueError, match="uav_0 must be one integer"):
            env.step({**dict.fromkeys(env.agents, 0), "uav_0": [1, 2]})

    def test_step_after_the_episode(self, env):
        for _ in range(SMALL.max_steps):
            env.step(dict.fromkeys(env.agents, 0))
        assert env.agents == []
        with pytest.raises(RuntimeError, match="reset"):
            env.step({})

    def test_unknown_agent_space_and_state_before_reset(self):
        env = CoverageParallelEnv(SMALL)
        with pytest.raises(ValueError, match="unknown agent 'drone_0'"):
            env.observation_space("drone_0")
        with pytest.raises(RuntimeError, match="reset"):
            env.state()


def test_without_pettingzoo_the_error_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "uavsim.adapters.pettingzoo_env")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[peers\]"'):  # it was a bare ModuleNotFoundError
        importlib.import_module("uavsim.adapters.pettingzoo_env")
