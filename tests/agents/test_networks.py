"""Networks: orthogonal init from an explicit generator, agent ids, the IPPO flag, sampling."""

from __future__ import annotations

import math

import torch

from agents.config import CriticKind, ModelConfig
from agents.networks import Actor, Critic, SplitInputLinear, categorical, sample


def test_init_is_orthogonal_and_drawn_from_the_generator_only():
    cfg = ModelConfig(hidden_size=32, num_layers=2)
    a = Actor(20, 3, 5, cfg, torch.Generator().manual_seed(7))
    torch.manual_seed(123)  # the global RNG must not matter
    b = Actor(20, 3, 5, cfg, torch.Generator().manual_seed(7))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    w = a.net.rest[1].weight  # hidden 32x32, gain sqrt(2): W W^T = 2 I
    torch.testing.assert_close(w @ w.T, 2 * torch.eye(32), atol=1e-5, rtol=0)
    first = a.net.first.linear.weight  # 32 x (20 + 3): orthonormal columns over the whole input
    torch.testing.assert_close(first.T @ first, 2 * torch.eye(23), atol=1e-5, rtol=0)
    last = a.net.rest[-1].weight  # policy head: gain 0.01, near-uniform initial policy
    torch.testing.assert_close(last @ last.T, 1e-4 * torch.eye(5), atol=1e-8, rtol=0)
    assert all(torch.all(m.bias == 0) for m in a.modules() if isinstance(m, torch.nn.Linear))


def test_split_input_layer_equals_a_linear_layer_on_the_concatenation():
    gen = torch.Generator().manual_seed(3)
    layer = SplitInputLinear([5, 7], 4, 16, gen)
    torch.nn.init.normal_(layer.linear.bias, generator=gen)
    state, local = torch.randn(3, 5, generator=gen), torch.randn(12, 7, generator=gen)
    agent = torch.arange(12) % 4
    rows = state.repeat_interleave(4, dim=0)  # each environment's state shared by its 4 agents
    naive = layer.linear(torch.cat([rows, local, torch.eye(4)[agent]], dim=1))
    torch.testing.assert_close(layer([state, local], agent, [4, 1]), naive, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer([rows, local], agent, [1, 1]), naive, atol=1e-5, rtol=1e-5)
    # the weight and bias gradients of the split products equal those of the one big product
    grad_out = torch.randn(12, 16, generator=gen)
    (g_naive_w, g_naive_b) = torch.autograd.grad((naive * grad_out).sum(), [layer.linear.weight, layer.linear.bias])
    (g_w, g_b) = torch.autograd.grad((layer([state, local], agent, [4, 1]) * grad_out).sum(),
                                     [layer.linear.weight, layer.linear.bias])
    torch.testing.assert_close(g_w, g_naive_w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_b, g_naive_b, atol=1e-5, rtol=1e-5)


def test_split_input_layer_with_only_a_shared_part():
    gen = torch.Generator().manual_seed(4)
    layer = SplitInputLinear([5], 0, 8, gen)
    torch.nn.init.normal_(layer.linear.bias, generator=gen)
    state = torch.randn(3, 5, generator=gen)
    naive = layer.linear(state.repeat_interleave(4, dim=0))
    torch.testing.assert_close(layer([state], torch.zeros(12, dtype=torch.long), [4]), naive, atol=1e-5, rtol=1e-5)


def test_agent_id_changes_the_output_and_can_be_turned_off():
    local = torch.randn(4, 20)
    with_id = Actor(20, 3, 5, ModelConfig(hidden_size=16), torch.Generator().manual_seed(0))
    out0 = with_id(local, torch.zeros(4, dtype=torch.long))
    out1 = with_id(local, torch.ones(4, dtype=torch.long))
    assert out0.shape == (4, 5) and not torch.equal(out0, out1)
    no_id = Actor(20, 3, 5, ModelConfig(hidden_size=16, agent_id=False), torch.Generator().manual_seed(0))
    assert torch.equal(no_id(local, torch.zeros(4, dtype=torch.long)), no_id(local, torch.ones(4, dtype=torch.long)))


def test_ippo_critic_ignores_the_global_state_and_mappo_uses_it():
    local, agent = torch.randn(6, 20), torch.arange(6) % 3
    ippo = Critic(11, 20, 3, ModelConfig(hidden_size=16, critic=CriticKind.ippo))
    assert ippo.net.first.linear.in_features == 20 + 3
    assert torch.equal(ippo(None, local, agent), ippo(torch.randn(6, 11), local, agent))
    mappo = Critic(11, 20, 3, ModelConfig(hidden_size=16))
    assert mappo.net.first.linear.in_features == 11 + 20 + 3
    v = mappo(torch.randn(6, 11), local, agent)
    assert v.shape == (6,) and v.dtype == torch.float32
    assert not torch.equal(v, mappo(torch.randn(6, 11), local, agent))
    shared = torch.randn(2, 11)  # two environments of three agents
    torch.testing.assert_close(mappo(shared, local, agent, state_repeat=3),
                               mappo(shared.repeat_interleave(3, dim=0), local, agent))


def test_gumbel_max_sampling_follows_the_softmax():
    from agents.action_noise import ActionNoise

    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]]).expand(40000, 4)
    noise = ActionNoise(0, torch.arange(4000), num_agents=10)
    actions = sample(logits, noise.uniform().view(-1))
    freq = torch.bincount(actions, minlength=4).double() / actions.numel()
    probs = torch.softmax(logits[0].double(), 0)
    # standard error of a frequency near 0.6 with 40k draws is ~0.0025; allow 4 sigma
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)
    again = sample(logits, ActionNoise(0, torch.arange(4000), 10).uniform().view(-1))
    assert torch.equal(actions, again)  # reproducible from the seed and the step alone


def test_categorical_log_prob_and_entropy():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [math.log(3.0), 0.0, -1e9, -1e9]])
    logp, ent = categorical(logits.to(torch.bfloat16), torch.tensor([2, 0]))
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32
    torch.testing.assert_close(logp, torch.tensor([math.log(0.25), math.log(0.75)]), atol=2e-2, rtol=0)
    # entropy of uniform(4) = log 4; of (3/4, 1/4) = -(.75 log .75 + .25 log .25) = 0.5623
    torch.testing.assert_close(ent, torch.tensor([math.log(4.0), 0.5623]), atol=2e-2, rtol=0)
