"""A non-finite loss skips its update without touching parameters or Adam state (and without a
host sync); if it keeps happening, training stops and the last good checkpoint is intact."""

from __future__ import annotations

import pytest
import torch

from agents import train_mappo
from agents.algo import ppo
from agents.algo.learner import build_learner
from agents.algo.optimizer_step import optimizer_step
from agents.run import checkpoint as ckpt
from agents.run import control as run_control
from agents.train_mappo import TrainingStopped, train


def snapshot(learner):
    params = [p.detach().clone() for p in [*learner.actor.parameters(), *learner.critic.parameters()]]
    adam = {i: {k: v.clone() for k, v in s.items()} for i, s in learner.optimizer.state_dict()["state"].items()}
    return params, adam


RECURRENT = ("model.recurrent=true", "train.chunk_length=4")


@pytest.mark.parametrize("amp, extra", [("off", ()), ("fp16", ()), ("off", RECURRENT), ("fp16", RECURRENT)])
def test_nan_loss_skips_the_step_entirely(make_config, amp, extra):
    learner = build_learner(make_config(f"train.amp={amp}", *extra), torch.device("cpu"))
    train_mappo.train_iteration(learner)  # Adam has state now
    before_params, before_adam = snapshot(learner)
    loss = sum(p.sum() for p in learner.actor.parameters()) * float("nan")
    learner.optimizer.zero_grad()
    learner.scaler.scale(loss).backward()
    _, _, skipped = optimizer_step(
        learner.optimizer, learner.scaler, learner.actor, learner.critic, loss, max_grad_norm=0.5
    )
    assert skipped.item() == 1.0
    after_params, after_adam = snapshot(learner)
    assert all(torch.equal(a, b) for a, b in zip(before_params, after_params))
    assert before_adam.keys() == after_adam.keys()
    for i in before_adam:
        assert all(torch.equal(before_adam[i][k], after_adam[i][k]) for k in before_adam[i])
    # and a finite step afterwards does move the parameters
    loss = sum((p**2).sum() for p in learner.actor.parameters())
    learner.optimizer.zero_grad()
    learner.scaler.scale(loss).backward()
    _, _, skipped = optimizer_step(
        learner.optimizer, learner.scaler, learner.actor, learner.critic, loss, max_grad_norm=0.5
    )
    assert skipped.item() == 0.0
    assert not torch.equal(next(learner.actor.parameters()), before_params[0])


PER_ITERATION = 2 * 2  # minibatch losses per iteration: update_epochs x num_minibatches of the tiny config


def nan_loss_after(good_iterations: int, monkeypatch):
    """Make every PPO loss NaN after the first `good_iterations` iterations; returns the real loss."""
    real_loss = ppo.ppo_loss
    calls = {"n": 0}

    def loss_going_bad(*args, **kwargs):
        loss, stats = real_loss(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > good_iterations * PER_ITERATION else loss), stats

    monkeypatch.setattr(ppo, "ppo_loss", loss_going_bad)
    return real_loss


@pytest.mark.parametrize("extra", [(), RECURRENT], ids=["feed_forward", "recurrent"])
def test_repeated_nan_stops_training_with_the_last_good_checkpoint_intact(make_config, tmp_path, monkeypatch, extra):
    real_loss = nan_loss_after(3, monkeypatch)
    cfg = make_config(
        "train.total_env_steps=640",
        "run.checkpoint_interval=32",
        "train.max_bad_iterations=3",
        f"run.dir={tmp_path}",
        *extra,
    )
    with pytest.raises(TrainingStopped, match=r"3 consecutive iterations.*ckpt_000000000096\.pt"):
        train(cfg)
    good = ckpt.load_latest(tmp_path)[1]
    assert good["env_steps"] == 96  # three good iterations of 32 env steps, nothing saved after
    assert all(torch.isfinite(v).all() for v in good["actor"].values())
    # main() turns the stop into a message and exit code 1
    monkeypatch.setattr(ppo, "ppo_loss", lambda *a, **k: (real_loss(*a, **k)[0] * float("nan"), real_loss(*a, **k)[1]))
    assert train_mappo.main(["--resume", str(tmp_path)]) == 1


