"""The MAPPO learner: what a run carries from iteration to iteration (`Learner`), how it is built,
and one training iteration (collect -> GAE -> value normalization -> PPO epochs x minibatches).
Inside an iteration nothing is read back to the host; its metrics are read once, at its end
(`read_metrics`). The run around it (resume, logging, checkpoints, the CLI) is `agents.train_mappo`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from agents.algo.action_noise import ActionNoise
from agents.algo.compiled import compile_loss, compile_norms
from agents.algo.gae import compute_gae
from agents.algo.layers import Form
from agents.algo.lockstep import lockstep_applies, lockstep_collect
from agents.algo.networks import Actor, Critic, make_actor, make_critic
from agents.algo.optimizer_step import NormsFn, make_optimizer, minibatch_norms
from agents.algo.ppo import Batch, LossFn, clone_logprobs, minibatch_loss, update
from agents.algo.precision import amp_dtype, make_autocast
from agents.algo.replicas import Replicas
from agents.algo.rollout import (
    EpisodeStats,
    RolloutStep,
    Storage,
    agent_ids,
    compile_rollout_step,
    rollout_step,
)
from agents.algo.static_inputs import mark_static_tensors
from agents.algo.value_norm import ValueNorm
from agents.algo.values import bootstrap_values, values_of_steps
from agents.config import Amp, Config, TrainConfig
from uavsim.env import UAVSwarmEnv


@dataclass
class SizeGroup:
    """A mixed-size run's environments of one size beyond the first (`agents.config.env_section`): what
    the learner holds of its own group, with the same names."""

    env: UAVSwarmEnv
    storage: Storage
    action_noise: ActionNoise
    obs: dict[str, torch.Tensor]
    hidden: torch.Tensor | None
    stats: EpisodeStats  # the learner's, writing this group's share of the current coverage (`for_group`)


@dataclass
class Learner:
    """Everything a training run carries from one iteration to the next (and checkpoints)."""

    cfg: Config
    env: UAVSwarmEnv
    actor: Actor
    critic: Critic
    value_norm: ValueNorm
    optimizer: torch.optim.Adam
    scaler: torch.amp.GradScaler
    action_noise: ActionNoise  # action sampling: a counter hash of (seed, env, step, agent), on the device
    minibatch_gen: torch.Generator  # minibatch permutations, on the device
    storage: Storage
    stats: EpisodeStats
    obs: dict[str, torch.Tensor]
    hidden: torch.Tensor | None  # [B, N, H] float32, a recurrent actor's state before the next step
    autocast: Callable[[], contextlib.AbstractContextManager]
    loss_fn: LossFn  # `minibatch_loss`, compiled under `train.compile`
    rollout_fn: RolloutStep  # `rollout_step`, captured whole under `train.compile_rollout`
    policy: Actor  # the actor as the rollout computes it: `actor`, or its fused form sharing its weights
    replicas: Replicas = dataclasses.field(default_factory=Replicas)  # torchrun ranks (1: single process)
    clone: Actor | None = None  # the frozen imitated actor PPO stays near (train.clone_kl_coef > 0)
    iteration: int = 0
    env_steps: int = 0  # counted over all ranks
    bad_iterations: int = 0  # consecutive bad iterations (agents.run.control.iteration_problem)
    more_groups: list[SizeGroup] = dataclasses.field(default_factory=list)  # a mixed-size run's other sizes
    norms_fn: NormsFn = minibatch_norms  # a minibatch step's arithmetic, compiled under `train.compile`

    @property
    def groups(self) -> list[Learner | SizeGroup]:
        """Every size group: the learner itself (its `env`, `storage`, ...) and `more_groups`."""
        return [self, *self.more_groups]

    @property
    def agent_steps_per_iteration(self) -> int:
        """Agent-steps (samples) one iteration adds over all ranks."""
        per_rank = sum(g.storage.actions.numel() for g in self.groups)
        return per_rank * self.replicas.world_size

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps one iteration adds over all ranks."""
        return self.cfg.env_steps_per_iteration * self.replicas.world_size

    @property
    def num_iterations(self) -> int:
        """Iterations of the whole run, over all ranks."""
        return self.cfg.num_iterations(self.replicas.world_size)


