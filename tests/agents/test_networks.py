"""Networks: orthogonal init from an explicit generator, agent ids, the IPPO flag, sampling."""

from __future__ import annotations

import math

import pytest
import torch

from agents.algo.layers import Form, SplitInputLinear
from agents.algo.networks import Actor, Critic, categorical, sample, with_form
from agents.config import Activation, CriticKind, ModelConfig


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
    (g_w, g_b) = torch.autograd.grad(
        (layer([state, local], agent, [4, 1]) * grad_out).sum(), [layer.linear.weight, layer.linear.bias]
    )
    torch.testing.assert_close(g_w, g_naive_w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_b, g_naive_b, atol=1e-5, rtol=1e-5)


def test_the_first_per_row_parts_weight_gradient_is_taken_with_the_output_rows_first():
    """Autograd multiplies `dy^T x` ([out, M] x [M, d]) for a contiguous weight part, `x^T dy` for a column
    slice: the same numbers, the first 1.5x faster in bf16 on an AVX512-BF16 CPU (docs/performance.md)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes, self.copies = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mm.default:
                self.shapes.append((tuple(args[0].shape), tuple(args[1].shape)))
            self.copies += func is torch.ops.aten.clone.default
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(5)
    layer = SplitInputLinear([5, 7, 3], 4, 16, gen)  # a shared part, the per-row local, a narrow part
    state, local, narrow = torch.randn(3, 5, generator=gen), torch.randn(12, 7, generator=gen), torch.randn(12, 3)
    out = layer([state, local, narrow], torch.arange(12) % 4, [4, 1, 1])
    with Products() as seen:
        out.sum().backward()
    assert ((16, 12), (12, 7)) in seen.shapes and ((7, 12), (12, 16)) not in seen.shapes, seen.shapes
    with Products() as forward:
        layer([state, local, narrow], torch.arange(12) % 4, [4, 1, 1])
    with torch.no_grad(), Products() as rollout:  # no copy where no gradient is taken
        layer([state, local, narrow], torch.arange(12) % 4, [4, 1, 1])
    assert forward.copies == rollout.copies + 1


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
    torch.testing.assert_close(
        mappo(shared, local, agent, state_repeat=3), mappo(shared.repeat_interleave(3, dim=0), local, agent)
    )


def test_a_critic_without_the_window_reads_the_rest_of_the_local_observation_only():
    local, agent, state = torch.randn(6, 20, requires_grad=True), torch.arange(6) % 3, torch.randn(2, 11)
    critic = Critic(11, 20, 3, ModelConfig(hidden_size=16, critic_window=False), window_values=12)
    assert critic.net.first.linear.in_features == 11 + 8 + 3
    v = critic(state, local, agent, state_repeat=3)
    other_window = torch.cat([torch.randn(6, 12), local[:, 12:]], 1)
    assert torch.equal(v, critic(state, other_window, agent, state_repeat=3))
    other_rest = torch.cat([local[:, :12], torch.randn(6, 8)], 1)
    assert not torch.equal(v, critic(state, other_rest, agent, state_repeat=3))
    v.sum().backward()  # the update's path: gradients reach the rest, none the window
    assert local.grad[:, :12].eq(0).all() and local.grad[:, 12:].ne(0).any()
    # on by default: the window is read, whatever window_values says
    assert Critic(11, 20, 3, ModelConfig(hidden_size=16), window_values=12).net.first.linear.in_features == 11 + 20 + 3


def test_make_critic_skips_the_tasks_window_channels():
    from agents.algo.networks import make_critic
    from uavsim import EnvConfig

    env_cfg = EnvConfig(obs_radius=2, comm_radius=0, window_paths=True)
    critic = make_critic(env_cfg, ModelConfig(hidden_size=16, critic_window=False))
    assert critic.local_from == env_cfg.window_obs_dim == 3 * 5 * 5  # blocked, covered, UAVs of the 5x5 cells
    local_width = env_cfg.local_obs_dim - 3 * 5 * 5  # position, time, memory, heading, window paths
    assert critic.net.first.linear.in_features == env_cfg.state_dim + local_width + env_cfg.num_uavs


def test_gumbel_max_sampling_follows_the_softmax():
    from agents.algo.action_noise import ActionNoise

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


def _in_place_cases():
    from uavsim import EnvConfig

    env = EnvConfig(grid_height=12, grid_width=10, num_uavs=3, num_obstacles=6, state_pool=4, launch_size=2)
    local_dim, state_dim, n = env.local_obs_dim, env.state_dim, env.num_uavs
    relu = {"hidden_size": 32, "activation": Activation.relu}
    for model in (
        ModelConfig(**relu, num_layers=2),
        ModelConfig(**relu, num_layers=3),
        ModelConfig(**relu, agent_id=False),
        ModelConfig(hidden_size=32, activation=Activation.tanh),
        ModelConfig(**relu, recurrent=True, recurrent_size=16),
    ):
        for shared_map in (False, True):
            gen = torch.Generator().manual_seed(5)
            actor = Actor(local_dim, n, env.num_actions, model, gen, env if shared_map else None)
            for p in actor.parameters():  # non-zero biases, so a dropped or doubled bias shows
                torch.nn.init.normal_(p, std=0.3, generator=gen)
            yield f"actor {model} shared_map={shared_map}", actor
        critic = Critic(state_dim, local_dim, n, model, torch.Generator().manual_seed(6))
        for p in critic.parameters():
            torch.nn.init.normal_(p, std=0.3, generator=torch.Generator().manual_seed(7))
        yield f"critic {model}", critic


@pytest.mark.parametrize("b", [1, 4])  # one environment: its shared rows must still be a copy
def test_the_in_place_forward_computes_the_same_numbers_with_relu_in_the_gemm(b):
    # `Form.epilogue` (the rollout's no-grad calls) must equal the default forward bit for bit in
    # fp32 and bf16 (the PPO ratio is exactly 1 before the first update), be ignored where gradients
    # are on (no derivative for _addmm_activation), and save the ReLU passes of a ReLU network.
    from benchmarks.op_count import OpCounter
    from uavsim import EnvConfig, UAVSwarmEnv

    env = UAVSwarmEnv(
        EnvConfig(grid_height=12, grid_width=10, num_uavs=3, num_obstacles=6, state_pool=4, launch_size=2),
        num_envs=b,
        seed=1,
    )
    obs = env.reset()
    n = env.num_uavs
    local, state = obs["local"].reshape(b * n, -1), obs["state"]
    agent = torch.arange(n).repeat(b)
    for name, net in _in_place_cases():
        for amp in (False, True):

            def call(in_place, net=net, amp=amp):
                net = with_form(net, Form.epilogue if in_place else Form.chain)
                with torch.autocast("cpu", torch.bfloat16, enabled=amp):
                    if isinstance(net, Critic):
                        return net(state, local, agent, state_repeat=n)
                    heading = net.headings(state).view(b * n, -1) if net.map_dim else None
                    hidden = torch.zeros(b * n, net.hidden_size) if net.recurrent else None
                    out = net(
                        local, agent, state if net.map_dim else None, state_repeat=n, heading=heading, hidden=hidden
                    )
                    return out[0] if net.recurrent else out

            with torch.no_grad():
                with OpCounter() as plain_count:
                    plain = call(False)
                with OpCounter() as fused_count:
                    fused = call(True)
            assert torch.equal(plain, fused), (name, amp)
            relu = net.net.relu
            assert ("aten._addmm_activation" in fused_count.by_op) == relu, name
            if relu:
                assert "aten.relu" not in fused_count.by_op and "aten.relu_" not in fused_count.by_op, name
                assert fused_count.bytes < plain_count.bytes, name
            graded = call(True)  # gradients on: the default path, differentiable
            assert graded.requires_grad and torch.equal(graded.detach(), plain), (name, amp)
            graded.float().sum().backward()


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("num_agents", [4, 0])
def test_the_fused_form_is_the_same_layer_summed_in_one_pointwise_pass(relu, num_agents):
    # `Form.fused` (the compiled rollout's no-grad form): one product over the first per-row part,
    # every other term added pointwise. The same layer as the product over the concatenation, with
    # a shared part (once per environment), a narrow part (column by column) and a wide per-row part
    # (its own product); with gradients on, the plain chain, bit for bit.
    gen = torch.Generator().manual_seed(11)
    layer = SplitInputLinear([7, 3, 12, 5], num_agents, 16, gen)
    torch.nn.init.normal_(layer.linear.bias, generator=gen)
    local, heading = torch.randn(12, 7, generator=gen), torch.randn(12, 3, generator=gen)
    wide, state = torch.randn(12, 12, generator=gen), torch.randn(3, 5, generator=gen)
    agent = torch.arange(12) % 4
    ids = [torch.eye(4)[agent]] if num_agents else []
    naive = layer.linear(torch.cat([local, heading, wide, state.repeat_interleave(4, dim=0), *ids], dim=1))
    naive = naive.relu() if relu else naive
    parts, repeats = [local, heading, wide, state], [1, 1, 1, 4]
    with torch.no_grad():
        chain = layer(parts, agent, repeats, relu=relu)
        layer.form = Form.fused
        got = layer(parts, agent, repeats, relu=relu)
    torch.testing.assert_close(got, naive.detach(), atol=1e-5, rtol=1e-5)
    graded = layer(parts, agent, repeats, relu=relu)
    assert graded.requires_grad and torch.equal(graded.detach(), chain)


def test_the_fused_form_of_whole_actors_stays_within_rounding_of_the_chain():
    # bf16: the chain rounds its running sum after each product, the pointwise form once at the end.
    # Actors only: the critic runs after the rollout, never in the compiled step.
    from uavsim import EnvConfig, UAVSwarmEnv

    env = UAVSwarmEnv(
        EnvConfig(grid_height=12, grid_width=10, num_uavs=3, num_obstacles=6, state_pool=4, launch_size=2),
        num_envs=4,
        seed=1,
    )
    obs = env.reset()
    n = env.num_uavs
    local, state = obs["local"].reshape(4 * n, -1), obs["state"]
    agent = torch.arange(n).repeat(4)
    for name, net in _in_place_cases():
        if isinstance(net, Critic):
            continue
        for amp in (False, True):

            def call(fused, net=net, amp=amp):
                net = with_form(net, Form.fused if fused else Form.epilogue)
                with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=amp):
                    heading = net.headings(state).view(4 * n, -1) if net.map_dim else None
                    hidden = torch.zeros(4 * n, net.hidden_size) if net.recurrent else None
                    out = net(
                        local, agent, state if net.map_dim else None, state_repeat=n, heading=heading, hidden=hidden
                    )
                    return out[0] if net.recurrent else out

            chain, pointwise = call(False).float(), call(True).float()
            scale = chain.abs().max()
            tol = (0.03 if amp else 1e-6) * scale
            torch.testing.assert_close(
                pointwise, chain, atol=tol, rtol=0, msg=lambda m, name=name, amp=amp: f"{name} amp={amp}: {m}"
            )


def test_with_form_shares_the_weights_and_changes_only_how_they_are_computed():
    # The compiled rollout's fused actor is the update's actor computed another way: an optimizer
    # step on one shows in the other, the original keeps its form, and the state dicts are one.
    from uavsim import EnvConfig

    env = EnvConfig(grid_height=12, grid_width=10, num_uavs=3, num_obstacles=6, state_pool=4, launch_size=2)
    model = ModelConfig(hidden_size=32, activation=Activation.relu)
    actor = Actor(env.local_obs_dim, env.num_uavs, env.num_actions, model, torch.Generator().manual_seed(5), env)
    twin = with_form(actor, Form.fused)
    assert twin.net.first.form == Form.fused and actor.net.first.form == Form.chain
    assert all(a is b for a, b in zip(actor.parameters(), twin.parameters(), strict=True))
    with torch.no_grad():
        actor.net.first.linear.bias.add_(1.0)
    assert torch.equal(twin.net.first.linear.bias, actor.net.first.linear.bias)
    assert twin.state_dict().keys() == actor.state_dict().keys()
    with pytest.raises(ValueError):
        with_form(actor, "sideways")
