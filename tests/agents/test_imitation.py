"""The imitation warm start: the actor learns the planner's moves, once per run, on its own maps."""

import math

import pytest
import torch

from agents.algo import imitation
from agents.algo.imitation import (
    DEMO_FIRST_ENV,
    Demonstrations,
    clone,
    collect_demonstrations,
    demo_env_shape,
    make_teacher,
)
from agents.algo.learner import build_learner, learning_rates, prepare_batch, train_iteration
from agents.algo.ppo import clone_logprobs, evaluate_actions, kl_from, rows_of_steps
from agents.algo.precision import make_autocast
from agents.config import Amp, Teacher, load_config
from agents.evaluate import actor_policy, run_episodes
from agents.train_mappo import train
from uavsim.env import UAVSwarmEnv


def agreement(actor, demos: imitation.Demonstrations) -> float:
    """How often the actor's most likely move is the planner's."""
    n = demos.num_agents
    with torch.no_grad():
        logits = actor(
            demos.local,
            torch.arange(n).repeat(demos.num_frames),
            demos.shared_map,
            state_repeat=n,
            heading=demos.heading,
        )
    return (logits.argmax(1) == demos.actions.long()).float().mean().item()


def demonstrations(learner, teacher: Teacher, steps: int, first_env: int = DEMO_FIRST_ENV):
    env = UAVSwarmEnv(learner.env.config, num_envs=8, seed=learner.cfg.seed, first_env_index=first_env)
    demos = Demonstrations(steps * 8, env.num_uavs, env.local_obs_dim, learner.actor.map_dim, env.obs_dtype, env.device)
    collect_demonstrations(
        learner.actor, env, make_teacher(teacher, env, 0), steps, make_autocast(Amp.off, env.device), demos
    )
    return demos


def fit_on_cpu(actor, demos, epochs: int, min_gain: float = 0.0) -> dict:
    """`clone` with the tests' settings: Adam at 3e-3, minibatches of 64 frames, fp32 on the CPU."""
    return clone(
        actor,
        demos,
        epochs=epochs,
        lr=3e-3,
        minibatch_steps=64,
        generator=torch.Generator().manual_seed(0),
        autocast=make_autocast(Amp.off, torch.device("cpu")),
        min_gain=min_gain,
    )


@pytest.mark.parametrize("shared_map", [False, True])
def test_cloning_makes_the_actor_move_like_the_planner(make_config, shared_map):
    cfg = make_config(f"model.actor_shared_map={shared_map}", "model.hidden_size=64")
    learner = build_learner(cfg, torch.device("cpu"))
    demos = demonstrations(learner, Teacher.greedy, 96)
    held_out = demonstrations(learner, Teacher.greedy, 48, first_env=DEMO_FIRST_ENV + 100)
    assert demos.num_frames == 96 * 8 and demos.actions.shape == (96 * 8 * 2,)
    assert (demos.heading is not None) == shared_map == (demos.shared_map is not None)
    before = agreement(learner.actor, held_out)
    stats = fit_on_cpu(learner.actor, demos, epochs=30)
    after = agreement(learner.actor, held_out)
    assert stats["accuracy"] > 0.6 and math.isfinite(stats["loss"])
    assert after > before + 0.3, (before, after)  # on maps it never saw

    def coverage(actor) -> float:  # at the end of the tiny task's 12-step episodes
        env = UAVSwarmEnv(cfg.env_config(), num_envs=32, seed=777)
        return run_episodes(env, actor_policy(actor, env, True, 777))["coverage"].mean()

    fresh = build_learner(cfg, torch.device("cpu")).actor
    assert coverage(learner.actor) > coverage(fresh) + 0.3, (coverage(learner.actor), coverage(fresh))


