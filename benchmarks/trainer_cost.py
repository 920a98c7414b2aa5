"""What the trainer's steps cost on a GPU, counted on any machine: kernels launched, bytes moved and
host syncs (`benchmarks.op_count.OpCounter`, by the rules of `benchmarks.step_cost`), per call of

    policy step        `Actor.act` (agents.algo.networks) with the trainer config's networks, fp32 and bf16;
    rollout step       one iteration of `agents.algo.learner.collect`'s loop: policy step, storage
                       writes, env.step, episode statistics (trainer config, bf16);
    PPO minibatch      `agents.algo.ppo.minibatch_loss` + backward + `optimizer_step`, at the trainer
                       config's minibatch;

the rollout step and the PPO minibatch as captured on CUDA (`captured_paths`: their launches under
CUDA graphs), and the bf16 policy step compiled whole by inductor (`fused_paths`, counted by
inductor itself). `benchmarks.step_cost` runs these beside the env's counts and writes them with its
results: ``python -m benchmarks.step_cost``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import TRAINER_CONFIG
from benchmarks.cost_common import count_calls, graph_breaks, staggered_env, whole_periods
from uavsim import EnvConfig, UAVSwarmEnv


# -- the trainer ----------------------------------------------------------------------------------
def learner_for(
    num_envs: int,
    num_steps: int,
    amp: str,
    episode_length: int,
    config: Path | Sequence[Path] = TRAINER_CONFIG,
    overrides: Sequence[str] = (),
):
    """The trainer's learner for `config` (its networks, optimizer, storage; by default
    benchmarks/trainer_config.yaml, what the committed results count; several files: laid over each
    other in order, as a recipe is), with `overrides` before the given shape, its env staggered as in
    `staggered_env`."""
    from agents.algo.learner import build_learner
    from agents.config import load_config

    cfg = load_config(
        config,
        [
            *overrides,
            f"env.num_envs={num_envs}",
            f"train.num_steps={num_steps}",
            f"train.amp={amp}",
            "run.device=cpu",
            "run.torch_threads=0",
        ],
    )
    learner = build_learner(cfg, torch.device("cpu"))
    learner.env = staggered_env(cfg.env_config(), num_envs, episode_length, obs_dtype=learner.env.obs_dtype)
    learner.obs = learner.env.observe()
    return learner


def minibatch_update(learner, batch, steps: torch.Tensor) -> None:
    """One minibatch of `agents.algo.ppo.update`: the learner's loss, `minibatch_step` (backward,
    the step's arithmetic, the optimizer), and the row added to the iteration's sums."""
    from agents.algo.ppo import minibatch_step

    tc = learner.cfg.train
    loss, stats = learner.loss_fn(learner.actor, learner.critic, batch, steps, tc, learner.autocast)
    values = [v for v in vars(stats).values() if v is not None]
    row = minibatch_step(
        learner.actor, learner.critic, learner.optimizer, learner.scaler, loss, values, tc, None, learner.norms_fn
    )
    torch.add(row, row)  # stands for `update`'s running sum: one add a minibatch


def trainer_paths(args) -> dict[str, dict[str, Any]]:
    from agents.algo.learner import collect, prepare_batch, rollout_once
    from agents.algo.rollout import agent_ids

    out: dict[str, dict[str, Any]] = {}
    for amp in ("off", "bf16"):
        name = f"policy step[{'fp32' if amp == 'off' else amp}]"
        learner = learner_for(args.num_envs, 2, amp, args.episode_length)
        agent = agent_ids(learner.env.num_envs, learner.env.num_uavs, learner.env.device)

        @torch.no_grad()  # as in collect
        def policy(_i, learner=learner, agent=agent):
            learner.actor.act(learner.obs, agent, learner.action_noise, learner.autocast)

        out[name] = count_calls(policy, args.steps, args.num_envs)
        small = learner_for(args.explain_envs, 2, amp, args.episode_length)
        small_agent = agent_ids(args.explain_envs, small.env.num_uavs, small.env.device)
        out[name]["graph_breaks"] = graph_breaks(
            torch.no_grad()(small.actor.act), small.obs, small_agent, small.action_noise, small.autocast
        )

    learner = learner_for(
        args.num_envs, whole_periods(args.steps, UAVSwarmEnv(EnvConfig())), "bf16", args.episode_length
    )
    steps = learner.storage.actions.shape[0]
    agent = agent_ids(learner.env.num_envs, learner.env.num_uavs, learner.env.device)
    row = torch.zeros((), dtype=torch.int64)
    out["rollout step[bf16]"] = count_calls(lambda i: rollout_once(learner, agent, row), steps, args.num_envs)
    small = learner_for(args.explain_envs, 2, "bf16", args.episode_length)
    small_agent = agent_ids(args.explain_envs, small.env.num_uavs, small.env.device)
    out["rollout step[bf16]"]["graph_breaks"] = graph_breaks(
        rollout_once, small, small_agent, torch.zeros((), dtype=torch.int64)
    )

    # The update at the trainer config's batch geometry (its num_envs and num_steps).
    learner = learner_for(args.update_envs, args.update_steps, "bf16", args.episode_length)
    collect(learner)
    batch, _ = prepare_batch(learner)
    steps = batch.state.shape[0]
    mb = steps // learner.cfg.train.num_minibatches
    perm = torch.randperm(steps, generator=torch.Generator().manual_seed(0))
    minibatches = [perm[i * mb : (i + 1) * mb] for i in range(args.update_calls + 1)]
    minibatch_update(learner, batch, minibatches[-1])  # not counted: the first step also creates Adam's state
    out["PPO minibatch[bf16]"] = count_calls(
        lambda i: minibatch_update(learner, batch, minibatches[i]), args.update_calls, mb
    )
    out["PPO minibatch[bf16]"]["graph_breaks"] = graph_breaks(minibatch_update, learner, batch, minibatches[0])
    return out


def captured_paths(args) -> dict[str, dict[str, Any]]:
    """The rollout step and the PPO minibatch as `train.compile_rollout` and `train.compile` capture
    them on CUDA, traced by `benchmarks.graph_audit.GraphAudit` (AOT autograd's kernels, which the
    counter counts as the eager paths') with the trainer's static addresses: their counts beside the
    eager paths', and `launches_per_call`, the host's launches with each graph replayed as one (and
    its inputs that are new at each call copied in first), with `graph_skips`, what CUDA graph trees
    would skip (none)."""
    from agents.algo.learner import collect, prepare_batch, rollout_once, stored_views
    from agents.algo.ppo import minibatch_loss, minibatch_norms
    from agents.algo.rollout import agent_ids, outputs_kept, rollout_step
    from agents.algo.static_inputs import mark_static_tensors
    from benchmarks.graph_audit import GraphAudit

    out: dict[str, dict[str, Any]] = {}
    torch._dynamo.reset()
    audit = GraphAudit()
    learner = learner_for(
        args.num_envs, whole_periods(args.steps, UAVSwarmEnv(EnvConfig())), "bf16", args.episode_length
    )
    learner.rollout_fn = outputs_kept(audit.counted(torch.compile(rollout_step, fullgraph=True, backend=audit)))
    steps = learner.storage.actions.shape[0]
    agent = agent_ids(learner.env.num_envs, learner.env.num_uavs, learner.env.device)
    row = learner.storage.row
    mark_static_tensors(learner.env, learner.storage, learner.stats, learner.action_noise)
    for _ in range(steps):  # compiles each side of the env's rebuild branch
        rollout_once(learner, agent, row)
    row.zero_()
    out["rollout step[bf16, captured]"] = counted_with_replays(
        audit, lambda i: rollout_once(learner, agent, row), steps, args.num_envs
    )

    torch._dynamo.reset()
    audit = GraphAudit()
    learner = learner_for(args.update_envs, args.update_steps, "bf16", args.episode_length)
    loss_fn, norms_fn = (
        torch.compile(f, dynamic=False, fullgraph=True, backend=audit) for f in (minibatch_loss, minibatch_norms)
    )
    learner.loss_fn, learner.norms_fn = audit.counted(loss_fn), audit.counted(norms_fn)
    collect(learner)
    batch, _ = prepare_batch(learner)
    mark_static_tensors(*stored_views(batch))
    steps = batch.state.shape[0]
    mb = steps // learner.cfg.train.num_minibatches
    perm = torch.randperm(steps, generator=torch.Generator().manual_seed(0))
    minibatches = [perm[i * mb : (i + 1) * mb] for i in range(args.update_calls + 1)]

    def captured_update(i: int) -> None:
        torch.compiler.cudagraph_mark_step_begin()  # as `update` begins each minibatch
        minibatch_update(learner, batch, minibatches[i])

    captured_update(-1)  # compiles; not counted
    out["PPO minibatch[bf16, captured]"] = counted_with_replays(audit, captured_update, args.update_calls, mb)
    torch._dynamo.reset()
    return out


def counted_with_replays(audit, call: Callable[[int], Any], calls: int, env_steps_per_call: int) -> dict[str, Any]:
    """`count_calls` of a captured `call`, with its launches under CUDA graphs (`audit.tally`)."""
    from benchmarks.graph_audit import Tally

    audit.tally = Tally()
    counts = count_calls(call, calls, env_steps_per_call)
    tally = audit.tally
    counts["launches_per_call"] = tally.launches(counts["kernels_per_call"] * calls) / calls
    counts["graph_replays_per_call"] = tally.replays / calls
    counts["input_copies_per_call"] = tally.copies / calls
    counts["graph_skips"] = audit.skip_reasons
    counts["graph_breaks"] = {"graphs": len(audit.graphs), "breaks": 0, "reasons": []}  # fullgraph: a break raises
    return counts


# -- the policy step, fused by inductor -----------------------------------------------------------
def fused_paths(args) -> dict[str, dict[str, Any]]:
    """The bf16 policy step captured whole and fused by inductor, counted by inductor
    (`benchmarks.fused_count`): the policy part of what `train.compile_rollout` runs on CUDA, at the
    same batch, with the actor in the form it compiles (`Form.fused`), and, beside it, in the
    trainer's eager form (`Form.epilogue`: the GEMM chain) compiled alike. Not the whole rollout step: inductor counts a
    write of one row into the rollout's storage (and a gather from the env's maps) as its whole
    buffer, which would bury the step's traffic."""
    from agents.algo.layers import Form
    from agents.algo.networks import with_form
    from agents.algo.rollout import agent_ids
    from benchmarks.fused_count import fused_count

    learner = learner_for(args.num_envs, 2, "bf16", args.episode_length)
    agent = agent_ids(args.num_envs, learner.env.num_uavs, learner.env.device)
    out = {}
    for name, form in (("policy step[bf16]", Form.fused), ("policy step[bf16], eager form compiled", Form.epilogue)):
        step = torch.no_grad()(with_form(learner.actor, form).act)
        out[name] = fused_count(
            step, learner.obs, agent, learner.action_noise, learner.autocast, env_steps_per_call=args.num_envs
        )
        out[name]["eager_path"] = "policy step[bf16]"
    return out


if __name__ == "__main__":  # `python -m benchmarks.trainer_cost --help` printed nothing
    raise SystemExit(f"{__spec__.name} is a library of counts: run python -m benchmarks.step_cost (see its --help)")
