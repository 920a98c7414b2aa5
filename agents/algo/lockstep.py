"""A mixed-size run's rollout in lockstep: one actor call per step over every size group's UAVs.

A mixed-size run (`agents.env_section`) plays one environment batch per size group: their maps
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

from typing import TYPE_CHECKING

import torch

from agents.algo.action_noise import ActionNoise
from agents.algo.rollout import agent_ids, record_step

if TYPE_CHECKING:
    from agents.algo.learner import Learner


class JoinedNoise:
    """Several groups' `ActionNoise`s as one: `uniform()` is their uniforms `[B_g, N_g]`, each
    advanced once, flattened and concatenated in group order to `[1, M]`."""

    def __init__(self, noises: list[ActionNoise]):
        self.noises = noises

    def uniform(self) -> torch.Tensor:
        return torch.cat([n.uniform().reshape(-1) for n in self.noises]).view(1, -1)


def lockstep_applies(learner: Learner) -> bool:
    """Whether `collect` steps `learner`'s groups in lockstep: a mixed-size run whose actor reads
    local observations only (a shared-map actor's state differs in size between groups), is
    feed-forward, and is not captured whole (`train.compile_rollout` captures one group's step)."""
    actor = learner.actor
    return (
        len(learner.groups) > 1 and not learner.cfg.train.compile_rollout and not actor.recurrent and not actor.map_dim
    )


@torch.no_grad()
def lockstep_collect(learner: Learner) -> None:
    """`T` steps of every group of `learner` (`lockstep_applies`), one actor call a step, into
    each group's storage, advancing each group's observation. No host read."""
    groups = learner.groups
    rows = [g.env.num_envs * g.env.num_uavs for g in groups]
    device = learner.env.device
    agent = torch.cat([agent_ids(g.env.num_envs, g.env.num_uavs, device) for g in groups])
    noise = JoinedNoise([g.action_noise for g in groups])
    t = torch.zeros((), dtype=torch.int64, device=device)
    for _ in range(learner.storage.actions.shape[0]):
        local = torch.cat([g.obs["local"].reshape(r, -1) for g, r in zip(groups, rows)]).unsqueeze(0)
        actions, logprob, _, _ = learner.policy.act({"local": local, "state": None}, agent, noise, learner.autocast)
        for g, a, lp in zip(groups, actions.split(rows, 1), logprob.split(rows, 1)):
            shape = (g.env.num_envs, g.env.num_uavs)
            g.obs, _ = record_step(g.env, g.storage, learner.stats, g.obs, a.view(shape), lp.view(shape), None, t)
        t.add_(1)