def test_demonstrations_play_maps_that_training_never_plays(make_config):
    learner = build_learner(make_config(), torch.device("cpu"))
    demos = demonstrations(learner, Teacher.coordinated, 4)
    assert not torch.equal(demos.local[: 8 * 2], learner.obs["local"].reshape(-1, demos.local.shape[1])[: 8 * 2])
    assert DEMO_FIRST_ENV + 8 * 1024 < 2**31  # thousands of ranks' ranges stay valid env indices


def test_demo_env_shape_keeps_whole_episodes():
    assert demo_env_shape(81_920, 200, 64) == (64, 1280)  # the CPU default: the training env's size
    assert demo_env_shape(81_920, 200, 8192) == (409, 201)  # a GPU's thousands: fewer, longer
    assert demo_env_shape(10, 200, 64) == (1, 10)
    # imitation.steps_per_env=64 (the GPU recipe): every one of a GPU's environments, one planner episode each
    assert demo_env_shape(131_072, 64, 2048) == (2048, 64)


@pytest.mark.parametrize("map_dim", [0, 7])
def test_a_minibatch_reads_every_uav_of_its_frames_in_frame_major_order(map_dim):
    # `clone` (and a PPO minibatch) takes whole frames (index_select over frames, faster than row by row):
    # the rows are those the row-by-row gather `frame * N + uav` reads, in that order, for every buffer
    n, dim, frames = 3, 5, 6
    demos = Demonstrations(frames + 2, n, dim, map_dim, torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    local, heading = torch.randn(frames, n, dim, generator=gen), torch.randn(frames, n, 3, generator=gen)
    actions = torch.randint(0, 5, (frames, n), generator=gen, dtype=torch.uint8)
    demos.add(local, actions, heading if map_dim else None, torch.randn(frames, map_dim) if map_dim else None)
    picked = torch.tensor([4, 0, 4, 2])
    rows = (picked[:, None] * n + torch.arange(n)).reshape(-1)
    buffers = [demos.local, demos.actions] + ([demos.heading] if map_dim else [])
    for buffer in buffers:
        assert torch.equal(rows_of_steps(buffer, picked, n), buffer[rows])
    assert torch.equal(rows_of_steps(demos.local, picked, n), local[picked].reshape(-1, dim))


def test_cloning_stops_once_an_epoch_buys_less_than_min_gain(make_config):
    learner = build_learner(make_config("model.hidden_size=64"), torch.device("cpu"))
    demos = demonstrations(learner, Teacher.greedy, 24)
    start = {k: v.clone() for k, v in learner.actor.state_dict().items()}

    def fit(min_gain: float) -> dict:
        learner.actor.load_state_dict(start)
        return fit_on_cpu(learner.actor, demos, epochs=40, min_gain=min_gain)

    every = fit(0.0)
    early = fit(0.02)  # two points of accuracy an epoch: the small demonstrations are learned well before 40
    assert every["epochs"] == 40
    assert 2 <= early["epochs"] < 40, early
    assert early["accuracy"] > 0.5


def test_cloning_steps_adam_in_multi_tensor_ops_with_the_default_loops_numbers(make_config, monkeypatch):
    # foreach (CUDA's default): a few ops for all of the actor's weights, so the CPU count is what CUDA
    # launches (benchmarks.gpu_counts), and on a CPU bit for bit what the default per-weight loop gives
    from benchmarks.op_count import OpCounter

    learner = build_learner(make_config("model.hidden_size=64"), torch.device("cpu"))
    demos = demonstrations(learner, Teacher.greedy, 8)
    start = {k: v.clone() for k, v in learner.actor.state_dict().items()}
    with OpCounter() as counted:
        fit_on_cpu(learner.actor, demos, epochs=2)
    assert "aten._foreach_addcdiv_" in counted.by_op and "aten.addcdiv_" not in counted.by_op
    multi_tensor = {k: v.clone() for k, v in learner.actor.state_dict().items()}
    adam = torch.optim.Adam
    monkeypatch.setattr(imitation.torch.optim, "Adam", lambda params, lr, foreach: adam(params, lr=lr))
    learner.actor.load_state_dict(start)
    fit_on_cpu(learner.actor, demos, epochs=2)
    assert all(torch.equal(multi_tensor[k], v) for k, v in learner.actor.state_dict().items())
    assert not all(torch.equal(start[k], v) for k, v in multi_tensor.items())


def test_the_actor_learning_rate_ramps_up_and_the_critics_does_not(make_config):
    tc = make_config("train.actor_warmup=0.25", "train.actor_lr=1e-3", "train.critic_lr=2e-3").train
    assert learning_rates(tc, 0, 100) == {"actor": 0.0, "critic": 2e-3}
    assert learning_rates(tc, 10, 100) == pytest.approx({"actor": 0.9 * 0.4e-3, "critic": 0.9 * 2e-3})
    assert learning_rates(tc, 50, 100) == pytest.approx({"actor": 0.5e-3, "critic": 1e-3})
    flat = make_config("train.anneal_lr=false", "train.actor_lr=1e-3").train
    assert learning_rates(flat, 99, 100)["actor"] == 1e-3


def test_a_run_clones_once_and_a_resumed_run_does_not(make_config, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    cfg = make_config(
        "imitation.teacher=greedy",
        "imitation.env_steps=96",
        "imitation.epochs=2",
        "train.actor_warmup=0.5",
        "train.clone_kl_coef=0.5",
        "run.checkpoint_interval=128",
        f"run.dir={run}",
    )
    calls = []
    real = imitation.warm_start
    monkeypatch.setattr(imitation, "warm_start", lambda learner, progress=False: calls.append(1) or real(learner))
    learner = train(cfg)
    assert calls == [1]
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert [e.step for e in acc.Scalars("imitation/accuracy")] == [0]
    assert [e.step for e in acc.Scalars("losses/clone_kl")] == list(range(32, 257, 32))  # every iteration

    def no_clone(learner, progress=False):
        raise AssertionError("a resumed run cloned again")

    monkeypatch.setattr(imitation, "warm_start", no_clone)
    from agents.run.resume import resume_config

    resumed = train(resume_config(run, ["train.total_env_steps=384"]), resume=run)
    assert resumed.env_steps == 384 and learner.env_steps == 256


def test_bad_imitation_settings_name_the_key(make_config):
    with pytest.raises(ValueError, match="imitation.teacher"):
        make_config("imitation.teacher=greedy", "model.recurrent=true")
    with pytest.raises(ValueError, match="imitation.env_steps"):
        make_config("imitation.env_steps=0")
    with pytest.raises(ValueError, match="train.actor_warmup"):
        make_config("train.actor_warmup=1.5")
    with pytest.raises(ValueError, match="imitation.steps_per_env"):
        make_config("imitation.steps_per_env=-1")
    with pytest.raises(ValueError, match="imitation.min_accuracy_gain"):
        make_config("imitation.min_accuracy_gain=1.0")
    with pytest.raises(ValueError, match="imitation.teacher"):
        load_config(None, ["imitation.teacher=oracle"])
    with pytest.raises(ValueError, match="train.clone_kl_coef"):
        make_config("train.clone_kl_coef=0.1")  # no clone without a teacher
    with pytest.raises(ValueError, match="train.clone_kl_coef"):
        make_config("imitation.teacher=greedy", "train.clone_kl_coef=-1")
    with pytest.raises(ValueError, match="imitation.lrr"):
        load_config(None, ["imitation.lrr=1"])


def test_the_memory_check_counts_the_demonstrations(make_config):
    from agents.run import machine_defaults as md

    cfg = make_config("imitation.teacher=coordinated", "imitation.env_steps=1000", "model.actor_shared_map=true")
    need = md.estimate_memory(cfg, cfg.env.num_envs, Amp.off)
    env_cfg = cfg.env_config()
    per_step = env_cfg.num_uavs * (env_cfg.local_obs_dim * 4 + 1 + 12) + 2 * env_cfg.state_pool**2 * 4
    assert need["imitation"] == 1000 * per_step
    assert md.estimate_memory(make_config(), 4, Amp.off)["imitation"] == 0
    with pytest.raises(ValueError, match="imitation.env_steps"):
        md.check_memory(cfg, torch.device("cpu"), available=sum(need.values()))
    # DAgger's labels are named where they are what does not fit (the message named imitation.env_steps alone),
    # and the rollout's keys are left out where the rollout is a sliver of it
    cfg = make_config(
        "imitation.teacher=coordinated", "imitation.dagger_env_steps=5000000", "imitation.dagger_rounds=2"
    )
    with pytest.raises(
        ValueError,
        match=r"available: lower imitation\.env_steps .* imitation\.dagger_env_steps \(now "
        r"5000000\) or imitation\.dagger_rounds \(now 2\)[^;]*$",
    ) as err:
        md.check_memory(cfg, torch.device("cpu"), available=2**30)
    assert "env.num_envs" not in str(err.value)


def test_dagger_rounds_label_the_states_the_actor_reaches(make_config):
    from agents.algo.action_noise import ActionNoise

    learner = build_learner(make_config(), torch.device("cpu"))
    env = UAVSwarmEnv(learner.env.config, num_envs=8, seed=0, first_env_index=DEMO_FIRST_ENV)
    moved = []
    step = env.step
    env.step = lambda actions: moved.append(actions.clone()) or step(actions)
    autocast = make_autocast(Amp.off, env.device)
    teacher = make_teacher(Teacher.greedy, env, 0)
    demos = Demonstrations(3 * 12 * 8, 2, env.local_obs_dim, 0, env.obs_dtype, env.device)
    collect_demonstrations(learner.actor, env, teacher, 12, autocast, demos)
    assert torch.equal(demos.actions.view(-1, 8, 2)[:12].long(), torch.stack(moved))  # the planner moves
    first = demos.local[: 12 * 8 * 2].clone()
    moved.clear()
    collect_demonstrations(learner.actor, env, teacher, 12, autocast, demos, noise=ActionNoise(0, env.env_index, 2))
    # the (untrained) actor moves; the planner says what it would have done there
    assert (demos.actions.view(-1, 8, 2)[12:24].long() != torch.stack(moved)).float().mean() > 0.3
    assert demos.num_frames == 2 * 12 * 8 and torch.equal(demos.local[: 12 * 8 * 2], first)  # appended
    with pytest.raises(ValueError, match="do not fit"):
        collect_demonstrations(learner.actor, env, teacher, 13, autocast, demos)


def test_warm_start_clones_again_after_each_dagger_round(make_config, monkeypatch):
    cfg = make_config(
        "imitation.teacher=greedy",
        "imitation.env_steps=96",
        "imitation.epochs=1",
        "imitation.dagger_rounds=2",
        "imitation.dagger_env_steps=48",
        "imitation.dagger_epochs=3",
    )
    learner = build_learner(cfg, torch.device("cpu"))
    frames = []
    real = imitation.clone
    monkeypatch.setattr(
        imitation,
        "clone",
        lambda actor, demos, *a, **k: frames.append(sum(d.num_frames for d in demos)) or real(actor, demos, *a, **k),
    )
    stats = imitation.warm_start(learner)
    assert frames == [96, 96 + 48, 96 + 2 * 48]  # 4 demonstration environments: 24 steps, then 12 per round
    assert 0 <= stats["accuracy"] <= 1 and stats["seconds"] > 0
    assert stats["fit_epochs"] == (1, 3, 3) and stats["epochs"] == 7  # each fit's passes (the log shows them), and all


def test_kl_from_the_clone_on_hand_computed_values():
    p = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.8]]))
    q_logits = torch.log(torch.tensor([[0.25, 0.75], [0.2, 0.8]])) + 3.0  # logits: any shift
    expected = [0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), 0.0]
    assert kl_from(p, q_logits).tolist() == pytest.approx(expected, abs=1e-6)


