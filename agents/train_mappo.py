"""MAPPO on `uavsim.UAVSwarmEnv`, rollouts and updates on the environment's device.

    python -m agents.train_mappo                                    # configs/default.yaml
    python -m agents.train_mappo --config configs/smoke.yaml train.amp=bf16 seed=3
    python -m agents.train_mappo --resume runs/mappo-0-20250101-120000
    python -m agents.train_mappo --print-config train.amp=off      # every key and its value, no training

Reads top to bottom: seeding and setup, the learner state, one training iteration (collect ->
GAE -> value normalization -> PPO epochs x minibatches), then the loop with logging, evaluation
images and checkpoints. Inside an iteration nothing is read back to the host; the iteration's
metrics are read once, at its end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from tqdm import tqdm

from agents import checkpoint as ckpt
from agents import machine_defaults
from agents.action_noise import ActionNoise
from agents.config import Amp, Config, load_config, to_dict, to_yaml
from agents.distributed import Replicas, setup as setup_replicas
from agents.gae import compute_gae
from agents.learner_state import learner_state, load_learner_state
from agents.logger import Logger, PhaseTimer, device_memory_mb, flatten, host_rss_mb
from agents.networks import Actor, Critic, make_actor
from agents.ppo import Batch, LossFn, compile_loss, make_optimizer, minibatch_loss, update
from agents.resume import check_run_dir, resume_config, resume_run_dir
from agents.run_control import (TrainingInterrupted, TrainingStopped, crossed, iteration_problem, launcher_command,
                                 stopped_message)
from agents.rollout import EpisodeStats, RolloutStep, Storage, collect, compile_rollout_step, rollout_step
from agents.setup import amp_dtype, make_autocast, pick_device, setup_process  # noqa: F401 -- re-exported
from agents.value_norm import ValueNorm
from uavsim import hardware
from uavsim.env import UAVSwarmEnv

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"


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
    replicas: Replicas = dataclasses.field(default_factory=Replicas)  # torchrun ranks (1: single process)
    iteration: int = 0
    env_steps: int = 0  # counted over all ranks
    bad_iterations: int = 0  # consecutive bad iterations (run_control.iteration_problem)


def build_learner(cfg: Config, device: torch.device, replicas: Replicas | None = None) -> Learner:
    """The learner of a config whose `auto` values are resolved (`agents.machine_defaults.resolve`)."""
    if not cfg.resolved:
        raise ValueError("build_learner needs a resolved config (train.amp, run.torch_threads, env.num_envs not "
                         "'auto'): pass it through agents.machine_defaults.resolve(cfg, device) first")
    replicas = replicas or Replicas(device=device)
    # Rank r plays environments [r * B, (r + 1) * B) of the seed: disjoint episode streams.
    # Observations in the AMP dtype: exactly the float32 ones cast (uavsim tests it), which the
    # networks' autocast and the storage would cast them to anyway, at a third less traffic per step.
    env = UAVSwarmEnv(cfg.env_config(), num_envs=cfg.env.num_envs, device=device, seed=cfg.seed,
                      first_env_index=replicas.rank * cfg.env.num_envs, check_action_range=False,
                      obs_dtype=amp_dtype(cfg.train.amp))
    init_gen = torch.Generator().manual_seed(cfg.seed)
    actor = make_actor(env.config, cfg.model, init_gen).to(device)
    critic = Critic(env.state_dim, env.local_obs_dim, env.num_uavs, cfg.model, init_gen).to(device)
    value_norm = ValueNorm(cfg.train.value_norm_beta, enabled=cfg.train.value_norm, device=device)
    return Learner(
        cfg=cfg, env=env, actor=actor, critic=critic, value_norm=value_norm,
        optimizer=make_optimizer(actor, critic, cfg.train),
        scaler=torch.amp.GradScaler(device.type, enabled=cfg.train.amp == Amp.fp16),
        action_noise=ActionNoise(cfg.seed, env.env_index, env.num_uavs),
        minibatch_gen=torch.Generator(device).manual_seed(cfg.seed + 2 + 1000 * replicas.rank),
        storage=allocate_storage(cfg, env),
        stats=EpisodeStats(device, env.config.max_steps),
        obs=env.reset(),
        hidden=actor.initial_hidden(env.num_envs, env.num_uavs, device) if actor.recurrent else None,
        autocast=make_autocast(cfg.train.amp, device),
        loss_fn=compile_loss(device) if cfg.train.compile else minibatch_loss,
        rollout_fn=compile_rollout_step(device) if cfg.train.compile_rollout else rollout_step,
        replicas=replicas,
    )


def allocate_storage(cfg: Config, env) -> Storage:
    """The rollout storage of `cfg` for `env` (a `UAVSwarmEnv`, or its sizes on the meta device:
    `machine_defaults.estimate_memory` sizes a run with this very call)."""
    recurrent = cfg.model.recurrent
    return Storage.allocate(cfg.train.num_steps, env, amp_dtype(cfg.train.amp),
                            cfg.model.gru_units if recurrent else 0, cfg.train.chunk_length if recurrent else 1)


def steps_per_iteration(learner: Learner) -> int:
    """Environment steps one iteration adds over all ranks."""
    return learner.cfg.env_steps_per_iteration * learner.replicas.world_size


def num_iterations(learner: Learner) -> int:
    return max(1, learner.cfg.train.total_env_steps // steps_per_iteration(learner))


# -- one iteration ---------------------------------------------------------------------------------
def prepare_batch(learner: Learner) -> tuple[Batch, torch.Tensor]:
    """GAE on the filled storage, the value normalizer's update, and the flattened batch (views of
    the storage, no copies). Returns the batch and the (denormalized) returns `[T, B, N]`."""
    s, tc = learner.storage, learner.cfg.train
    advantages, returns = compute_gae(s.rewards, s.values, s.next_values, s.terminated, s.truncated,
                                      tc.gamma, tc.gae_lambda)
    learner.value_norm.update(returns, reduce=learner.replicas.mean if learner.replicas.active else None)
    b_advantages = advantages.reshape(-1)
    if tc.norm_adv:
        b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)
    recurrent = learner.actor.recurrent
    if recurrent:  # step t began an episode where step t - 1 ended one (t = 0: the stored state says so)
        starts = torch.zeros_like(s.terminated)
        starts[1:] = s.terminated[:-1] | s.truncated[:-1]
    batch = Batch(
        local=s.local.reshape(-1, s.local.shape[-1]), state=s.state.reshape(-1, s.state.shape[-1]),
        heading=s.heading.reshape(-1, s.heading.shape[-1]),
        actions=s.actions.reshape(-1), logprobs=s.logprobs.reshape(-1),
        values=learner.value_norm.normalize(s.values).reshape(-1),
        returns=learner.value_norm.normalize(returns).reshape(-1),
        advantages=b_advantages, num_agents=learner.env.num_uavs, num_envs=learner.env.num_envs,
        hidden=s.hidden.view(-1, *s.hidden.shape[2:]) if recurrent else None,
        starts=starts.view(-1) if recurrent else None,
    )
    return batch, returns


def train_iteration(learner: Learner, timer: PhaseTimer | None = None) -> dict[str, torch.Tensor]:
    """Collect `num_steps` steps, then `update_epochs` x `num_minibatches` PPO updates.

    Returns 0-dim device tensors; nothing here reads a tensor on the host.
    """
    tc = learner.cfg.train
    if tc.anneal_lr:
        frac = 1.0 - learner.iteration / num_iterations(learner)
        for group in learner.optimizer.param_groups:
            group["lr"] = frac * (tc.actor_lr if group["name"] == "actor" else tc.critic_lr)

    timer and timer.mark("env")
    learner.stats.reset()
    learner.obs, learner.hidden = collect(learner.env, learner.actor, learner.critic, learner.value_norm,
                                          learner.obs, learner.storage, learner.stats, learner.action_noise,
                                          learner.autocast, learner.hidden, step=learner.rollout_fn)
    timer and timer.mark("learn")

    batch, returns = prepare_batch(learner)
    metrics = update(learner.actor, learner.critic, learner.optimizer, learner.scaler, batch, tc,
                     learner.minibatch_gen, learner.autocast,
                     learner.replicas.average_gradients if learner.replicas.active else None, learner.loss_fn)
    timer and timer.mark("end")

    var_y = returns.var()
    metrics["explained_variance"] = torch.where(
        var_y > 0, 1 - (returns - learner.storage.values).var() / var_y, torch.full_like(var_y, float("nan")))
    metrics["value_norm_mean"], value_norm_var = learner.value_norm.mean_var()
    metrics["value_norm_std"] = value_norm_var.sqrt()
    metrics["return_mean"] = returns.mean()
    learner.iteration += 1
    learner.env_steps += steps_per_iteration(learner)
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
        summed[EpisodeStats.KEYS.index("last_coverage")] /= learner.replicas.world_size
        learner.stats.sums.copy_(summed)
    return learner.stats.read()


# -- the loop ------------------------------------------------------------------------------------
def _tb_scalars(learner: Learner, m: dict[str, float], ep: dict[str, float], t: dict[str, float]) -> dict:
    it_time = t["env"] + t["learn"]
    steps = steps_per_iteration(learner)
    agent_steps = steps * learner.env.num_uavs
    out = {
        "charts/episodic_return": ep["return"], "charts/episodic_length": ep["length"],
        "charts/coverage": ep["coverage"], "charts/steps_to_target": ep["steps_to_target"],
        "charts/target_reached": ep["reached_frac"], "charts/collisions": ep["collisions"],
        "charts/near_misses": ep["near_misses"], "charts/episodes": ep["episodes"],
        "charts/SPS": steps / it_time, "charts/agent_SPS": agent_steps / it_time,
        "charts/learning_rate": learner.optimizer.param_groups[0]["lr"],
        "charts/critic_learning_rate": learner.optimizer.param_groups[1]["lr"],
        "perf/env_sps": steps / max(t["env"], 1e-9), "perf/env_time": t["env"], "perf/learn_time": t["learn"],
        "perf/host_rss_mb": host_rss_mb(), "perf/device_mem_mb": device_memory_mb(learner.env.device),
        "value_norm/mean": m["value_norm_mean"], "value_norm/std": m["value_norm_std"],
    }
    for k in ("value_loss", "policy_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac",
              "explained_variance", "actor_grad_norm", "critic_grad_norm", "skipped_updates", "nonfinite_losses"):
        out[f"losses/{k}"] = m[k]
    if learner.scaler.is_enabled():
        out["amp/loss_scale"] = learner.scaler.get_scale()
    return out


def default_run_dir(cfg: Config) -> Path:
    return Path("runs") / f"mappo-{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(cfg: Config, resume: str | Path | None = None) -> Learner:
    """Train to `cfg.train.total_env_steps`, from scratch or from a checkpoint (`resume`)."""

    replicas = setup_replicas(cfg.run.device)  # torchrun: join the group; else a single process
    replicas.device = device = replicas.device if replicas.active else pick_device(cfg.run.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # streams, events and new tensors default to this GPU, not cuda:0
    try:
        cfg, reasons = resolve_for_machine(cfg, device, replicas)
        setup_process(cfg)
        if replicas.is_main:
            print(hardware.banner(device, **reasons, ranks=replicas.world_size), file=sys.stderr)
        return _train(cfg, resume, replicas, device)
    finally:
        replicas.close()


def resolve_for_machine(cfg: Config, device: torch.device, replicas: Replicas) -> tuple[Config, dict[str, str]]:
    """`machine_defaults.resolve`; under torchrun rank 0's choices hold for every rank (a timing
    probe could choose differently on two ranks, and the replicas must compute alike)."""
    problem = None
    try:
        resolved, reasons = machine_defaults.resolve(cfg, device)
        machine_defaults.check_memory(resolved, device)
    except ValueError as err:
        resolved, reasons, problem = cfg, {}, err
    first = next((p for p in replicas.gather_objects(problem) if p is not None), None)
    if first is not None:
        raise first
    if replicas.active:
        amp, num_envs = replicas.broadcast_object((resolved.train.amp, resolved.env.num_envs))
        resolved = dataclasses.replace(resolved, train=dataclasses.replace(resolved.train, amp=amp),
                                       env=dataclasses.replace(resolved.env, num_envs=num_envs))
    return resolved, reasons


def _train(cfg: Config, resume: str | Path | None, replicas: Replicas, device: torch.device) -> Learner:
    # Rank 0 reads the file system and tells the others (ranks on other hosts may not see it).
    payload, source, run_dir, problem = None, None, None, None
    if replicas.is_main:
        try:
            if resume is not None:
                source, payload = ckpt.load_latest(resume)  # to the CPU; load_state_dict copies to the device
                run_dir = resume_run_dir(source, payload["config"]["run"]["dir"], cfg)
            else:
                run_dir = Path(cfg.run.dir) if cfg.run.dir else default_run_dir(cfg)
                check_run_dir(run_dir)
        except (ValueError, ckpt.CheckpointError) as err:
            problem = err
    payload, source, run_dir, problem = replicas.broadcast_object((payload, source, run_dir, problem))
    if problem is not None:
        raise problem
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=str(run_dir)))
    learner = build_learner(cfg, device, replicas)
    if payload is not None:
        load_learner_state(learner, payload, str(source))
        if learner.iteration >= num_iterations(learner):
            raise ValueError(f"nothing to do: checkpoint {source} already holds {learner.env_steps} env steps, "
                             f"train.total_env_steps={cfg.train.total_env_steps}; raise it to continue")
    if replicas.is_main:  # after the checkpoint loaded: a failed resume leaves the run as it was
        run_dir.mkdir(parents=True, exist_ok=True)
        if not ckpt.list_checkpoints(run_dir):  # else config.yaml is the newest checkpoint's, rewritten with each
            (run_dir / "config.yaml").write_text(to_yaml(cfg))
        print(f"run directory: {run_dir}", file=sys.stderr)
    # TensorBoard: a fresh run hides whatever a run killed before its first checkpoint logged here; a
    # resumed run hides what a killed run logged after its checkpoint, but not *at* its step (the
    # resumed run logs next at a later step, that would never be written again), so it logs its own
    # config one step later too, where an earlier killed resume's copy is hidden
    start = learner.env_steps + 1 if payload is not None else 0
    logger = Logger(run_dir, purge_step=start, enabled=replicas.is_main)
    logger.hyperparameters(flatten(to_dict(cfg)), start)
    timer = PhaseTimer(device)
    iterations = num_iterations(learner)
    total = iterations * steps_per_iteration(learner)
    bar = tqdm(total=total, initial=learner.env_steps, unit="step", unit_scale=True, dynamic_ncols=True,
               disable=not (cfg.run.progress and replicas.is_main), desc="mappo")
    try:
        _loop(learner, logger, timer, bar, run_dir, source, iterations)
    except KeyboardInterrupt:
        newest = ckpt.list_checkpoints(run_dir)
        raise TrainingInterrupted(learner.env_steps, run_dir, newest[-1] if newest else source, source,
                                  launcher_command(replicas.world_size), replicas.is_main) from None
    finally:
        bar.close()
        logger.close()
    return learner


def _loop(learner: Learner, logger: Logger, timer: PhaseTimer, bar: tqdm, run_dir: Path, last_good: Path | None,
          iterations: int) -> None:
    """Iterations until `iterations`: log, evaluate and checkpoint as configured."""
    from agents.evaluate import evaluate_for_tensorboard  # evaluation images during training

    cfg, replicas = learner.cfg, learner.replicas
    shown: dict[str, str] = {}  # episode-end coverage of the latest iteration that ended episodes
    while learner.iteration < iterations:
        before = learner.env_steps
        metrics = train_iteration(learner, timer)
        m, ep, t = read_metrics(metrics, replicas), read_episode_stats(learner), timer.seconds()
        logger.scalars(_tb_scalars(learner, m, ep, t), learner.env_steps)
        bar.update(learner.env_steps - before)
        if ep["episodes"] > 0:
            shown = {"coverage": f"{ep['coverage']:.3f}", "steps_to_target": f"{ep['steps_to_target']:.0f}"}
        bar.set_postfix(**shown, now=f"{ep['last_coverage']:.3f}",
                        sps=f"{steps_per_iteration(learner) / (t['env'] + t['learn']):.0f}")
        problem = iteration_problem(m, cfg.train)
        if problem is not None:
            learner.bad_iterations += 1
            msg = f"iteration {learner.iteration}: {problem}"
            logger.text("warnings", msg, learner.env_steps)
            if replicas.is_main:
                tqdm.write(msg, file=sys.stderr)
            if learner.bad_iterations >= cfg.train.max_bad_iterations:
                raise TrainingStopped(stopped_message(learner.bad_iterations, last_good), replicas.is_main)
            if learner.iteration < iterations:
                continue  # never checkpoint an iteration that went wrong, except the last below:
            # skipped updates left the parameters as they were, and a finished run has a final checkpoint
        else:
            learner.bad_iterations = 0
        if replicas.is_main and crossed(cfg.run.eval_interval, before, learner.env_steps):
            for tag, value in evaluate_for_tensorboard(learner, logger).items():
                logger.scalars({tag: value}, learner.env_steps)
        last = learner.iteration == iterations
        if crossed(cfg.run.checkpoint_interval, before, learner.env_steps) or last:
            state = learner_state(learner)  # a collective: every rank takes part
            if replicas.is_main:
                # config.yaml: the config --resume will continue, written with the checkpoint
                last_good = ckpt.save_checkpoint(run_dir, state, cfg.run.keep_checkpoints,
                                                 beside={"config.yaml": to_yaml(cfg)})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agents.train_mappo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help="YAML preset file, e.g. configs/smoke.yaml "
                   "(default: configs/default.yaml)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR_OR_CKPT",
                   help="continue a run from its newest checkpoint (or the given checkpoint file)")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config (every key, with its value) as YAML and exit without training")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.amp=bf16")
    return p.parse_intermixed_args(argv)  # --config may come before, between or after the overrides


def resolve_config(args: argparse.Namespace) -> Config:
    if args.resume is None:
        return load_config(args.config or DEFAULT_CONFIG, args.overrides)
    if args.config is not None:
        raise ValueError("--resume continues with the run's saved config; pass key=value overrides instead of --config")
    return resume_config(args.resume, args.overrides)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = resolve_config(args)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.print_config:  # the values this machine would run with: `auto` keys resolved
        try:
            cfg, _ = machine_defaults.resolve(cfg, pick_device(cfg.run.device))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(to_yaml(cfg), end="")
        return 0
    try:
        learner = train(cfg, resume=args.resume)
    except KeyboardInterrupt as err:  # Ctrl-C: say where to continue from, exit like an interrupted shell command
        if getattr(err, "is_main", True):
            print(f"\n{str(err) or 'interrupted'}", file=sys.stderr)
        return 130
    except (TrainingStopped, ckpt.CheckpointError) as err:
        if getattr(err, "is_main", True):
            print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # settings that only fail once used (e.g. run.device=cuda without a GPU)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the run directory became unwritable (disk full, removed, permissions)
        print(f"error: {err}", file=sys.stderr)
        return 1
    if learner.replicas.is_main:
        print(f"done: {learner.env_steps} env steps, run directory {learner.cfg.run.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
