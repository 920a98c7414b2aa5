"""GAE against a naive per-environment, per-agent loop, with termination and truncation apart."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.algo.gae import compute_gae


def naive_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """One environment and agent at a time, written straight from the definitions."""
    t_len, b, n = rewards.shape
    adv = torch.zeros(t_len, b, n, dtype=torch.float64)
    for e in range(b):
        for a in range(n):
            running = 0.0
            for t in reversed(range(t_len)):
                term, trunc = bool(terminated[t, e]), bool(truncated[t, e])
                bootstrap = 0.0 if term else float(next_values[t, e, a])  # truncation bootstraps
                delta = float(rewards[t, e, a]) + gamma * bootstrap - float(values[t, e, a])
                if term or trunc:
                    running = 0.0  # the next step belongs to another episode
                running = delta + gamma * lam * running
                adv[t, e, a] = running
    return adv


def random_rollout(gen: torch.Generator, t_len: int, b: int, n: int):
    rewards = torch.randn(t_len, b, n, generator=gen)
    values = torch.randn(t_len, b, n, generator=gen)
    next_values = torch.randn(t_len, b, n, generator=gen)
    u = torch.rand(t_len, b, generator=gen)
    terminated = u < 0.15
    truncated = (u >= 0.15) & (u < 0.3)  # never both, as the environment guarantees
    return rewards, values, next_values, terminated, truncated


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    t_len=st.integers(1, 9),
    b=st.integers(1, 4),
    n=st.integers(1, 3),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
)
def test_gae_matches_naive_loop(seed, t_len, b, n, gamma, lam):
    gen = torch.Generator().manual_seed(seed)
    r, v, nv, term, trunc = random_rollout(gen, t_len, b, n)
    adv, ret = compute_gae(r, v, nv, term, trunc, gamma, lam)
    expected = naive_gae(r.double(), v.double(), nv.double(), term, trunc, gamma, lam)
    torch.testing.assert_close(adv.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv + v)


def test_gae_hand_computed_termination_vs_truncation():
    # One env, one agent, T=3, gamma=0.5, lambda=1, all values 1, rewards 1, next_values 2.
    ones = torch.ones(3, 1, 1)
    r, v, nv = ones, ones, 2 * ones
    # Terminated at t=1: delta_1 = 1 + 0 - 1 = 0 (no bootstrap); the chain restarts after it.
    term = torch.tensor([[False], [True], [False]])
    none = torch.zeros(3, 1, dtype=torch.bool)
    adv, _ = compute_gae(r, v, nv, term, none, 0.5, 1.0)
    # t=2: delta = 1 + 0.5*2 - 1 = 1 -> A = 1
    # t=1: delta = 0, done -> A = 0
    # t=0: delta = 1 + 0.5*2 - 1 = 1 -> A = 1 + 0.5 * 0 = 1
    assert adv.flatten().tolist() == [1.0, 0.0, 1.0]
    # Truncated at t=1 instead: delta_1 = 1 + 0.5*2 - 1 = 1 (bootstraps from the final obs value).
    adv, _ = compute_gae(r, v, nv, none, term, 0.5, 1.0)
    assert adv.flatten().tolist() == [1.5, 1.0, 1.0]


def test_gae_broadcasts_flags_over_agents():
    gen = torch.Generator().manual_seed(0)
    r, v, nv, term, trunc = random_rollout(gen, 6, 3, 4)
    adv, _ = compute_gae(r, v, nv, term, trunc, 0.99, 0.95)
    for a in range(4):  # each agent equals the single-agent computation on its slice
        single, _ = compute_gae(r[..., a], v[..., a], nv[..., a], term, trunc, 0.99, 0.95)
        torch.testing.assert_close(adv[..., a], single)