def clone_kl(learner) -> float:
    """KL(clone || actor) on the learner's last rollout."""
    batch, _ = prepare_batch(learner)
    logits = evaluate_actions(
        learner.actor, learner.critic, batch, torch.arange(batch.state.shape[0]), learner.autocast, with_logits=True
    )[-1]
    return kl_from(clone_logprobs(learner.clone, batch, learner.autocast, 2), logits).mean().item()


def test_the_clone_kl_keeps_ppo_near_the_imitated_actor(make_config):
    def fine_tuned(coef: float):
        cfg = make_config(
            "imitation.teacher=greedy",
            "imitation.env_steps=96",
            "imitation.epochs=2",
            f"train.clone_kl_coef={coef}",
            "train.actor_lr=3e-3",
            "train.ent_coef=0.05",
        )
        learner = build_learner(cfg, torch.device("cpu"))
        imitation.warm_start(learner)
        for name, p in learner.actor.state_dict().items():  # the anchor is the clone, frozen
            assert torch.equal(p, learner.clone.state_dict()[name])
        assert not any(p.requires_grad for p in learner.clone.parameters())
        assert clone_kl(learner) == pytest.approx(0.0, abs=1e-6)
        metrics = [train_iteration(learner) for _ in range(6)]
        return learner, metrics

    free, free_metrics = fine_tuned(1e-9)
    held, held_metrics = fine_tuned(20.0)
    assert all("clone_kl" in m for m in held_metrics + free_metrics)
    assert clone_kl(held) < 0.3 * clone_kl(free), (clone_kl(held), clone_kl(free))
    plain = build_learner(make_config(), torch.device("cpu"))
    assert plain.clone is None and "clone_kl" not in train_iteration(plain)


