"""The optimizer and its step: one fused Adam over both networks, and the step that unscales (fp16),
averages across ranks (data-parallel), clips each network's gradient norm and applies the update,
or skips it where the loss or a norm is not finite, all without a host sync. `minibatch_norms` is
the step's arithmetic that `train.compile` captures whole (on CUDA, one CUDA graph).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import torch
from torch import nn

from agents.algo.networks import Actor, Critic
from agents.config import TrainConfig


def make_optimizer(actor: Actor, critic: Critic, cfg: TrainConfig) -> torch.optim.Adam:
    """One Adam with two parameter groups (actor, critic: their own learning rates).

    `fused=True`: the fused kernel takes a device-side `found_inf` flag, so a non-finite update
    is skipped without a host sync (see `optimizer_step`).
    """
    groups = [
        {"params": list(actor.parameters()), "lr": cfg.actor_lr, "name": "actor"},
        {"params": list(critic.parameters()), "lr": cfg.critic_lr, "name": "critic"},
    ]
    return torch.optim.Adam(groups, eps=cfg.adam_eps, fused=True)


def minibatch_norms(
    actor_grads: list[torch.Tensor], critic_grads: list[torch.Tensor], loss: torch.Tensor, stats: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a minibatch's step needs of its gradients, in one function that `train.compile` captures
    whole (`agents.algo.compiled.compile_norms`): it reads the gradients and writes nothing.

    Args:
        actor_grads, critic_grads: each network's gradients.
        loss: the 0-dim loss they are of.
        stats: the loss's 0-dim statistics (`agents.algo.ppo.LossStats`, in field order, those that
            are not None).

    Returns:
        `(actor_norm, critic_norm, skipped, row)`: the gradient norms before clipping (as
        `clip_grad_norm_` computes them), `skipped` 1.0 where the loss or a norm is not finite (the
        step is skipped) and 0.0 elsewhere, and the minibatch's row of `ppo.update`'s sums, float32:
        `stats`, the two norms (all zeros where skipped: a skipped minibatch must not poison the
        iteration's means), `skipped`, and whether the loss was not finite.
    """
    actor_norm = nn.utils.get_total_norm(actor_grads, foreach=True)
    critic_norm = nn.utils.get_total_norm(critic_grads, foreach=True)
    finite_loss = torch.isfinite(loss.detach())
    skipped = (~(finite_loss & torch.isfinite(actor_norm) & torch.isfinite(critic_norm))).float()
    means = torch.stack([s.float() for s in stats] + [actor_norm.float(), critic_norm.float()])
    means = torch.where(skipped > 0, torch.zeros_like(means), means)
    return actor_norm, critic_norm, skipped, torch.cat([means, skipped.view(1), (~finite_loss).float().view(1)])


NormsFn = Callable[
    [list[torch.Tensor], list[torch.Tensor], torch.Tensor, list[torch.Tensor]],
    tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
]


def step_gradients(
    optimizer: torch.optim.Adam,
    scaler: torch.amp.GradScaler,
    actor: nn.Module,
    critic: nn.Module,
    loss: torch.Tensor,
    max_grad_norm: float,
    sync_gradients: Callable[[Iterable[nn.Parameter]], None] | None = None,
    stats: list[torch.Tensor] | None = None,
    norms_fn: NormsFn = minibatch_norms,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unscale (fp16), clip each network's gradient norm, and step unless anything is non-finite. A
    skipped step leaves parameters and Adam state untouched (`found_inf`), without a host sync.

    Args:
        optimizer: `make_optimizer`'s fused Adam, gradients computed.
        scaler: the loss scaler (enabled under fp16 only).
        actor, critic: the networks, each clipped on its own.
        loss: the 0-dim loss the gradients are of.
        max_grad_norm: each network's gradient norm clip.
        sync_gradients: averages the gradients over ranks (torchrun), right after `unscale_`.
        stats: the loss's statistics for the returned row (`minibatch_norms`).
        norms_fn: `minibatch_norms`, or its compiled form.

    Returns:
        `minibatch_norms`'s `(actor_norm, critic_norm, skipped, row)`, 0-dim device tensors and `row [K]`.
    """
    scaler.unscale_(optimizer)  # no-op unless fp16
    if sync_gradients is not None:  # data-parallel: average across ranks before clipping
        sync_gradients(itertools.chain(actor.parameters(), critic.parameters()))
    # `clip_grad_norm_` in its two halves: the norms with the rest of the step's arithmetic (one
    # graph under train.compile, which only reads the gradients), then the in-place scaling
    actor_params = [p for p in actor.parameters() if p.grad is not None]
    critic_params = [p for p in critic.parameters() if p.grad is not None]
    actor_norm, critic_norm, skipped, row = norms_fn(
        [p.grad for p in actor_params], [p.grad for p in critic_params], loss, stats or []
    )
    nn.utils.clip_grads_with_norm_(actor_params, max_grad_norm, actor_norm, foreach=True)
    nn.utils.clip_grads_with_norm_(critic_params, max_grad_norm, critic_norm, foreach=True)
    optimizer.found_inf = skipped  # read by the fused Adam kernel: 1.0 skips the update
    optimizer.step()
    if sync_gradients is not None and scaler.is_enabled():
        # unscale_ saw only this rank's gradients; after the all-reduce the skip is everyone's, and
        # every rank's loss scale must back off (or grow) alike, or the replicas' scales drift apart
        for found_inf in scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values():
            found_inf.copy_(skipped)
    scaler.update()  # no-op unless fp16; halves the scale after an inf/NaN gradient
    return actor_norm, critic_norm, skipped, row


def optimizer_step(
    optimizer: torch.optim.Adam,
    scaler: torch.amp.GradScaler,
    actor: nn.Module,
    critic: nn.Module,
    loss: torch.Tensor,
    max_grad_norm: float,
    sync_gradients: Callable[[Iterable[nn.Parameter]], None] | None = None,
):
    """`step_gradients` without statistics. Returns `(actor_grad_norm, critic_grad_norm, skipped)`,
    0-dim device tensors; the norms before clipping."""
    return step_gradients(optimizer, scaler, actor, critic, loss, max_grad_norm, sync_gradients)[:3]