def build_learner(cfg: Config, device: torch.device, replicas: Replicas | None = None) -> Learner:
    """Build everything a run carries: env, networks, optimizer, storage (and compiled forms where asked).

    Args:
        cfg: the config, its `auto` values resolved (`agents.run.machine_defaults.resolve`).
        device: where it all lives.
        replicas: this process's place among torchrun's ranks (None: a single process).

    Returns:
        The learner at iteration 0, its env reset.

    Raises:
        ValueError: `cfg` is not resolved.
    """
    if not cfg.resolved:
        raise ValueError(
            "build_learner needs a resolved config (train.amp, run.torch_threads, env.num_envs not "
            "'auto'): pass it through agents.run.machine_defaults.resolve(cfg, device) first"
        )
    replicas = replicas or Replicas(device=device)
    # Rank r plays environments [r * B, (r + 1) * B) of the seed: disjoint episode streams.
    # Observations in the AMP dtype: exactly the float32 ones cast (uavsim tests it), which the
    # networks' autocast and the storage would cast them to anyway, at a third less traffic per step.
    # A mixed-size run's groups play disjoint environment indices too (one after the other).
    group_envs, first = cfg.group_num_envs(), replicas.rank * cfg.env.num_envs
    envs = []
    for env_cfg, num_envs in zip(cfg.env_configs(), group_envs):
        envs.append(
            UAVSwarmEnv(
                env_cfg,
                num_envs=num_envs,
                device=device,
                seed=cfg.seed,
                first_env_index=first,
                check_action_range=False,
                obs_dtype=amp_dtype(cfg.train.amp),
            )
        )
        first += num_envs
    env = envs[0]
    stats = EpisodeStats(device, env.config.max_steps, [e.num_envs for e in envs])
    init_gen = torch.Generator().manual_seed(cfg.seed)
    # Form.epilogue: the rollout's and evaluation's no-grad calls fuse bias and ReLU into each GEMM
    actor = make_actor(env.config, cfg.model, init_gen, Form.epilogue).to(device)
    critic = make_critic(env.config, cfg.model, init_gen, Form.epilogue).to(device)
    rollout_fn, policy = rollout_step, actor
    if cfg.train.compile_rollout:
        rollout_fn, policy = compile_rollout_step(device, actor=actor, dtype=amp_dtype(cfg.train.amp))
    value_norm = ValueNorm(cfg.train.value_norm_beta, enabled=cfg.train.value_norm, device=device)
    return Learner(
        cfg=cfg,
        env=env,
        actor=actor,
        critic=critic,
        value_norm=value_norm,
        optimizer=make_optimizer(actor, critic, cfg.train),
        scaler=torch.amp.GradScaler(device.type, enabled=cfg.train.amp == Amp.fp16),
        action_noise=ActionNoise(cfg.seed, env.env_index, env.num_uavs),
        minibatch_gen=torch.Generator(device).manual_seed(cfg.seed + 2 + 1000 * replicas.rank),
        storage=allocate_storage(cfg, env),
        stats=stats,
        obs=env.reset(),
        hidden=actor.initial_hidden(env.num_envs, env.num_uavs, device) if actor.recurrent else None,
        autocast=make_autocast(cfg.train.amp, device),
        loss_fn=compile_loss(device) if cfg.train.compile else minibatch_loss,
        norms_fn=compile_norms(device) if cfg.train.compile else minibatch_norms,
        rollout_fn=rollout_fn,
        policy=policy,
        replicas=replicas,
        clone=make_actor(env.config, cfg.model, init_gen).to(device).requires_grad_(False)
        if cfg.train.clone_kl_coef > 0
        else None,  # its weights: the warm start's clone, or the checkpoint's
        more_groups=[size_group(cfg, other, actor, stats.for_group(i)) for i, other in enumerate(envs[1:], 1)],
    )


def size_group(cfg: Config, env: UAVSwarmEnv, actor: Actor, stats: EpisodeStats) -> SizeGroup:
    """A mixed-size run's group of `env`, reset, with its storage, noise, hidden state and `stats` handle."""
    hidden = actor.initial_hidden(env.num_envs, env.num_uavs, env.device) if actor.recurrent else None
    noise = ActionNoise(cfg.seed, env.env_index, env.num_uavs)
    return SizeGroup(env, allocate_storage(cfg, env), noise, env.reset(), hidden, stats)


def allocate_storage(cfg: Config, env) -> Storage:
    """The rollout storage of `cfg` for `env` (a `UAVSwarmEnv`, or its sizes on the meta device:
    `machine_defaults.estimate_memory` sizes a run with this very call)."""
    recurrent = cfg.model.recurrent
    return Storage.allocate(
        cfg.train.num_steps,
        env,
        amp_dtype(cfg.train.amp),
        cfg.model.gru_units if recurrent else 0,
        cfg.train.chunk_length if recurrent else 1,
    )