def test_the_clones_log_probabilities_line_up_with_the_rollouts_rows(make_config):
    """With the clone equal to the actor, its log-probability of the action taken on each row is the
    one the rollout stored there, and every minibatch's KL is 0: a row-order slip would break both."""
    from agents.algo.learner import collect
    from agents.algo.ppo import minibatch_loss

    cfg = make_config(
        "imitation.teacher=greedy",
        "train.clone_kl_coef=0.5",
        "model.actor_shared_map=true",
        "env.num_envs=8",
        "train.num_steps=16",
        "train.num_minibatches=4",
    )
    learner = build_learner(cfg, torch.device("cpu"))
    learner.clone.load_state_dict(learner.actor.state_dict())
    collect(learner)
    batch, _ = prepare_batch(learner)
    taken = batch.clone_logprobs.gather(1, batch.actions.long()[:, None]).squeeze(1)
    assert torch.allclose(taken, batch.logprobs, atol=1e-6), (taken - batch.logprobs).abs().max()
    assert batch.logprobs.std() > 1e3 * 1e-6  # rows differ by far more than the tolerance: a shuffle would show
    for frames in torch.randperm(batch.state.shape[0], generator=torch.Generator().manual_seed(0)).split(32):
        _, stats = minibatch_loss(learner.actor, learner.critic, batch, frames, cfg.train, learner.autocast)
        assert stats.clone_kl.abs() < 1e-6


def test_a_checkpoint_without_the_clone_cannot_resume_a_run_that_needs_it(make_config, tmp_path):
    from agents.run import checkpoint as ckpt
    from agents.run.resume import resume_config

    run = tmp_path / "run"
    train(
        make_config(
            "imitation.teacher=greedy",
            "imitation.env_steps=48",
            "imitation.epochs=1",
            "run.checkpoint_interval=128",
            f"run.dir={run}",
        )
    )
    with pytest.raises(ckpt.CheckpointError, match="no imitated actor"):
        train(resume_config(run, ["train.total_env_steps=384", "train.clone_kl_coef=0.1"]), resume=run)