def test_a_last_iteration_with_skipped_updates_still_ends_with_a_final_checkpoint(make_config, tmp_path, monkeypatch):
    # fp16's loss scaler skips a step now and then; a finished run must have its final checkpoint
    nan_loss_after(2, monkeypatch)  # the third and last iteration goes bad
    learner = train(make_config("train.total_env_steps=96", "run.checkpoint_interval=32", f"run.dir={tmp_path}"))
    assert learner.bad_iterations == 1
    final = ckpt.load_latest(tmp_path)[1]
    assert final["env_steps"] == 96
    assert all(torch.equal(final["actor"][k], v.cpu()) for k, v in learner.actor.state_dict().items())
    assert all(torch.isfinite(v).all() for v in final["actor"].values())


def test_an_overflow_on_another_rank_backs_off_this_ranks_loss_scale_too():
    # fp16 under torchrun: unscale_ sees only local gradients; the all-reduce brings another rank's
    # inf in. Every rank must skip the step and halve its scale alike, or their scales drift apart.
    from torch import nn

    actor, critic = nn.Linear(2, 1), nn.Linear(2, 1)
    optimizer = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    loss = (actor(torch.ones(1, 2)) + critic(torch.ones(1, 2))).sum()
    scaler.scale(loss).backward()
    before = [p.detach().clone() for p in actor.parameters()]

    def all_reduce_with_an_overflowed_rank(params):
        for p in params:
            p.grad.fill_(float("inf"))

    _, _, skipped = optimizer_step(optimizer, scaler, actor, critic, loss, 0.5, all_reduce_with_an_overflowed_rank)
    assert skipped.item() == 1.0 and scaler.get_scale() == 512.0
    assert all(torch.equal(a, b) for a, b in zip(before, actor.parameters()))


@pytest.mark.parametrize(
    ("amp", "skipped", "nonfinite", "bad"),
    [
        ("off", 0, 0, False),
        ("off", 1, 0, True),  # a non-finite gradient without a scaler is a real problem
        ("bf16", 1, 1, True),
        ("bf16", 1, 0, True),  # no loss scaler: a non-finite gradient is a problem even with a finite loss
        ("fp16", 3, 0, False),  # overflows with finite losses: the loss scale backing off
        ("fp16", 4, 0, True),  # every update of the iteration overflowed
        ("fp16", 1, 1, True),  # a non-finite loss is a problem under any AMP mode
    ],
)
def test_which_iterations_count_as_bad(make_config, amp, skipped, nonfinite, bad):
    cfg = make_config(f"train.amp={amp}").train
    assert cfg.update_epochs * cfg.num_minibatches == PER_ITERATION
    problem = run_control.iteration_problem(
        {"skipped_updates": float(skipped), "nonfinite_losses": float(nonfinite)}, cfg
    )
    assert (problem is not None) == bad
    if bad:
        assert f"{skipped} of {PER_ITERATION} updates skipped" in problem


def test_fp16_overflow_skips_neither_stop_training_nor_drop_checkpoints(make_config, tmp_path, monkeypatch):
    # A loss scale too large for the first updates: they overflow (finite loss, inf gradient) and
    # are skipped while the scaler halves the scale. Not a problem: the run goes on and checkpoints.
    cfg = make_config(
        "train.amp=fp16",
        "train.total_env_steps=96",
        "run.checkpoint_interval=32",
        "train.max_bad_iterations=1",
        f"run.dir={tmp_path}",
    )
    for power in range(30, 10, -1):  # the largest scale whose first iteration still makes progress
        learner = build_learner(cfg, torch.device("cpu"))
        learner.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**power)
        m = train_mappo.read_metrics(train_mappo.train_iteration(learner))
        if m["skipped_updates"] < PER_ITERATION:
            break
    assert 0 < m["skipped_updates"] < PER_ITERATION and m["nonfinite_losses"] == 0
    assert run_control.iteration_problem(m, cfg.train) is None
    assert learner.scaler.get_scale() < 2.0**power

    real_scaler = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda *a, **k: real_scaler(*a, **k, init_scale=2.0**power))
    learner = train(cfg)
    assert learner.bad_iterations == 0
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [f"ckpt_{steps:012d}.pt" for steps in (32, 64, 96)]


@pytest.mark.parametrize("extra", [(), RECURRENT], ids=["feed_forward", "recurrent"])
def test_update_counts_nonfinite_losses(make_config, monkeypatch, extra):
    nan_loss_after(0, monkeypatch)
    learner = build_learner(make_config(*extra), torch.device("cpu"))
    m = train_mappo.read_metrics(train_mappo.train_iteration(learner))
    assert m["skipped_updates"] == m["nonfinite_losses"] == PER_ITERATION
