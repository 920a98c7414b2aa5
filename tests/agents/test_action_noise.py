"""The actors' sampling noise (agents.algo.action_noise): a counter hash of (seed, env, step, agent)."""

from __future__ import annotations

import pytest
import torch

from agents.algo.action_noise import ActionNoise, _stream_key
from agents.algo.networks import sample
from uavsim.rng import MAX_KEY, hash32


def test_noise_is_uniform_and_strictly_inside_the_unit_interval():
    noise = ActionNoise(3, torch.arange(5000), num_agents=10)
    x = torch.cat([noise.uniform().flatten() for _ in range(4)]).double()  # 200k draws
    assert 0 < x.min() and x.max() < 1
    assert abs(x.mean().item() - 0.5) < 0.003 and abs(x.var().item() - 1 / 12) < 0.002  # standard errors ~0.0007
    counts = torch.histc(x, bins=10, min=0, max=1)
    assert (counts - 20000).abs().max() < 600  # each decile ~20k +- 141


def test_the_staged_hash_is_the_one_hash():
    noise = ActionNoise(5, torch.tensor([0, 7, 123]), num_agents=4)
    noise.uniform()
    u = noise.uniform()  # step 1
    h = hash32(_stream_key(5), torch.tensor([0, 7, 123])[:, None], 1, torch.arange(4)[None, :])
    assert torch.equal(u, ((h >> 9).float() + 0.5) * 2.0**-23)


def test_an_environment_draws_the_same_noise_whatever_the_batch():
    small = ActionNoise(7, torch.tensor([5, 6]), 3)
    big = ActionNoise(7, torch.arange(20), 3)
    for _ in range(3):  # step by step
        assert torch.equal(small.uniform(), big.uniform()[5:7])


def test_steps_agents_seeds_and_envs_all_draw_apart():
    a = ActionNoise(1, torch.arange(4), 3)
    first, second = a.uniform(), a.uniform()
    assert not torch.equal(first, second)
    assert first.flatten().unique().numel() == first.numel()
    assert not torch.equal(first, ActionNoise(2, torch.arange(4), 3).uniform())
    assert a.step.item() == 2


def test_the_policy_stream_is_not_the_maps_seed():
    assert all(_stream_key(s) != s and 0 <= _stream_key(s) < MAX_KEY for s in (0, 1, 12345, MAX_KEY - 1))


def test_sampling_by_the_inverse_cdf():
    logits = torch.log(torch.tensor([[0.25, 0.5, 0.25]]))
    u = torch.tensor([0.1, 0.24, 0.26, 0.74, 0.76, 0.999999])
    assert sample(logits.expand(6, 3), u).tolist() == [0, 0, 1, 1, 2, 2]
    # an impossible action is never drawn, even at the edges of (0, 1)
    blocked = torch.tensor([[0.0, -float("inf"), 0.0]]).expand(3, 3)
    assert 1 not in sample(blocked, torch.tensor([1e-7, 0.5, 1 - 1e-7])).tolist()


def test_state_dict_continues_the_stream_exactly():
    a = ActionNoise(9, torch.arange(3), 2)
    a.uniform()
    saved = a.state_dict()
    expected = a.uniform()
    b = ActionNoise(9, torch.arange(3), 2)
    b.load_state_dict(saved)
    assert saved == {"seed": 9, "step": 1} and torch.equal(b.uniform(), expected)
    with pytest.raises(ValueError, match="seed"):
        ActionNoise(8, torch.arange(3), 2).load_state_dict(saved)
    with pytest.raises(ValueError, match="step"):
        b.load_state_dict({"seed": 9, "step": -1})


def test_the_step_counter_wraps_at_the_key_range():
    a = ActionNoise(0, torch.arange(2), 1)
    a.load_state_dict({"seed": 0, "step": MAX_KEY - 1})
    a.uniform()
    assert a.step.item() == 0


@pytest.mark.parametrize("seed", [-1, MAX_KEY, 1.5, True])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        ActionNoise(seed, torch.arange(2), 1)


def test_bad_env_index_is_refused():
    with pytest.raises(TypeError, match="env_index"):
        ActionNoise(0, torch.arange(2.0), 1)
