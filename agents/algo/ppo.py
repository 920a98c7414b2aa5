"""The PPO update: clipped surrogate, clipped value loss, entropy bonus, epochs x minibatches.

`ppo_loss` is a pure function of tensors (tested on hand-computed values). `update` runs the
epochs over a flattened rollout (a recurrent actor's in chunks of `train.chunk_length` steps of one
environment, each replayed from its stored hidden state) and returns its statistics as device
tensors; each minibatch's gradients are unscaled, clipped and applied by `agents.algo.optimizer_step`.
Nothing here reads a tensor on the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from agents.algo.networks import Actor, Critic, agent_ids, categorical
from agents.algo.optimizer_step import NormsFn, minibatch_norms, step_gradients
from agents.config import TrainConfig


@dataclass
class LossStats:
    """The loss's parts, 0-dim device tensors (CleanRL's `losses/*`)."""

    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    old_approx_kl: torch.Tensor
    clipfrac: torch.Tensor
    clone_kl: torch.Tensor | None = None  # KL(clone || actor), under `train.clone_kl_coef`


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    new_value: torch.Tensor,
    old_value: torch.Tensor,
    target: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool,
    vf_clip_coef: float,
    ent_coef: float,
    vf_coef: float,
) -> tuple[torch.Tensor, LossStats]:
    """The PPO loss of `M` samples. Every tensor argument is `[M]` float32, the values and `target`
    on the critic's normalized scale (`old_*`: at the rollout, `new_*`: now); the arguments' roles:

        loss      = pg_loss - ent_coef * mean(entropy) + vf_coef * v_loss
        pg_loss   = mean(max(-advantages * ratio, -advantages * clip(ratio, 1 - clip_coef, 1 + clip_coef)))
        ratio     = exp(new_logprob - old_logprob)
        v_loss    = 0.5 * mean(max((new_value - target)^2, (v_clipped - target)^2))   (clip_vloss)
                    0.5 * mean((new_value - target)^2)                                 (otherwise)
        v_clipped = old_value + clip(new_value - old_value, -vf_clip_coef, vf_clip_coef)

    Returns:
        `(loss, stats)`: the 0-dim loss and its parts, detached.
    """
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    v_loss_unclipped = (new_value - target) ** 2
    if clip_vloss:
        v_clipped = old_value + torch.clamp(new_value - old_value, -vf_clip_coef, vf_clip_coef)
        v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - target) ** 2).mean()
    else:
        v_loss = 0.5 * v_loss_unclipped.mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - ent_coef * entropy_loss + vf_coef * v_loss
    with torch.no_grad():
        stats = LossStats(
            policy_loss=pg_loss.detach(),
            value_loss=v_loss.detach(),
            entropy=entropy_loss.detach(),
            approx_kl=((ratio - 1) - logratio).mean(),  # http://joschu.net/blog/kl-approx.html
            old_approx_kl=(-logratio).mean(),
            clipfrac=((ratio - 1.0).abs() > clip_coef).float().mean(),
        )
    return loss, stats


@dataclass
class Batch:
    """A flattened rollout. Rows index (t, b, n) in that order; `state` rows index (t, b).
    A recurrent actor's also holds the hidden state at each chunk's start, rows (k, b) for chunk k
    of environment b, and which steps began an episode."""

    local: torch.Tensor  # [T*B*N, L] float32, or the AMP dtype
    state: torch.Tensor  # [T*B, S] float32, or the AMP dtype
    heading: torch.Tensor  # [T*B*N, 3] float32, the shared-map actor's headings from the rollout
    actions: torch.Tensor  # [T*B*N] uint8
    logprobs: torch.Tensor  # [T*B*N] float32
    values: torch.Tensor  # [T*B*N] float32, normalized scale
    returns: torch.Tensor  # [T*B*N] float32, normalized scale
    advantages: torch.Tensor  # [T*B*N] float32
    num_agents: int
    num_envs: int = 0  # B
    hidden: torch.Tensor | None = None  # [T/C*B, N, H] float32, recurrent actors only
    starts: torch.Tensor | None = None  # [T*B] bool, step t of env b began an episode (recurrent actors only)
    clone_logprobs: torch.Tensor | None = None  # [T*B*N, A] float32, the frozen clone's (train.clone_kl_coef > 0)

    @property
    def num_sequences(self) -> int:
        """Chunks of one environment's steps, the recurrent update's unit (T / C * B)."""
        return self.hidden.shape[0]


def chunk_steps(sequences: torch.Tensor, chunk_length: int, num_envs: int) -> torch.Tensor:
    """`[C, M]` environment-step indices (into `T * B`) of the chunks `sequences [M]` (index k * B + b:
    chunk k of environment b), step-major."""
    chunk, env = sequences // num_envs, sequences % num_envs
    steps = chunk * chunk_length + torch.arange(chunk_length, device=sequences.device)[:, None]  # [C, M]
    return steps * num_envs + env


def step_rows(steps: torch.Tensor, num_agents: int) -> torch.Tensor:
    """`[F * N]` flat row indices of every agent of the environment steps `steps [F]`, agent-minor."""
    return (steps.unsqueeze(1) * num_agents + torch.arange(num_agents, device=steps.device)).reshape(-1)


def rows_of_steps(buffer: torch.Tensor, steps: torch.Tensor, num_agents: int) -> torch.Tensor:
    """`[F * N, ...]` the rows of `buffer [T * N, ...]` (one per step and agent, agent-minor) of every agent of
    the steps `steps [F]`, in `step_rows`'s order."""
    # index_select over whole steps, not indexing by rows: a PPO minibatch of the default ~2.9 -> ~1.9 ms (bf16)
    # and 4.1 -> 2.3 ms (fp32 on the AVX2 class), a cloning epoch ~5 % faster (the 2-core Zen 4 EPYC)
    whole = torch.index_select(buffer.view(-1, num_agents, *buffer.shape[1:]), 0, steps)
    return whole.view(-1, *buffer.shape[1:])


