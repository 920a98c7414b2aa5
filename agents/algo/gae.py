"""Generalized advantage estimation with termination and truncation kept apart (Brax `compute_gae`).

With same-step auto-reset the observation after a final step is already the next episode's, so the
rollout stores, for every step t, the value of the observation right after the step *before* any
reset (`info["final_obs"]`): `next_values[t]`. Then

    delta_t = r_t + gamma * (1 - terminated_t) * next_values[t] - values[t]
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},     done = terminated | truncated

A terminated step does not bootstrap (the episode really ended); a truncated step does, from the
value of its final observation, and neither carries the advantage across into the next episode.
The last step of the rollout bootstraps from `next_values[T-1]` and starts the recursion (A_T = 0).
"""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of one rollout (the recursion of the module docstring).

    Args:
        rewards: `[T, B, ...]` float32 (per agent: `[T, B, N]`).
        values: like `rewards`, V(obs_t).
        next_values: like `rewards`, V(final obs after step t), before any reset.
        terminated: `[T, B]` bool, broadcast over trailing agent dims.
        truncated: `[T, B]` bool, likewise.
        gamma: the discount.
        gae_lambda: GAE's lambda.

    Returns:
        `(advantages, returns)`, both like `rewards`; returns = advantages + values (the critic's target).
    """
    extra = rewards.dim() - terminated.dim()
    shape = terminated.shape + (1,) * extra
    not_term = (~terminated).reshape(shape).to(rewards.dtype)
    not_done = (~(terminated | truncated)).reshape(shape).to(rewards.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    decay = gamma * gae_lambda * not_done
    advantages = torch.empty_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        advantages[t] = last
    return advantages, advantages + values
