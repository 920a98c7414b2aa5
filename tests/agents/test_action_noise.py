"""The actors' sampling noise (agents.action_noise): a counter hash of (seed, env, step, agent, action)."""

from __future__ import annotations

import math

import pytest
import torch

from agents.action_noise import ActionNoise, _stream_key
from uavsim.rng import MAX_KEY


def test_noise_is_gumbel_distributed():
    noise = ActionNoise(3, torch.arange(2000), num_agents=10, num_actions=5)
    x = torch.cat([noise.gumbel().flatten() for _ in range(5)]).double()  # 500k draws
    # Gumbel(0, 1): mean = Euler's gamma, variance pi^2 / 6; standard errors ~0.002 and ~0.006
    assert abs(x.mean().item() - 0.5772157) < 0.01
    assert abs(x.var().item() - math.pi**2 / 6) < 0.03
    assert torch.isfinite(x).all() and x.min() > -3.0 and x.max() < 17.0  # uniforms strictly inside (0, 1)


def test_an_environment_draws_the_same_noise_whatever_the_batch():
    small = ActionNoise(7, torch.tensor([5, 6]), 3, 4)
    big = ActionNoise(7, torch.arange(20), 3, 4)
    for _ in range(3):  # step by step
        assert torch.equal(small.gumbel(), big.gumbel()[5:7])


def test_steps_agents_actions_seeds_and_envs_all_draw_apart():
    a = ActionNoise(1, torch.arange(4), 3, 5)
    first, second = a.gumbel(), a.gumbel()
    assert not torch.equal(first, second)
    assert first.flatten().unique().numel() == first.numel()  # no two (env, agent, action) alike
    assert not torch.equal(first, ActionNoise(2, torch.arange(4), 3, 5).gumbel())
    assert a.step.item() == 2


def test_the_policy_stream_is_not_the_maps_seed():
    assert all(_stream_key(s) != s and 0 <= _stream_key(s) < MAX_KEY for s in (0, 1, 12345, MAX_KEY - 1))


def test_state_dict_continues_the_stream_exactly():
    a = ActionNoise(9, torch.arange(3), 2, 5)
    a.gumbel()
    saved = a.state_dict()
    expected = a.gumbel()
    b = ActionNoise(9, torch.arange(3), 2, 5)
    b.load_state_dict(saved)
    assert saved == {"seed": 9, "step": 1} and torch.equal(b.gumbel(), expected)
    with pytest.raises(ValueError, match="seed"):
        ActionNoise(8, torch.arange(3), 2, 5).load_state_dict(saved)
    with pytest.raises(ValueError, match="step"):
        b.load_state_dict({"seed": 9, "step": -1})


def test_the_step_counter_wraps_at_the_key_range():
    a = ActionNoise(0, torch.arange(2), 1, 2)
    a.load_state_dict({"seed": 0, "step": MAX_KEY - 1})
    a.gumbel()
    assert a.step.item() == 0


@pytest.mark.parametrize("seed", [-1, MAX_KEY, 1.5, True])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        ActionNoise(seed, torch.arange(2), 1, 2)


def test_bad_env_index_is_refused():
    with pytest.raises(TypeError, match="env_index"):
        ActionNoise(0, torch.arange(2.0), 1, 2)
