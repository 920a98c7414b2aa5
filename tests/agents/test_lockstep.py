"""A mixed-size run's lockstep rollout (`agents.algo.lockstep`): one actor call a step over every
group, the group-by-group rollout's numbers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agents.algo import learner as learner_module
from agents.algo.action_noise import ActionNoise
from agents.algo.learner import build_learner, collect
from agents.algo.lockstep import JoinedNoise, lockstep_applies
from agents.algo.rollout import EpisodeStats, Storage

MIXED = (
    "model.size_agnostic=true",
    "model.agent_id=false",
    "env.num_uavs=[2,3]",
    "env.grid_height=[8,10]",
    "env.grid_width=[8,10]",
    "env.num_envs=9",  # groups of 3, 2, 2, 2 environments
)
STORED = [f.name for f in dataclasses.fields(Storage)]


def _collect_twice(learner, group_by_group: bool, monkeypatch) -> list[dict[str, torch.Tensor]]:
    with monkeypatch.context() as m:
        if group_by_group:
            m.setattr(learner_module, "lockstep_applies", lambda *_: False)
        rows = []
        for _ in range(2):  # the second rollout starts from the first's observations and noise counters
            learner.stats.reset()
            collect(learner)
            stored = enumerate(learner.groups)
            rows.append({f"{i}.{k}": getattr(g.storage, k).clone() for i, g in stored for k in STORED})
            rows[-1]["stats"] = learner.stats.sums.clone()
        return rows


@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_lockstep_collects_what_the_groups_collect_one_after_the_other(make_config, monkeypatch, amp):
    cfg = make_config(*MIXED, f"train.amp={amp}", "model.agent_roles=2")
    lockstep, by_group = (build_learner(cfg, torch.device("cpu")) for _ in range(2))
    assert lockstep_applies(len(lockstep.groups), lockstep.actor, cfg.train.compile_rollout)
    got = _collect_twice(lockstep, False, monkeypatch)
    want = _collect_twice(by_group, True, monkeypatch)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for key in w:
            # the same rows through the same network: only a matmul's blocking could differ
            torch.testing.assert_close(g[key], w[key], rtol=1e-5, atol=1e-5, msg=key)
    actions = [k for k in want[0] if k.endswith(".actions")]
    assert all(torch.equal(g[k], w[k]) for g, w in zip(got, want) for k in actions)
    assert all(w[k].float().std() > 0 for w in want for k in actions)  # the policy sampled, not a constant


def test_lockstep_applies_to_mixed_feed_forward_local_runs_only(make_config):
    def applies(*overrides) -> bool:
        learner = build_learner(make_config(*overrides), torch.device("cpu"))
        return lockstep_applies(len(learner.groups), learner.actor, learner.cfg.train.compile_rollout)

    assert applies(*MIXED)
    assert not applies("model.size_agnostic=true", "model.agent_id=false")  # one group
    assert not applies(*MIXED, "model.recurrent=true", "train.chunk_length=4")
    actor = build_learner(make_config(*MIXED), torch.device("cpu")).actor
    assert not lockstep_applies(4, actor, compile_rollout=True)  # a captured step is one group's


def test_joined_noise_is_each_groups_own_stream_in_order():
    seeds_apart = [ActionNoise(7, torch.arange(3), 2), ActionNoise(7, torch.arange(3, 5), 4)]
    joined = JoinedNoise([ActionNoise(7, torch.arange(3), 2), ActionNoise(7, torch.arange(3, 5), 4)])
    for _ in range(3):
        want = torch.cat([n.uniform().reshape(-1) for n in seeds_apart])
        got = joined.uniform()
        assert got.shape == (1, 3 * 2 + 2 * 4) and torch.equal(got[0], want)
    assert [int(n.step) for n in joined.noises] == [3, 3]


@pytest.mark.parametrize("group_by_group", [False, True])
def test_current_coverage_is_the_mean_over_every_groups_environments(make_config, monkeypatch, group_by_group):
    # the progress bar's `now=`: each group's step wrote the whole slot, so it showed the last group's only
    learner = build_learner(make_config(*MIXED, "train.amp=off"), torch.device("cpu"))
    if group_by_group:
        monkeypatch.setattr(learner_module, "lockstep_applies", lambda *_: False)
    collect(learner)
    # the last step's coverage before any reset: the final observation's state ends with it
    last = [g.storage.final_state[-1][:, -1].double() for g in learner.groups]
    assert len({round(float(c.mean()), 6) for c in last}) > 1  # the groups differ: the mean is not one group's
    got = learner.stats.read()["last_coverage"]
    assert got == pytest.approx(float(torch.cat(last).mean()), rel=1e-12)


def test_episode_stats_refuse_empty_groups():
    with pytest.raises(ValueError, match="group_envs"):
        EpisodeStats(torch.device("cpu"), 10, [3, 0])