def evaluate_actions(
    actor: Actor,
    critic: Critic,
    batch: Batch,
    steps: torch.Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager],
    with_logits: bool = False,
):
    """Forward a minibatch of whole environment steps (every agent of each) through both networks,
    as in the rollout: the global state's share of a first layer is computed once per step.

    Args:
        actor, critic: the networks.
        batch: the flattened rollout.
        steps: `[F]` int64 indices into `T * B`; a recurrent actor's `[C, M]` from `chunk_steps`
            (`M` chunks of `C` steps, each replayed from its stored hidden state).
        autocast: the networks' autocast factory.
        with_logits: also return the actor's logits.

    Returns:
        `(rows, new_logprob, entropy, new_value)`, `[F * N]` each (`rows`: the flat agent-step
        indices, in the order of the others), float32; with `with_logits` the logits `[F * N, A]` last.
    """
    n = batch.num_agents
    rows = step_rows(steps.reshape(-1), n)
    agent = rows % n
    local = rows_of_steps(batch.local, steps.reshape(-1), n)
    state = torch.index_select(batch.state, 0, steps.reshape(-1)) if critic.centralized or actor.map_dim else None
    heading = rows_of_steps(batch.heading, steps.reshape(-1), n) if actor.map_dim else None
    with autocast():
        if actor.recurrent:
            first, c = steps[0], steps.shape[0]
            sequences = first // (c * batch.num_envs) * batch.num_envs + first % batch.num_envs
            hidden = batch.hidden[sequences].reshape(-1, batch.hidden.shape[-1])  # [M * N, H]
            starts = batch.starts[steps].repeat_interleave(n, dim=1)  # [C, M * N]
            logits, _ = actor(local, agent, state, state_repeat=n, heading=heading, hidden=hidden, starts=starts)
        else:
            logits = actor(local, agent, state, state_repeat=n, heading=heading)
        new_value = critic(state, local, agent, state_repeat=n)
    new_logprob, entropy = categorical(logits, batch.actions[rows])
    return (rows, new_logprob, entropy, new_value) + ((logits,) if with_logits else ())