def learning_rates(tc: TrainConfig, iteration: int, iterations: int) -> dict[str, float]:
    """`{"actor": lr, "critic": lr}` for `iteration` of `iterations`: linearly annealed to 0 over
    the run (`train.anneal_lr`), the actor's also ramped up from 0 over the first
    `train.actor_warmup` of the iterations (a cloned actor waits for the critic: `agents.algo.imitation`)."""
    frac = 1.0 - iteration / iterations if tc.anneal_lr else 1.0
    ramp = min(1.0, iteration / (tc.actor_warmup * iterations)) if tc.actor_warmup > 0 else 1.0
    return {"actor": frac * ramp * tc.actor_lr, "critic": frac * tc.critic_lr}


# -- one iteration ---------------------------------------------------------------------------------
@torch.no_grad()
def rollout_once(
    learner: Learner, agent: torch.Tensor, t: torch.Tensor, group: Learner | SizeGroup | None = None
) -> None:
    """One step of `collect`: `learner.rollout_fn` into storage row `t` (0-dim int64 on the device,
    advanced in place) for agents `agent [B * N]`, advancing the observation and hidden state of
    `group` (None: the learner's own)."""
    g = learner if group is None else group
    g.obs, g.hidden = learner.rollout_fn(
        g.env, learner.policy, g.storage, g.stats, g.action_noise, learner.autocast, agent, g.obs, g.hidden, t
    )


@torch.no_grad()
def collect(learner: Learner) -> None:
    """Fill the learner's storage with `T` steps from its observation (and a recurrent actor's
    hidden state), advancing both: `learner.rollout_fn` (`rollout_step`, or its compiled form) T times;
    a mixed-size run's groups in lockstep where it can (`agents.algo.lockstep`: the same numbers).

    values[t] = V(obs_t); next_values[t] = V(final obs after step t), the bootstrap target that GAE
    uses where the step was truncated or the rollout ends. The critic evaluates the stored
    observations after the steps, in a few large calls (the same numbers as per step), and of the
    final observations only those of the last and the truncated steps (`bootstrap_values`).
    """
    groups, tc = learner.groups, learner.cfg.train
    if lockstep_applies(len(groups), learner.actor, tc.compile_rollout):  # one actor call a step over every group
        lockstep_collect(groups, learner.policy, learner.autocast)
    else:
        for group in groups:  # each group's T steps, one group after the other
            env = group.env
            agent = agent_ids(env.num_envs, env.num_uavs, env.device)
            t = group.storage.row.zero_()
            if tc.compile_rollout:  # what the captured step writes keeps its address: CUDA graphs replay it
                mark_static_tensors(env, group.storage, group.stats, group.action_noise)
            for _ in range(group.storage.actions.shape[0]):
                rollout_once(learner, agent, t, group)
    critic, norm, autocast = learner.critic, learner.value_norm, learner.autocast
    for g in groups:
        values_of_steps(critic, norm, g.storage.local, g.storage.state, autocast, g.storage.values)
        bootstrap_values(critic, norm, g.storage, g.env.config.max_steps, autocast)


def prepare_batch(learner: Learner) -> tuple[Batch | list[Batch], torch.Tensor]:
    """GAE on the filled storage, the value normalizer's update, and the flattened batch (views of
    the storage, no copies). Returns the batch and the (denormalized) returns `[T, B, N]`; a
    mixed-size run's batches (one per group, advantages normalized over all, or per group under
    `train.norm_adv_per_group`) and returns flattened
    `[sum of T * B * N]`."""
    tc = learner.cfg.train
    gae = [
        compute_gae(s.rewards, s.values, s.next_values, s.terminated, s.truncated, tc.gamma, tc.gae_lambda)
        for s in (g.storage for g in learner.groups)
    ]
    mixed = len(gae) > 1
    returns = torch.cat([r.reshape(-1) for _, r in gae]) if mixed else gae[0][1]
    # the critic's outputs at the rollout, on the scale it computed them in: the statistics before this update
    # (normalized by the updated ones they differ from the critic's own values before any gradient step, by
    # the statistics' shift, and the clipped value loss dropped the rows where that shift passed vf_clip_coef)
    old_values = [learner.value_norm.normalize(g.storage.values) for g in learner.groups]
    learner.value_norm.update(returns, reduce=learner.replicas.mean if learner.replicas.active else None)
    if tc.norm_adv and tc.norm_adv_per_group:
        gae = [(normalized(a), r) for a, r in gae]
    b_advantages = torch.cat([a.reshape(-1) for a, _ in gae]) if mixed else gae[0][0].reshape(-1)
    if tc.norm_adv and not tc.norm_adv_per_group:
        b_advantages = normalized(b_advantages)
    sizes = [a.numel() for a, _ in gae]
    batches = [
        group_batch(learner, g, adv, r, v)
        for g, adv, (_, r), v in zip(learner.groups, b_advantages.split(sizes), gae, old_values)
    ]
    if learner.clone is not None:  # every group's rows stay near the clone
        for b in batches:
            b.clone_logprobs = clone_logprobs(learner.clone, b, learner.autocast, tc.num_minibatches)
    return (batches if mixed else batches[0]), returns


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """`advantages` shifted and scaled to mean 0 and standard deviation 1."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def group_batch(
    learner: Learner, group: Learner | SizeGroup, advantages: torch.Tensor, returns: torch.Tensor, values: torch.Tensor
) -> Batch:
    """The flattened batch of one size group's storage (`advantages [T*B*N]`, `returns [T, B, N]`, the
    critic's rollout `values [T, B, N]` normalized as it computed them)."""
    s, recurrent = group.storage, learner.actor.recurrent
    if recurrent:  # step t began an episode where step t - 1 ended one (t = 0: the stored state says so)
        starts = torch.zeros_like(s.terminated)
        starts[1:] = s.terminated[:-1] | s.truncated[:-1]
    return Batch(
        local=s.local.reshape(-1, s.local.shape[-1]),
        state=s.state.reshape(-1, s.state.shape[-1]),
        heading=s.heading.reshape(-1, s.heading.shape[-1]),
        actions=s.actions.reshape(-1),
        logprobs=s.logprobs.reshape(-1),
        values=values.reshape(-1),
        returns=learner.value_norm.normalize(returns).reshape(-1),
        advantages=advantages,
        num_agents=group.env.num_uavs,
        num_envs=group.env.num_envs,
        hidden=s.hidden.view(-1, *s.hidden.shape[2:]) if recurrent else None,
        starts=starts.view(-1) if recurrent else None,
    )


