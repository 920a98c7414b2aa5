"""The counting `benchmarks.step_cost` and `benchmarks.trainer_cost` share: the kernels, bytes and
host syncs of a call (`benchmarks.op_count.OpCounter`), its graph breaks, and the env a count starts
from (episode phases staggered, whole periods of the env's rebuilds of prepared starts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.op_count import OpCounter
from uavsim import EnvConfig, UAVSwarmEnv


# -- counting ----------------------------------------------------------------------------------------
def count_calls(call: Callable[[int], Any], calls: int, env_steps_per_call: int, top: int = 8) -> dict[str, Any]:
    """Count ``call(i)`` for ``i < calls``: kernels and bytes per call (mean, min, max), bytes per
    env-step, host syncs per call and the top ops by bytes (calls per call, bytes per env-step)."""
    kernels, nbytes = [], []
    total = OpCounter()
    for i in range(calls):
        with OpCounter() as one:
            call(i)
        kernels.append(one.kernels)
        nbytes.append(one.bytes)
        total.kernels += one.kernels
        total.bytes += one.bytes
        total.host_syncs += one.host_syncs
        for op, (n, b) in one.by_op.items():
            total.by_op[op][0] += n
            total.by_op[op][1] += b
    top_ops = [
        {
            "op": r["op"],
            "calls_per_call": r["calls"] / calls,
            "bytes_per_env_step": r["bytes"] / (calls * env_steps_per_call),
        }
        for r in total.top_ops(top)
    ]
    return {
        "env_steps_per_call": env_steps_per_call,
        "counted_calls": calls,
        "kernels_per_call": total.kernels / calls,
        "kernels_min": min(kernels),
        "kernels_max": max(kernels),
        "bytes_per_call": total.bytes / calls,
        "bytes_per_env_step": total.bytes / (calls * env_steps_per_call),
        "bytes_per_env_step_max": max(nbytes) / env_steps_per_call,
        "host_syncs_per_call": total.host_syncs / calls,
        "top_ops": top_ops,
    }


def graph_breaks(fn: Callable, *args) -> dict[str, Any]:
    """Graphs and graph breaks `torch._dynamo.explain` finds in one call of ``fn(*args)`` (which runs)."""
    import torch._dynamo

    torch._dynamo.reset()
    out = torch._dynamo.explain(fn)(*args)
    reasons = [str(r.reason).strip().splitlines()[0][:160] for r in out.break_reasons]
    torch._dynamo.reset()
    return {"graphs": out.graph_count, "breaks": out.graph_break_count, "reasons": sorted(set(reasons))}


# -- the environment ------------------------------------------------------------------------------
def staggered_env(cfg: EnvConfig, num_envs: int, episode_length: int, **kwargs) -> UAVSwarmEnv:
    """An env whose environment ``b`` is at step ``max_steps - L + b % L`` of its first episode,
    ``L = min(episode_length, max_steps)``: from here about ``B / L`` environments end per step."""
    return stagger(UAVSwarmEnv(cfg, num_envs=num_envs, seed=0, check_action_range=False, **kwargs), episode_length)


def stagger(env: Any, episode_length: int) -> Any:
    """`staggered_env`'s phases given to a fresh ``env`` (reset here): any `UAVSwarmEnv`, also another
    commit's (`benchmarks.env_ab`)."""
    env.reset()
    max_steps = env.config.max_steps
    length = min(episode_length, max_steps)
    saved = env.state_dict()
    t = saved["state"]["t"]
    saved["state"]["t"] = (max_steps - length + torch.arange(env.num_envs, device=t.device) % length).to(t.dtype)
    env.load_state_dict(saved)
    return env


def whole_periods(steps: int, env: UAVSwarmEnv) -> int:
    """``steps`` rounded up to whole periods of the env's rebuilds of prepared starts."""
    period = max(1, env.prepare_period)
    return -(-steps // period) * period
