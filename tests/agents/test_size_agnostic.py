"""Size-agnostic networks (`model.size_agnostic`) and mixed-size training (lists in `env`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
import torch

from agents import evaluate, train_mappo
from agents.algo import imitation
from agents.algo.layers import Form
from agents.algo.learner import build_learner, collect, prepare_batch, read_metrics, train_iteration
from agents.algo.networks import Actor, make_actor, make_critic, team_state, with_form
from agents.algo.rollout import agent_ids
from agents.algo.value_norm import ValueNorm
from agents.algo.values import value_of
from agents.config.env_section import split_envs
from agents.run import checkpoint as ckpt
from agents.run.learner_state import learner_state, trained_actor
from tests.agents.conftest import TINY
from uavsim.env import UAVSwarmEnv

AGNOSTIC = ("model.size_agnostic=true", "model.agent_id=false")
MIXED = (*AGNOSTIC, "env.num_uavs=[2,3]", "env.grid_height=[8,10]", "env.grid_width=[8,10]")
WALLS = ("env.wall_min_length=2", "env.wall_max_length=5")  # walls that fit the 8x8 maps


def test_one_set_of_parameters_plays_any_team_and_map_size(make_config):
    cfg = make_config(*AGNOSTIC, "env.launch_size=4")
    gen = torch.Generator().manual_seed(0)
    actor, critic = make_actor(cfg.env_config(), cfg.model, gen), make_critic(cfg.env_config(), cfg.model, gen)
    for n, side in ((4, 8), (16, 8), (4, 12), (16, 12)):
        env = UAVSwarmEnv(cfg.env_config().replace(num_uavs=n, grid_height=side, grid_width=side), num_envs=3)
        obs = env.reset()
        agent = agent_ids(3, n, env.device)
        actions, logprob, _, _ = actor.act(obs, agent, None, contextlib.nullcontext, True)
        values = value_of(critic, ValueNorm(0.99, enabled=False), obs, agent, contextlib.nullcontext)
        assert actions.shape == logprob.shape == values.shape == (3, n)
        assert torch.isfinite(values).all() and torch.isfinite(logprob).all()


@pytest.mark.parametrize("form", list(Form))
def test_roles_are_the_one_hot_id_of_the_index_mod_k_at_any_team_size(make_config, form):
    k = 3
    cfg = make_config(*AGNOSTIC, f"model.agent_roles={k}", "model.activation=relu")
    one_hot = dataclasses.replace(cfg.model, agent_id=True, agent_roles=0)  # the same networks, an id K wide
    gen = torch.Generator().manual_seed(0)
    for make in (make_actor, make_critic):
        net, twin = make(cfg.env_config(), cfg.model), make(cfg.env_config().replace(num_uavs=k), one_hot)
        with torch.no_grad():
            for param in net.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
        twin.load_state_dict(net.state_dict())
        net, twin = with_form(net, form), with_form(twin, form)

        def call(module, obs, agent, n):
            local = obs["local"].reshape(-1, obs["local"].shape[-1])
            with torch.no_grad():
                return module(local, agent) if isinstance(module, Actor) else module(obs["state"], local, agent, n)

        for n in (2, 7):  # fewer UAVs than roles, and more
            env = UAVSwarmEnv(cfg.env_config().replace(num_uavs=n, launch_size=3), num_envs=2, seed=1)
            obs, agent = env.reset(), agent_ids(2, n, env.device)
            torch.testing.assert_close(call(net, obs, agent, n), call(twin, obs, agent % k, n), rtol=0, atol=0)
        # UAV k plays UAV 0's role: the same observation gives the same output, and UAV 1's differs
        same = {"local": obs["local"][:1, :1].expand(1, n, -1), "state": obs["state"][:1]}
        out = call(net, same, agent[:n], n)
        assert torch.equal(out[k], out[0]) and not torch.equal(out[1], out[0])


def test_team_state_counts_each_uav_in_its_block():
    pool, n = 2, 3
    # pooled map (2 P^2 = 8), positions (row, col) normalized, then time and coverage
    positions = [(0.0, 0.0), (0.9, 0.2), (1.0, 1.0)]  # blocks 0, 2 and 3 (the edge is the last block)
    state = torch.tensor([[0.5] * 8 + [x for p in positions for x in p] + [0.25, 0.75]])
    out = team_state(state, pool)
    assert out.shape == (1, 3 * pool * pool + 2)
    torch.testing.assert_close(out[0, :8], state[0, :8])
    torch.testing.assert_close(out[0, 8:12], torch.tensor([1 / n, 0.0, 1 / n, 1 / n]))
    torch.testing.assert_close(out[0, -2:], torch.tensor([0.25, 0.75]))


def test_only_a_size_agnostic_critic_reads_the_team_as_a_density_map(make_config):
    assert make_critic(make_config().env_config(), make_config().model).state_pool == 0  # the default
    cfg = make_config(*AGNOSTIC)
    assert make_critic(cfg.env_config(), cfg.model).state_pool == cfg.env.state_pool


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        (("env.num_uavs=[]",), ValueError, r"'env.num_uavs' must be an int or a non-empty list"),
        (("env.num_uavs=[2,x]",), TypeError, r"'env.num_uavs' must be an int or a list of ints"),
        (("env.grid_height=[8,2.5]",), TypeError, r"'env.grid_height'"),
        (("env.num_uavs=[2,2]",), ValueError, r"'env.num_uavs' lists a value twice"),
        (("env.grid_height=[8,10]", "env.grid_width=[8,10,12]"), ValueError, r"paired into maps"),
        ((*WALLS, "env.num_walls=[0,1,2]"), ValueError, r"'env.grid_height' and 'env.grid_width' and 'env.num_walls'"),
        ((*WALLS, "env.grid_height=8", "env.grid_width=8", "env.num_walls=[1,1]"), ValueError, r"twice for one map"),
        ((*WALLS, "env.num_walls=[1,true]"), TypeError, r"'env.num_walls' must be an int or a list of ints"),
        ((*WALLS, "env.num_walls=[1,-1]"), ValueError, r"num_walls"),  # EnvConfig's own check, per group
        (("model.agent_id=true",), ValueError, r"'model.agent_id' must be false with model.size_agnostic"),
        (("model.size_agnostic=false", "model.agent_id=true"), ValueError, r"lists only with model.size_agnostic"),
        (("env.num_envs=3",), ValueError, r"'env.num_envs' must be >= the 4 size groups"),
        (
            ("env.num_envs=6", "train.num_minibatches=16"),
            ValueError,
            r"'train.num_minibatches' must divide each size group",
        ),
        (("model.actor_shared_map=true",), ValueError, r"'model.actor_shared_map' must be false with mixed"),
        (("model.agent_roles=-1",), ValueError, r"'model.agent_roles' must be >= 0"),
        (
            ("model.size_agnostic=false", "model.agent_id=true", "model.agent_roles=4"),
            ValueError,
            r"'model.agent_roles' must be 0 with model.agent_id=true",
        ),
        (("env.num_uavs=[2,30]",), ValueError, r"num_uavs"),  # EnvConfig's own check, per group
    ],
)
def test_size_lists_are_checked(make_config, overrides, error, match):
    with pytest.raises(error, match=match):
        make_config(*MIXED, *overrides)


def test_groups_are_every_team_size_on_every_map_size_and_share_the_environments(make_config):
    cfg = make_config(*MIXED, "env.num_envs=8")
    sizes = [(c.num_uavs, c.grid_height, c.grid_width) for c in cfg.env_configs()]
    assert sizes == [(2, 8, 8), (2, 10, 10), (3, 8, 8), (3, 10, 10)]
    assert cfg.group_num_envs() == [2, 2, 2, 2] and split_envs(10, 3) == [4, 3, 3]
    assert cfg.env_config().num_uavs == 3 and cfg.env_config().grid_height == 10  # the largest group
    assert cfg.batch_size == 8 * (2 * 2 + 2 * 2 + 2 * 3 + 2 * 3)


def test_walls_pair_with_the_map_sizes_or_make_groups_of_their_own(make_config):
    cfg = make_config(*MIXED, *WALLS, "env.num_envs=8", "env.num_walls=[3,0]")
    groups = [(c.num_uavs, c.grid_height, c.grid_width, c.num_walls) for c in cfg.env_configs()]
    assert groups == [(2, 8, 8, 3), (2, 10, 10, 0), (3, 8, 8, 3), (3, 10, 10, 0)]
    cfg = make_config(
        *AGNOSTIC, *WALLS, "env.num_uavs=2", "env.grid_height=8", "env.grid_width=8", "env.num_walls=[0,2]"
    )
    assert [(c.grid_height, c.num_walls) for c in cfg.env_configs()] == [(8, 0), (8, 2)]  # one size, two kinds of map
    learner = build_learner(cfg, torch.device("cpu"))
    assert [g.env.config.num_walls for g in learner.groups] == [0, 2]


def test_a_mixed_run_trains_and_its_groups_play_disjoint_environments(make_config):
    learner = build_learner(make_config(*MIXED), torch.device("cpu"))
    indices = torch.cat([g.env.env_index for g in learner.groups])
    assert len(learner.groups) == 4 and len(set(indices.tolist())) == indices.numel()
    before = [p.detach().clone() for p in learner.actor.parameters()]
    for _ in range(2):
        metrics = read_metrics(train_iteration(learner))
    assert all(v == v for k, v in metrics.items() if k != "explained_variance")  # no NaN
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.actor.parameters()))
    assert learner.agent_steps_per_iteration == 8 * (2 + 2 + 3 + 3)


def test_a_mixed_run_resumes_exactly_and_is_evaluated_at_other_sizes(make_config, tmp_path, restore_threads):
    common = [*MIXED, "run.deterministic=true", "train.total_env_steps=96", "run.checkpoint_interval=32"]
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    preset = tmp_path / "preset.yaml"
    preset.write_text("seed: 0\n")
    assert train_mappo.main(["--config", str(preset), *TINY, *common, f"run.dir={full_dir}"]) == 0
    short = [*TINY, *common, "train.total_env_steps=32", f"run.dir={cut_dir}"]
    assert train_mappo.main(["--config", str(preset), *short]) == 0
    assert train_mappo.main(["--resume", str(cut_dir), "train.total_env_steps=96"]) == 0
    full, cut = (ckpt.load_latest(d)[1] for d in (full_dir, cut_dir))
    assert len(full["more_groups"]) == 3 and full["env_steps"] == cut["env_steps"] == 96
    for net in ("actor", "critic"):
        for key, value in full[net].items():
            assert torch.equal(value, cut[net][key]), f"{net}.{key} differs after resume"

    for task in (["num_uavs=4", "launch_size=2"], ["grid_height=16", "grid_width=16"]):
        out = tmp_path / f"eval-{task[0]}.json"
        assert evaluate.main([str(full_dir), "--episodes", "2", "--out", str(out), "--env", *task]) == 0
        assert json.loads(out.read_text())["meta"]["env_overrides"] == task
    _, _, cfg, actor = trained_actor(full_dir, task=lambda saved: saved)
    other = make_actor(cfg.env_config().replace(num_uavs=16, launch_size=4, grid_height=48, grid_width=48), cfg.model)
    other.load_state_dict(actor.state_dict())  # the same parameters fit any team and map


def test_a_mixed_run_starts_from_a_clone_and_every_group_stays_near_it(make_config, monkeypatch):
    # the planner is imitated on every group's task; PPO's clone KL covers every group's rows
    cfg = make_config(
        *MIXED,
        "imitation.teacher=greedy",
        "imitation.env_steps=96",
        "imitation.epochs=2",
        "imitation.dagger_rounds=1",
        "imitation.dagger_env_steps=32",
        "train.clone_kl_coef=0.5",
    )
    learner = build_learner(cfg, torch.device("cpu"))
    played, real = [], imitation.collect_demonstrations
    monkeypatch.setattr(
        imitation,
        "collect_demonstrations",
        lambda actor, env, *a, **k: played.append((env.num_uavs, env.config.grid_height)) or real(actor, env, *a, **k),
    )
    stats = imitation.warm_start(learner)
    assert 0 <= stats["accuracy"] <= 1
    assert played == [(2, 8), (2, 10), (3, 8), (3, 10)] * 2  # demonstrations, then the DAgger round
    assert all(torch.equal(a, b) for a, b in zip(learner.actor.parameters(), learner.clone.parameters()))
    batches, _ = prepare_batch(learner)
    assert len(batches) == 4 and all(b.clone_logprobs is not None for b in batches)
    assert all(b.clone_logprobs.shape[0] == b.actions.shape[0] for b in batches)
    metrics = read_metrics(train_iteration(learner))
    assert metrics["clone_kl"] == metrics["clone_kl"]  # finite: the anchor was read on every group


def test_a_run_with_roles_trains_on_mixed_sizes_and_is_evaluated_with_a_larger_team(make_config, tmp_path):
    learner = build_learner(make_config(*MIXED, "model.agent_roles=2"), torch.device("cpu"))
    assert learner.actor.net.first.linear.in_features == learner.actor.net.first.dims[0] + 2
    metrics = read_metrics(train_iteration(learner))
    assert all(v == v for k, v in metrics.items() if k != "explained_variance")  # no NaN
    ckpt.save_checkpoint(tmp_path, learner_state(learner), keep=1)
    out = tmp_path / "eval-5.json"
    assert (
        evaluate.main([str(tmp_path), "--episodes", "2", "--out", str(out), "--env", "num_uavs=5", "launch_size=3"])
        == 0
    )
    assert json.loads(out.read_text())["meta"]["env_overrides"] == ["num_uavs=5", "launch_size=3"]


@pytest.mark.parametrize("per_group", [False, True])
def test_a_mixed_runs_advantages_are_normalized_over_all_groups_or_per_group(make_config, per_group):
    learner = build_learner(make_config(*MIXED, f"train.norm_adv_per_group={per_group}"), torch.device("cpu"))
    collect(learner)
    batches, _ = prepare_batch(learner)
    every = torch.cat([b.advantages for b in batches])
    groups = [b.advantages for b in batches]
    unit = lambda a: abs(a.mean().item()) < 1e-5 and abs(a.std().item() - 1) < 1e-4  # noqa: E731
    assert all(unit(a) for a in groups) == per_group  # the groups' scales differ: over all, none is 0 / 1
    if not per_group:
        assert unit(every)