def kl_from(logprobs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """`[M]` KL(p || q) of the distributions `logprobs [M, A]` (p's log-probabilities, float32)
    and `logits [M, A]` (q's): what q loses of the actions p takes, which draws q's mass back to them."""
    q = torch.log_softmax(logits.float(), dim=-1)
    return (logprobs.exp() * (logprobs - q)).sum(-1)


@torch.no_grad()
def clone_logprobs(
    clone: Actor, batch: Batch, autocast: Callable[[], contextlib.AbstractContextManager], num_slices: int
) -> torch.Tensor:
    """`[T*B*N, A]` float32 log-probabilities of the frozen `clone` on every row of `batch`, computed
    once per iteration in `num_slices` slices of environment steps (a minibatch's memory at most)."""
    n, steps = batch.num_agents, batch.state.shape[0]
    per_slice = -(-steps // num_slices)
    out = []
    for first in range(0, steps, per_slice):
        last = min(first + per_slice, steps)
        agent = agent_ids(last - first, n, batch.actions.device)
        state = batch.state[first:last] if clone.map_dim else None  # a slice's rows: views, no copies
        with autocast():
            logits = clone(
                batch.local[first * n : last * n],
                agent,
                state,
                state_repeat=n,
                heading=batch.heading[first * n : last * n] if clone.map_dim else None,
            )
        out.append(torch.log_softmax(logits.float(), dim=-1))
    return torch.cat(out)


def minibatch_loss(
    actor: Actor,
    critic: Critic,
    batch: Batch,
    steps: torch.Tensor,
    cfg: TrainConfig,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> tuple[torch.Tensor, LossStats]:
    """The PPO loss (`ppo_loss`, plus `train.clone_kl_coef`'s KL term) of the minibatch of environment
    steps `steps` (`evaluate_actions`'s arguments; `cfg` the train config). One function, so that
    `train.compile` compiles the whole forward into one graph."""
    anchored = batch.clone_logprobs is not None
    rows, new_logprob, entropy, new_value, *logits = evaluate_actions(actor, critic, batch, steps, autocast, anchored)
    loss, stats = ppo_loss(
        new_logprob,
        batch.logprobs[rows],
        batch.advantages[rows],
        entropy,
        new_value,
        batch.values[rows],
        batch.returns[rows],
        cfg.clip_coef,
        cfg.clip_vloss,
        cfg.vf_clip_coef,
        cfg.ent_coef,
        cfg.vf_coef,
    )
    if anchored:
        clone_kl = kl_from(batch.clone_logprobs[rows], logits[0]).mean()
        loss = loss + cfg.clone_kl_coef * clone_kl
        stats.clone_kl = clone_kl.detach()
    return loss, stats


LossFn = Callable[
    [Actor, Critic, Batch, torch.Tensor, TrainConfig, Callable[[], contextlib.AbstractContextManager]],
    tuple[torch.Tensor, LossStats],
]


def update(
    actor: Actor,
    critic: Critic,
    optimizer: torch.optim.Adam,
    scaler: torch.amp.GradScaler,
    batch: Batch | list[Batch],
    cfg: TrainConfig,
    generator: torch.Generator,
    autocast: Callable[[], contextlib.AbstractContextManager],
    sync_gradients: Callable[[Iterable[nn.Parameter]], None] | None = None,
    loss_fn: LossFn = minibatch_loss,
    norms_fn: NormsFn = minibatch_norms,
) -> dict[str, torch.Tensor]:
    """`cfg.update_epochs` passes over `batch` in `cfg.num_minibatches` random minibatches of whole
    environment steps (all their agents); a recurrent actor's are random sets of whole chunks.

    Args:
        actor, critic, optimizer, scaler, sync_gradients: as `step_gradients`'s.
        batch: the flattened rollout (`agents.algo.learner.prepare_batch`); a mixed-size run's, one
            per size group: each minibatch then takes its share of every group's steps, and its
            loss is the groups' losses weighted by their agent-steps (the mean over all its rows).
        cfg: the train config.
        generator: draws the minibatches.
        autocast: the networks' autocast factory.
        loss_fn: `minibatch_loss`, or its compiled form (`compile_loss`).
        norms_fn: `minibatch_norms`, or its compiled form (`compile_norms`).

    Returns:
        Means over the minibatches that stepped, 0-dim device tensors, and two counts (`COUNTS`):
        `skipped_updates` (non-finite loss or gradient) and `nonfinite_losses`.
    """
    batches = batch if isinstance(batch, list) else [batch]
    recurrent = batches[0].hidden is not None
    # the units a minibatch draws: chunks of one environment's steps, or single environment steps;
    # each minibatch takes all agents of its steps
    units = [b.num_sequences if recurrent else b.state.shape[0] for b in batches]
    agent_steps = [u * b.num_agents for u, b in zip(units, batches)]
    weights = [a / sum(agent_steps) for a in agent_steps]  # Python floats: no host read
    device = batches[0].actions.device
    total: torch.Tensor | None = None
    names: list[str] = []

    def group_loss(b: Batch, steps: torch.Tensor) -> tuple[torch.Tensor, LossStats]:
        if recurrent:
            steps = chunk_steps(steps, cfg.chunk_length, b.num_envs)
        return loss_fn(actor, critic, b, steps, cfg, autocast)

    for _epoch in range(cfg.update_epochs):
        perms = [torch.randperm(u, generator=generator, device=device) for u in units]
        for k in range(cfg.num_minibatches):
            # captured (CUDA graph trees): the last minibatch's outputs are spent, its memory free to reuse
            torch.compiler.cudagraph_mark_step_begin()
            parts = [
                group_loss(b, perm[k * (u // cfg.num_minibatches) : (k + 1) * (u // cfg.num_minibatches)])
                for b, perm, u in zip(batches, perms, units)
            ]
            loss, stats = parts[0] if len(parts) == 1 else weighted(parts, weights)
            names = [name for name, value in vars(stats).items() if value is not None]
            values = [getattr(stats, name) for name in names]
            row = minibatch_step(actor, critic, optimizer, scaler, loss, values, cfg, sync_gradients, norms_fn)
            total = row.clone() if total is None else total + row  # a copy: a CUDA graph's next replay reuses `row`
    assert total is not None  # update_epochs and num_minibatches are >= 1 (agents.config.checks)
    sums = dict(zip([*names, "actor_grad_norm", "critic_grad_norm", *COUNTS], total.unbind()))
    count = cfg.update_epochs * cfg.num_minibatches
    good = (count - sums["skipped_updates"]).clamp_min(1.0)
    out = {k: v / good for k, v in sums.items() if k not in COUNTS}
    out.update({k: sums[k] for k in COUNTS})
    return out


def minibatch_step(
    actor: Actor,
    critic: Critic,
    optimizer: torch.optim.Adam,
    scaler: torch.amp.GradScaler,
    loss: torch.Tensor,
    stats: list[torch.Tensor],
    cfg: TrainConfig,
    sync_gradients: Callable[[Iterable[nn.Parameter]], None] | None = None,
    norms_fn: NormsFn = minibatch_norms,
) -> torch.Tensor:
    """The backward pass of a minibatch's `loss` and the optimizer's step (`step_gradients`, with
    the loss's `stats`). Returns the minibatch's row of `update`'s sums (`minibatch_norms`)."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    return step_gradients(optimizer, scaler, actor, critic, loss, cfg.max_grad_norm, sync_gradients, stats, norms_fn)[3]


COUNTS = ("skipped_updates", "nonfinite_losses")  # `update`'s statistics that are counts, not means


def weighted(parts: list[tuple[torch.Tensor, LossStats]], weights: list[float]) -> tuple[torch.Tensor, LossStats]:
    """The size groups' `(loss, stats)` summed with `weights` (their shares of the minibatch's rows)."""
    total = {
        name: sum(w * vars(st)[name] for (_, st), w in zip(parts, weights)) if value is not None else None
        for name, value in vars(parts[0][1]).items()
    }
    return sum(w * loss for (loss, _), w in zip(parts, weights)), LossStats(**total)
