"""A mixed-size run's rollout in lockstep: one actor call per step over every size group's UAVs.

A mixed-size run (`agents.config.env_section`) plays one environment batch per size group: their maps
differ in size, so each group's `env.step` runs on its own. Its actor is one network whose input
does not depend on the team or map size, so at each step the rows of all groups go through it in
one call, and only the environments' half of the step (`agents.algo.rollout.record_step`) runs per
group. Nine groups of the size-agnostic preset on the 2-core AMD EPYC (Zen 4, bf16, 2 threads):
0.83 s against 0.94 s to collect 64 steps, side by side in one process.

The numbers are the group-by-group rollout's: each group keeps its own sampling-noise stream
(a counter hash of its environments' indices), and a row's logits do not depend on the rows beside
it (on the CPU bit for bit, in bf16 and fp32; `tests/agents/test_lockstep.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

from agents.algo.action_noise import ActionNoise
from agents.algo.networks import Actor
from agents.algo.rollout import agent_ids, record_step


class JoinedNoise:
    """Several groups' `ActionNoise`s as one: `uniform()` is their uniforms `[B_g, N_g]`, each
    advanced once, flattened and concatenated in group order to `[1, M]`."""

    def __init__(self, noises: list[ActionNoise]):
        self.noises = noises

    def uniform(self) -> torch.Tensor:
        return torch.cat([n.uniform().reshape(-1) for n in self.noises]).view(1, -1)


def lockstep_applies(num_groups: int, actor: Actor, compile_rollout: bool) -> bool:
    """Whether `collect` steps a run's `num_groups` size groups in lockstep: a mixed-size run
    whose `actor` reads local observations only (a shared-map actor's state differs in size between
    groups) and is feed-forward, and whose step is not captured whole (`train.compile_rollout`
    captures one group's step)."""
    return num_groups > 1 and not compile_rollout and not actor.recurrent and not actor.map_dim


@torch.no_grad()
def lockstep_collect(
    groups: Sequence, policy: Actor, autocast: Callable[[], contextlib.AbstractContextManager]
) -> None:
    """`T` steps of every size group (a learner's `groups`: each with its `env`, `storage`,
    `action_noise`, `stats` and `obs`, advanced in place), one call of `policy` a step, into each group's
    storage and `stats`. No host read."""
    rows = [g.env.num_envs * g.env.num_uavs for g in groups]
    device = groups[0].env.device
    agent = torch.cat([agent_ids(g.env.num_envs, g.env.num_uavs, device) for g in groups])
    noise = JoinedNoise([g.action_noise for g in groups])
    t = torch.zeros((), dtype=torch.int64, device=device)
    for _ in range(groups[0].storage.actions.shape[0]):
        local = torch.cat([g.obs["local"].reshape(r, -1) for g, r in zip(groups, rows)]).unsqueeze(0)
        actions, logprob, _, _ = policy.act({"local": local, "state": None}, agent, noise, autocast)
        for g, a, lp in zip(groups, actions.split(rows, 1), logprob.split(rows, 1)):
            shape = (g.env.num_envs, g.env.num_uavs)
            g.obs, _ = record_step(g.env, g.storage, g.stats, g.obs, a.view(shape), lp.view(shape), None, t)
        t.add_(1)
    for g in groups:  # each storage's counter says how many rows were written, as `collect` leaves it
        g.storage.row.copy_(t)
