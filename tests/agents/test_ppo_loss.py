"""The PPO loss on hand-computed values (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from agents.algo.ppo import ppo_loss

LOGPROB = (math.log(1.5), math.log(0.5))


def loss_of(new_value=(1.0, 3.0), clip_vloss=True, new_logprob=LOGPROB):
    new_logprob = torch.tensor(new_logprob, requires_grad=True)
    out = ppo_loss(
        new_logprob=new_logprob,
        old_logprob=torch.zeros(2),
        advantages=torch.tensor([1.0, -2.0]),
        entropy=torch.tensor([1.0, 0.5]),
        new_value=torch.tensor(new_value),
        old_value=torch.tensor([0.5, 3.0]),
        target=torch.tensor([2.0, 2.0]),
        clip_coef=0.2,
        clip_vloss=clip_vloss,
        vf_clip_coef=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
    )
    return new_logprob, out


def test_ppo_loss_hand_computed():
    _, (loss, s) = loss_of()
    # ratio = [1.5, 0.5]
    # sample 0 (A=+1):  -A*r = -1.5, -A*clip(r) = -1.2             -> max -1.2
    # sample 1 (A=-2):  -A*r =  1.0, -A*clip(r) = 2*0.8 = 1.6        -> max  1.6
    # policy_loss = (-1.2 + 1.6) / 2 = 0.2
    assert s.policy_loss.item() == pytest.approx(0.2, abs=1e-6)
    # value 0: unclipped (1-2)^2 = 1; clipped 0.5 + clip(0.5, +-0.2) = 0.7 -> (0.7-2)^2 = 1.69 -> 1.69
    # value 1: unclipped (3-2)^2 = 1; clipped 3 + 0 = 3 -> 1                                   -> 1
    # value_loss = 0.5 * (1.69 + 1) / 2 = 0.6725
    assert s.value_loss.item() == pytest.approx(0.6725, abs=1e-6)
    assert s.entropy.item() == pytest.approx(0.75, abs=1e-6)
    # loss = 0.2 - 0.01 * 0.75 + 0.5 * 0.6725 = 0.52875
    assert loss.item() == pytest.approx(0.52875, abs=1e-6)
    # approx_kl = mean((r - 1) - log r) = mean(0.5 - 0.405465, -0.5 + 0.693147) = 0.143841
    assert s.approx_kl.item() == pytest.approx(0.143841, abs=1e-5)
    # old_approx_kl = mean(-log r) = (-0.405465 + 0.693147) / 2 = 0.143841
    assert s.old_approx_kl.item() == pytest.approx(0.143841, abs=1e-5)
    assert s.clipfrac.item() == 1.0  # |r - 1| = 0.5 > 0.2 for both


def test_value_loss_without_clipping():
    _, (_, s) = loss_of(clip_vloss=False)
    assert s.value_loss.item() == pytest.approx(0.5 * (1 + 1) / 2, abs=1e-6)


def test_policy_gradient_zero_when_clipped_and_minus_advantage_at_ratio_one():
    # Both samples above are clipped in the direction of their advantage: no policy gradient.
    logp, (loss, _) = loss_of()
    loss.backward()
    # d loss / d logp = entropy term only (entropy is an input here, so none): exactly 0.
    assert logp.grad.tolist() == [0.0, 0.0]
    # At ratio 1 nothing is clipped: d(pg_loss)/d logp_i = -A_i * r_i / M = [-0.5, 1.0].
    logp, (loss, _) = loss_of(new_logprob=(0.0, 0.0))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-0.5, 1.0]))


@pytest.mark.parametrize("mixed", [False, True])
def test_clipped_value_loss_starts_at_the_critics_own_values(make_config, mixed):
    # The old values of the clipped value loss are the critic's outputs at the rollout: before any gradient
    # step the critic gives them again, whatever the value normalizer's update in between (it shifted them by
    # the statistics' change, up to ~1 on the normalized scale in the first iterations: the clip dropped rows)
    from agents.algo.learner import build_learner, collect, prepare_batch, train_iteration
    from agents.algo.ppo import evaluate_actions

    sizes = ("model.size_agnostic=true", "model.agent_id=false", "env.grid_height=[8,10]", "env.grid_width=[8,10]")
    sizes = (*sizes, "env.num_envs=6") if mixed else ()
    learner = build_learner(make_config(*sizes), torch.device("cpu"))
    for _ in range(2):  # statistics that have seen returns, and move again at the next update
        train_iteration(learner)
    collect(learner)
    mean_before = learner.value_norm.mean_var()[0].clone()
    batches, _ = prepare_batch(learner)
    assert not torch.equal(mean_before, learner.value_norm.mean_var()[0])  # the update moved the statistics
    for batch, group in zip(batches if mixed else [batches], learner.groups):
        steps = group.storage.actions.shape[0] * group.env.num_envs
        with torch.no_grad():
            rows, _, _, new_values = evaluate_actions(
                learner.actor, learner.critic, batch, torch.arange(steps), learner.autocast
            )
        torch.testing.assert_close(new_values, batch.values[rows], rtol=1e-5, atol=1e-5)
