"""Before the first update the PPO ratio is exactly 1: the update recomputes log-probabilities the
same way (float32, same function) as the rollout did, with and without AMP; a recurrent actor's
from the hidden state stored at each chunk's start, through the chunk's steps."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agents.algo.learner import build_learner, collect, prepare_batch
from agents.algo.ppo import chunk_steps, evaluate_actions

RECURRENT = ["model.recurrent=true", "train.chunk_length=4", "env.max_steps=5"]  # episodes end inside chunks


def fp16_products_depend_on_the_row_count() -> bool:
    """Whether this CPU's fp16 matrix products give a row a result that depends on how many rows
    share the product (native AVX512-FP16 kernels block by the row count; emulated fp16, fp32 and
    bf16 here do not). Where they do, the rollout (all environments' rows) and the update (a
    minibatch's rows) cannot agree to the last bit, only to rounding."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(16, 16, generator=g), torch.randn(64, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.float16):
        return not torch.equal(F.linear(x, w), torch.cat([F.linear(rows, w) for rows in x.split(16)]))


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["model.actor_shared_map=true", "model.critic=ippo", "model.activation=relu"],
        RECURRENT,
        [*RECURRENT, "model.actor_shared_map=true", "model.activation=relu"],
    ],
)
def test_ratio_is_exactly_one_before_the_first_update(make_config, amp, extra):
    cfg = make_config(f"train.amp={amp}", "env.num_envs=8", "train.num_steps=16", "train.num_minibatches=4", *extra)
    torch.manual_seed(0)
    learner = build_learner(cfg, torch.device("cpu"))
    for _ in range(2):  # the second rollout starts from the first one's hidden states
        collect(learner)
    batch, _ = prepare_batch(learner)
    assert batch.logprobs.dtype == torch.float32
    recurrent = learner.actor.recurrent
    if recurrent:
        assert batch.starts.any() and batch.hidden.abs().sum() > 0
    n = batch.num_sequences if recurrent else batch.state.shape[0]  # chunks, or environment steps
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    for steps in perm.split(n // cfg.train.num_minibatches):  # minibatches as the update draws them
        if recurrent:
            steps = chunk_steps(steps, cfg.train.chunk_length, cfg.env.num_envs)
        mb_inds, new_logprob, entropy, new_value = evaluate_actions(
            learner.actor, learner.critic, batch, steps, learner.autocast
        )
        assert new_logprob.dtype == torch.float32 and new_value.dtype == torch.float32
        ratio = (new_logprob - batch.logprobs[mb_inds]).exp()
        if amp == "fp16" and fp16_products_depend_on_the_row_count():
            # rounding only: a wrong hidden state or chunk start moves the ratio by far more
            assert (ratio - 1).abs().max() <= 1e-5, f"max |ratio - 1| = {(ratio - 1).abs().max()}"
        else:
            assert torch.equal(ratio, torch.ones_like(ratio)), f"max |ratio - 1| = {(ratio - 1).abs().max()}"
        assert torch.isfinite(entropy).all()
