"""Rollout storage and collection: observations stored in the networks' dtype, values computed after
the steps equal the per-step values, and the update's minibatches take whole environment steps."""

from __future__ import annotations

import pytest
import torch

from agents.algo.learner import build_learner, collect
from agents.algo.ppo import step_rows
from agents.algo.rollout import Storage, agent_ids
from agents.algo.values import bootstrap_rows, value_of, values_of_steps
from uavsim.env import UAVSwarmEnv


@pytest.mark.parametrize("num_steps", [8, 16])  # 16 steps of 5-step episodes: several truncations per env
@pytest.mark.parametrize("amp, dtype", [("off", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_values_after_the_rollout_equal_per_step_values(make_config, amp, dtype, num_steps):
    learner = build_learner(
        make_config(f"train.amp={amp}", "env.max_steps=5", "env.target_coverage=0.25", f"train.num_steps={num_steps}"),
        torch.device("cpu"),
    )
    env, s = learner.env, learner.storage
    assert s.local.dtype == dtype and s.final_state.dtype == dtype and s.rewards.dtype == torch.float32
    # a replay of the same steps in a twin env, calling the critic after every step as a naive loop would
    twin = UAVSwarmEnv(env.config, num_envs=env.num_envs, seed=learner.cfg.seed, device="cpu")
    obs = twin.reset()
    agent = agent_ids(env.num_envs, env.num_uavs, env.device)
    ends = torch.zeros(2, dtype=torch.long)
    for _ in range(2):  # the second rollout starts mid-episode
        collect(learner)
        ends += torch.stack([s.terminated.sum(), s.truncated.sum()])
        for t in range(s.actions.shape[0]):
            assert torch.equal(s.local[t], obs["local"].to(dtype))
            v = value_of(learner.critic, learner.value_norm, obs, agent, learner.autocast)
            torch.testing.assert_close(s.values[t], v, atol=1e-6, rtol=1e-5)
            obs, _, _, _, info = twin.step(s.actions[t].long())
            v_final = value_of(learner.critic, learner.value_norm, info["final_obs"], agent, learner.autocast)
            bootstraps = ~s.terminated[t]  # GAE reads next_values where the step did not terminate
            torch.testing.assert_close(s.next_values[t][bootstraps], v_final[bootstraps], atol=1e-6, rtol=1e-5)
    assert (ends > 0).all(), f"the test needs both kinds of episode end (terminated, truncated): {ends.tolist()}"


@pytest.mark.parametrize("max_steps", [1, 3, 5, 200])  # every step truncates .. none in the rollout
@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_bootstrap_values_equal_the_critic_on_every_final_observation_where_gae_reads_them(make_config, amp, max_steps):
    learner = build_learner(
        make_config(f"train.amp={amp}", f"env.max_steps={max_steps}", "env.target_coverage=0.25", "train.num_steps=16"),
        torch.device("cpu"),
    )
    s, b = learner.storage, learner.env.num_envs
    assert bootstrap_rows(16, b, max_steps) == b * min(16, 1 + -(-15 // max_steps))  # the last step, ceil(15 / max)
    for _ in range(3):  # later rollouts start mid-episode
        collect(learner)
        every = torch.empty_like(s.next_values)  # the critic on every final observation
        values_of_steps(learner.critic, learner.value_norm, s.final_local, s.final_state, learner.autocast, every)
        read = ~s.terminated
        assert torch.equal(s.next_values[read], every[read])  # the same bits: values[t + 1] is the same product
        assert torch.isfinite(s.next_values).all()  # a terminated step's is multiplied by 0: finite
        if max_steps <= 5:
            most = s.truncated[:-1].sum(0).max()  # the truncated steps before the last, in one environment
            assert 0 < most and (most + 1) * b <= bootstrap_rows(16, b, max_steps)


def test_storage_rejects_a_non_float_observation_dtype(make_config):
    learner = build_learner(make_config(), torch.device("cpu"))
    with pytest.raises(TypeError, match="obs_dtype"):
        Storage.allocate(4, learner.env, torch.int8)


def test_step_rows_take_every_agent_of_each_step():
    rows = step_rows(torch.tensor([2, 0]), 3)
    assert rows.tolist() == [6, 7, 8, 0, 1, 2]


@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_shared_map_headings_are_stored_for_the_update(make_config, amp):
    learner = build_learner(make_config(f"train.amp={amp}", "model.actor_shared_map=true"), torch.device("cpu"))
    s = learner.storage
    collect(learner)
    t, b, n, _ = s.heading.shape
    expected = learner.actor.heading(s.state.view(t * b, -1)).view(t, b, n, 3)  # from the stored (cast) state
    assert torch.equal(s.heading, expected) and s.heading.abs().sum() > 0
