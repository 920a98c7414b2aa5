"""The recurrent actor (`model.recurrent`): its GRU against `nn.GRUCell`, a chunk replayed at once
against the same steps one at a time, hidden states stored, carried and zeroed at episode ends in
the rollout, in the checkpoint and in evaluation."""

from __future__ import annotations

import pytest
import torch

from agents.algo.layers import GRU
from agents.algo.learner import build_learner, collect, train_iteration
from agents.algo.networks import Actor
from agents.config import ModelConfig
from agents.evaluate import actor_policy, episodes
from agents.run import checkpoint as ckpt
from agents.run.learner_state import learner_state, load_learner_state
from uavsim.env import UAVSwarmEnv

RECURRENT = ["model.recurrent=true", "train.chunk_length=4", "train.num_steps=16", "env.max_steps=5"]


def test_gru_steps_like_torch_gru_cell_and_zeroes_where_an_episode_starts():
    gen = torch.Generator().manual_seed(0)
    gru = GRU(6, 5, gen)
    torch.nn.init.normal_(gru.cell.bias_ih, generator=gen)  # the init zeroes them: test them too
    torch.nn.init.normal_(gru.cell.bias_hh, generator=gen)
    x, h0 = torch.randn(4, 3, 6, generator=gen), torch.randn(3, 5, generator=gen)
    starts = torch.tensor([[True, True, True], [False, True, False], [False, False, False], [True, False, False]])
    out, last = gru(x, h0, starts)
    h, expected = h0, []
    for c in range(4):
        if c > 0:  # starts[0] is never read: the first state comes as it should be
            h = torch.where(starts[c, :, None], torch.zeros_like(h), h)
        h = gru.cell(x[c], h)
        expected.append(h)
    torch.testing.assert_close(out, torch.stack(expected), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(last, expected[-1], atol=1e-6, rtol=1e-5)
    assert out.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the state stays float32 under autocast
        out, last = gru(x, h0, starts)
    assert out.dtype == last.dtype == torch.float32


def test_gru_init_is_orthogonal_per_gate_with_zero_biases():
    gru = GRU(8, 8, torch.Generator().manual_seed(1))
    for weight in (gru.cell.weight_ih, gru.cell.weight_hh):
        for gate in weight.chunk(3, 0):
            torch.testing.assert_close(gate @ gate.T, torch.eye(8), atol=1e-5, rtol=0)
    assert not gru.cell.bias_ih.any() and not gru.cell.bias_hh.any()
    same = GRU(8, 8, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(gru.parameters(), same.parameters()))


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_a_chunk_at_once_equals_its_steps_one_at_a_time(autocast):
    gen = torch.Generator().manual_seed(2)
    actor = Actor(20, 4, 5, ModelConfig(hidden_size=16, recurrent=True), gen)
    # 6 steps of 4 environments x 4 UAVs. Bitwise equality needs the CPU's GEMM to give each row the
    # same result whatever the row count (it does for 16 rows; not for 2 or 6 with 2 threads)
    c, r = 6, 16
    local, agent = torch.randn(c * r, 20, generator=gen), torch.arange(r).repeat(c) % 4
    h0 = torch.randn(r, 16, generator=gen).tanh()
    starts = torch.rand(c, r, generator=gen) < 0.3
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        logits, last = actor(local, agent, hidden=h0, starts=starts)
        h, steps = h0, []
        for t in range(c):
            if t > 0:
                h = torch.where(starts[t, :, None], torch.zeros_like(h), h)
            step_logits, h = actor(local[t * r : (t + 1) * r], agent[:r], hidden=h)
            steps.append(step_logits)
    assert torch.equal(logits, torch.cat(steps)) and torch.equal(last, h)
    assert actor.hidden_size == 16 and actor.initial_hidden(4, 4, torch.device("cpu")).shape == (4, 4, 16)
    with pytest.raises(ValueError, match="needs its hidden state"):
        actor(local, agent)


def test_the_rollout_stores_chunk_starts_and_zeroes_the_state_where_episodes_end(make_config):
    learner = build_learner(make_config(*RECURRENT), torch.device("cpu"))
    s = learner.storage
    assert s.hidden.shape == (4, 4, 2, 16) and s.chunk_length == 4  # [T / C, B, N, H]
    seen = torch.zeros(2, dtype=torch.long)
    for _ in range(3):  # 16-step rollouts of 5-step episodes: the later ones start mid-episode
        start = learner.hidden.clone()
        collect(learner)
        assert torch.equal(s.hidden[0], start)
        done = s.terminated | s.truncated  # [T, B]
        # a chunk that begins an episode starts from zeros; one that continues an episode does not
        began = done[3:-1:4]  # steps 3, 7, 11: the steps before chunks 1, 2, 3
        assert torch.equal(s.hidden[1:].abs().sum((2, 3)) == 0, began)
        assert torch.equal(learner.hidden.abs().sum((1, 2)) == 0, done[-1])
        seen += torch.stack([began.sum(), (~began).sum()])
    assert (seen > 0).all(), f"the test needs chunks of both kinds: {seen.tolist()}"


def test_a_recurrent_checkpoint_without_hidden_states_is_refused(make_config):
    learner = build_learner(make_config(*RECURRENT), torch.device("cpu"))
    payload = learner_state(learner)
    assert torch.equal(payload["ranks"][0]["hidden"], learner.hidden)
    fresh = build_learner(make_config(*RECURRENT), torch.device("cpu"))
    for bad, message in (
        (None, "holds no hidden states"),
        (torch.zeros(4, 2, 8), r"hidden states are \(4, 2, 8\)"),
        (torch.full((4, 2, 16), float("nan")), "non-finite"),
    ):
        rank = {k: v for k, v in payload["ranks"][0].items() if k != "hidden"}
        if bad is not None:
            rank["hidden"] = bad
        with pytest.raises(ckpt.CheckpointError, match=message):
            load_learner_state(fresh, {**payload, "ranks": [rank]}, "ckpt.pt")


def _play(actor, env, steps):
    act = actor_policy(actor, env, deterministic=True, seed=0)
    obs, actions = env.reset(), []
    for _ in range(steps):
        a = act(obs)
        actions.append(a)
        obs, *_ = env.step(a)
    return torch.stack(actions)


def test_evaluation_carries_the_hidden_state_and_zeroes_it_at_each_episode_start(make_config, monkeypatch):
    cfg = make_config(*RECURRENT, "env.max_steps=6", "model.hidden_size=32")
    actor = build_learner(cfg, torch.device("cpu")).actor
    torch.nn.init.normal_(actor.head.weight, std=1.0, generator=torch.Generator().manual_seed(0))  # decisive logits
    env_cfg, steps = cfg.env_config(), cfg.env.max_steps

    def env():
        return UAVSwarmEnv(env_cfg, num_envs=16, seed=5)

    both = _play(actor, env(), 2 * steps)  # two episodes back to back
    second_alone = env()
    second_alone.reset()
    for a in both[:steps]:  # the first episode again, then a fresh policy plays the second from zeros
        second_alone.step(a)
    assert (second_alone.state["t"] == 0).all()
    act = actor_policy(actor, second_alone, deterministic=True, seed=0)
    obs, alone = second_alone.observe(), []
    for _ in range(steps):
        alone.append(act(obs))
        obs, *_ = second_alone.step(alone[-1])
    assert torch.equal(both[steps:], torch.stack(alone))
    # the test can fail: without the reset the second episode's actions differ
    monkeypatch.setattr(episodes, "reset_where_done", lambda hidden, done: hidden)
    assert not torch.equal(_play(actor, env(), 2 * steps)[steps:], both[steps:])


def test_recurrent_size_sets_the_grus_units_and_is_checked(make_config):
    actor = Actor(20, 4, 5, ModelConfig(hidden_size=16, recurrent=True, recurrent_size=24), torch.Generator())
    assert actor.hidden_size == 24 and actor.gru.cell.weight_ih.shape == (72, 16)
    logits, hidden = actor(torch.randn(8, 20), torch.arange(8) % 4, hidden=torch.zeros(8, 24))
    assert logits.shape == (8, 5) and hidden.shape == (8, 24)
    learner = build_learner(make_config(*RECURRENT, "model.recurrent_size=12"), torch.device("cpu"))
    assert learner.actor.hidden_size == 12 and learner.storage.hidden.shape[-1] == 12
    before = [p.clone() for p in learner.actor.parameters()]
    train_iteration(learner)  # a rollout that stores the state, and an update that replays it
    assert all(torch.isfinite(p).all() for p in learner.actor.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.actor.parameters()))
    with pytest.raises(ValueError, match="model.recurrent_size"):
        make_config(*RECURRENT, "model.recurrent_size=-1")
