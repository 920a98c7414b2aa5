"""The critic's values of a collected rollout, after its steps (`agents.algo.learner.collect`):
``V(obs_t)`` of every stored step in a few large calls, and GAE's bootstrap values, which need the
critic on the last and the truncated steps' final observations only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from agents.algo.networks import Critic, agent_ids
from agents.algo.rollout import Storage
from agents.algo.value_norm import ValueNorm


def value_of(
    critic: Critic,
    value_norm: ValueNorm,
    obs: dict[str, torch.Tensor],
    agent: torch.Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> torch.Tensor:
    """Denormalized values `[B, N]` float32 of every agent for `obs` (`local [B, N, L]`, `state [B, S]`)
    of agents `agent [B * N]` int64."""
    local = obs["local"]
    b, n, _ = local.shape
    with autocast():  # the state's share of the first layer is computed once per environment
        v = critic(obs["state"], local.reshape(b * n, -1), agent, state_repeat=n)
    return value_norm.denormalize(v).view(b, n)


# Rows per critic call when the rollout's values are computed after it: big enough for efficient
# matmuls, small enough to bound the activations' memory on large GPU batches.
VALUE_CHUNK_ROWS = 1 << 16


def values_of_steps(
    critic: Critic,
    value_norm: ValueNorm,
    local: torch.Tensor,
    state: torch.Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager],
    out: torch.Tensor,
) -> None:
    """Write the denormalized values of stored observations into `out`, a few steps per critic call.

    Args:
        critic: the critic.
        value_norm: the value normalizer (denormalizes the critic's output).
        local: `[T, B, N, L]` local observations.
        state: `[T, B, S]` global states.
        autocast: the networks' autocast factory.
        out: `[T, B, N]` float32, written in place.
    """
    t, b, n, _ = local.shape
    steps = max(1, VALUE_CHUNK_ROWS // (b * n))
    agent = agent_ids(steps * b, n, local.device)
    for start in range(0, t, steps):
        k = min(steps, t - start)
        obs = {
            "local": local[start : start + k].reshape(k * b, n, -1),
            "state": state[start : start + k].reshape(k * b, -1),
        }
        out[start : start + k] = value_of(critic, value_norm, obs, agent[: k * b * n], autocast).view(k, b, n)


def bootstrap_rows(num_steps: int, num_envs: int, max_steps: int) -> int:
    """How many `[T, B]` rows `bootstrap_values` runs the critic on: every environment's last step,
    and its truncated steps before it. A truncated episode lasted ``max_steps`` steps, so an
    environment truncates at most ``ceil((T - 1) / max_steps)`` times in the first ``T - 1`` steps."""
    return num_envs * min(num_steps, 1 + -(-(num_steps - 1) // max_steps))


def bootstrap_values(
    critic: Critic,
    value_norm: ValueNorm,
    storage: Storage,
    max_steps: int,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> None:
    """Write `storage.next_values` (GAE's bootstrap) from `storage.values`, already written, and the
    final observations of the steps that need the critic.

    GAE reads ``next_values[t]`` only where step ``t`` did not terminate. Where the episode went on,
    its final observation is the next stored one (`UAVSwarmEnv.step` swaps rows, bits exact), so
    ``next_values[t] = values[t + 1]``: the same observation through the same critic, the same bits
    (tests/agents/test_rollout.py). The critic then runs on the last step's final observations and on
    the truncated steps' (`bootstrap_rows` rows: 2 of every 64 steps at the default's 200-step
    episodes, instead of all 64), a fixed number of rows, so no host read: a stable sort of the rows'
    need flags puts the rows that need it first; the rest of the fixed count are others, whose
    values are computed and discarded. A terminated step keeps ``values[t + 1]``: finite, times 0.

    Args:
        critic, value_norm, autocast: as `values_of_steps`'s.
        storage: a collected rollout, `values` written; `next_values` is written in place.
        max_steps: the environments' episode limit (`EnvConfig.max_steps`).
    """
    t, b, n, _ = storage.final_local.shape
    out = storage.next_values
    out[:-1] = storage.values[1:]
    need = storage.truncated.clone()
    need[-1] = True
    rows = bootstrap_rows(t, b, max_steps)
    need = need.view(-1)
    picks = torch.sort(need.to(torch.uint8), descending=True, stable=True).indices[:rows]
    values = torch.empty(rows // b, b, n, dtype=out.dtype, device=out.device)
    values_of_steps(
        critic,
        value_norm,
        storage.final_local.view(t * b, n, -1).index_select(0, picks).view(rows // b, b, n, -1),
        storage.final_state.view(t * b, -1).index_select(0, picks).view(rows // b, b, -1),
        autocast,
        values,
    )
    flat = out.view(t * b, n)
    kept = flat.index_select(0, picks)
    flat.index_copy_(0, picks, torch.where(need.index_select(0, picks)[:, None], values.view(rows, n), kept))
