"""Before the first update the PPO ratio is exactly 1: the update recomputes log-probabilities the
same way (float32, same function) as the rollout did, with and without AMP."""

from __future__ import annotations

import pytest
import torch

from agents.ppo import evaluate_actions
from agents.rollout import collect
from agents.train_mappo import build_learner, prepare_batch


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
@pytest.mark.parametrize("extra", [[], ["model.actor_shared_map=true", "model.critic=ippo", "model.activation=relu"]])
def test_ratio_is_exactly_one_before_the_first_update(make_config, amp, extra):
    cfg = make_config(f"train.amp={amp}", "env.num_envs=8", "train.num_steps=16", "train.num_minibatches=4", *extra)
    torch.manual_seed(0)
    learner = build_learner(cfg, torch.device("cpu"))
    collect(learner.env, learner.actor, learner.critic, learner.value_norm, learner.obs, learner.storage,
            learner.stats, learner.action_gen, learner.autocast)
    batch, _ = prepare_batch(learner)
    assert batch.logprobs.dtype == torch.float32
    n = batch.state.shape[0]  # environment steps
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    for frames in perm.split(n // cfg.train.num_minibatches):  # minibatches as the update draws them
        mb_inds, new_logprob, entropy, new_value = evaluate_actions(learner.actor, learner.critic, batch, frames,
                                                                    learner.autocast)
        assert new_logprob.dtype == torch.float32 and new_value.dtype == torch.float32
        ratio = (new_logprob - batch.logprobs[mb_inds]).exp()
        assert torch.equal(ratio, torch.ones_like(ratio)), f"max |ratio - 1| = {(ratio - 1).abs().max()}"
        assert torch.isfinite(entropy).all()