def stored_views(batch: Batch) -> list[torch.Tensor]:
    """The fields of `batch` that are views of the rollout's storage (`group_batch`): the same
    addresses every iteration, unlike the advantages, returns and values computed anew."""
    views = [batch.local, batch.state, batch.heading, batch.actions, batch.logprobs]
    return views + ([batch.hidden] if batch.hidden is not None else [])


def train_iteration(learner: Learner, mark: Callable[[str], None] = lambda phase: None) -> dict[str, torch.Tensor]:
    """Collect `num_steps` steps, then `update_epochs` x `num_minibatches` PPO updates; no host read.

    Args:
        learner: advanced in place (iteration, env steps, storage, networks).
        mark: told where each phase starts ("env", "learn") and where the iteration ends ("end").

    Returns:
        The iteration's metrics, 0-dim device tensors (`read_metrics` reads them).
    """
    tc = learner.cfg.train
    rates = learning_rates(tc, learner.iteration, learner.num_iterations)
    for group in learner.optimizer.param_groups:
        group["lr"] = rates[group["name"]]

    mark("env")
    learner.stats.reset()
    collect(learner)
    mark("learn")

    batch, returns = prepare_batch(learner)
    if tc.compile:  # the captured loss reads the stored rollout where it lies (no copy before each replay)
        for b in batch if isinstance(batch, list) else [batch]:
            mark_static_tensors(*stored_views(b))
    metrics = update(
        learner.actor,
        learner.critic,
        learner.optimizer,
        learner.scaler,
        batch,
        tc,
        learner.minibatch_gen,
        learner.autocast,
        learner.replicas.average_gradients if learner.replicas.active else None,
        learner.loss_fn,
        learner.norms_fn,
    )
    mark("end")

    values = torch.cat([g.storage.values.reshape(-1) for g in learner.groups]).view_as(returns)
    var_y = returns.var()
    metrics["explained_variance"] = torch.where(
        var_y > 0, 1 - (returns - values).var() / var_y, torch.full_like(var_y, float("nan"))
    )
    metrics["value_norm_mean"], value_norm_var = learner.value_norm.mean_var()
    metrics["value_norm_std"] = value_norm_var.sqrt()
    metrics["return_mean"] = returns.mean()
    learner.iteration += 1
    learner.env_steps += learner.steps_per_iteration
    return metrics


def read_metrics(metrics: dict[str, torch.Tensor], replicas: Replicas | None = None) -> dict[str, float]:
    """The iteration's one host read: all device scalars in a single transfer (means over ranks)."""
    names = list(metrics)
    values = torch.stack([metrics[k].detach().float().reshape(()) for k in names])
    if replicas is not None and replicas.active:
        values = replicas.mean(values)
    return dict(zip(names, values.tolist()))


def read_episode_stats(learner: Learner) -> dict[str, float]:
    """The iteration's episode statistics, summed over ranks (`last_coverage` averaged)."""
    if learner.replicas.active:
        summed = learner.replicas.sum(learner.stats.sums)
        summed[len(EpisodeStats.KEYS) - 1 :] /= learner.replicas.world_size  # each group's current coverage
        learner.stats.sums.copy_(summed)
    return learner.stats.read()
