"""The `auto` config values, chosen for the machine a run starts on, and the memory check.

A default tuned on one machine can be many times slower on another: bf16 autocast is fast on a CPU
with AMX or AVX512-BF16 and emulated in software on an AVX2 one (docs/performance.md, "Design
choices, measured"). So:

    train.amp=auto          CUDA: bf16 at compute capability >= 8.0 (Ampere and later), fp16 with
                            the GradScaler at 7.x (tensor cores, no bf16), fp32 below. CPU: fp32
                            without AVX-512 (no bf16 instructions); else a short one-thread matmul
                            probe of fp32 against bf16 takes bf16 only where it is faster (flags
                            alone mislead: torch calls AVX-512 without BF16 "bf16 supported").
    run.torch_threads=auto  the cores this process may use (CPU affinity, cgroup quota), shared
                            between the ranks torchrun starts on this machine.
    env.num_envs=auto       CPU: 64 (the default's measured best). CUDA: the largest power of two up to
                            8192 (thousands per step keep a large GPU busy) that leaves the run at
                            least 100 iterations of its budget (PPO learns from updates, not
                            samples alone) and fits in half of the GPU's free memory. Not yet
                            measured on a GPU.

An explicit value always wins. `resolve` returns the config with every `auto` replaced and the
reason for each choice; the trainer saves the resolved config (config.yaml, checkpoints,
TensorBoard), so a run is reproducible on another machine. `check_memory` refuses, before
anything is allocated, a run whose rollout storage and update would not fit the device.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from agents.algo.learner import allocate_storage
from agents.config import AUTO, Amp, Config, Recipe, Teacher, check_config
from agents.config.recipe import describe_recipe
from uavsim.machine import hardware
from uavsim.machine.host_memory import host_memory

CPU_NUM_ENVS = 64
GPU_MAX_NUM_ENVS = 8192
MIN_ITERATIONS = 100  # env.num_envs=auto on a GPU keeps at least this many iterations in the budget
GPU_MEMORY_SHARE = 0.5  # env.num_envs=auto keeps the run within this share of the GPU's free memory
BF16_FASTER = 0.9  # the CPU takes bf16 when its matmul needs at most this share of fp32's time


def choose_cuda_amp(capability: tuple[int, int]) -> tuple[Amp, str]:
    """Precision for a GPU of compute `capability` (major, minor), and why."""
    cc = f"{capability[0]}.{capability[1]}"
    if capability >= (8, 0):
        return Amp.bf16, f"compute capability {cc} >= 8.0 computes bf16 natively"
    if capability >= (7, 0):
        return Amp.fp16, f"compute capability {cc} < 8.0 has no bf16 but fp16 tensor cores (with loss scaling)"
    return Amp.off, f"compute capability {cc} < 7.0 has no tensor cores"


def choose_cpu_amp(cpu_class: str, probe: Callable[[], float]) -> tuple[Amp, str]:
    """Precision for a CPU, and why: fp32 without AVX-512 (no bf16 instructions, no probe); otherwise
    the probe decides (flags alone mislead: AVX-512 without BF16 converts in software).

    Args:
        cpu_class: one of `uavsim.machine.hardware.CPU_CLASSES`.
        probe: `probe() -> float`, the bf16 / fp32 matmul time ratio (`bf16_matmul_time_ratio`).

    Returns:
        `(amp, reason)`.
    """
    if cpu_class in ("AVX2", "baseline"):
        return Amp.off, f"this {cpu_class} CPU has no bf16 instructions (bf16 would be emulated, many times slower)"
    ratio = probe()
    if ratio <= BF16_FASTER:
        return Amp.bf16, f"bf16 matmuls take {ratio:.2f}x the fp32 time on this {cpu_class} CPU"
    return Amp.off, f"bf16 matmuls take {ratio:.1f}x the fp32 time on this {cpu_class} CPU (no native bf16)"


def fp32_update_note(cfg: Config, device: torch.device) -> str | None:
    """A line for the banner where a resolved `cfg` trains in fp32 on the CPU with more than one PPO epoch
    (None elsewhere): there the update is compute-bound, and one epoch of 8 minibatches took a fifth off the
    default preset's PPO (a 2-core Zen 4 EPYC, its AVX2 class and bf16; the critic then read the window), level on
    the test maps but 0.4 steps behind on the validation maps, so it is an override, not the default
    (benchmarks/results/learning-update-epochs1-2026-12-04, docs/training.md)."""
    if device.type != "cpu" or cfg.train.amp != Amp.off or cfg.train.update_epochs < 2:
        return None
    return (
        "note: fp32 on this CPU, where PPO's update is compute-bound: train.update_epochs=1 train.num_minibatches=8 "
        "took a fifth off the default preset's PPO on the AVX2 class of a 2-core AMD EPYC (Zen 4; its critic then read "
        "the window), level on the test maps, 0.4 steps behind on the validation maps (docs/training.md)"
    )


ROUNDING_NOTED = 0.01  # a budget rounded down to whole iterations is told when it loses this share or more


def short_budget_note(cfg: Config, world_size: int = 1) -> str | None:
    """A line for the banner where `train.total_env_steps` is less than one iteration, which the run trains
    whole, or where rounding it down to whole iterations drops `ROUNDING_NOTED` of it or more (the learning
    rate then reaches 0 there); None elsewhere (the default's 2M steps train 1,998,848)."""
    per_iteration = cfg.env_steps_per_iteration * world_size
    total = cfg.train.total_env_steps
    ranks = f" x {world_size} ranks" if world_size > 1 else ""
    iteration = (
        f"(env.num_envs {cfg.env.num_envs} x train.num_steps {cfg.train.num_steps}{ranks} = {per_iteration} env steps)"
    )
    if total < per_iteration:
        return f"note: train.total_env_steps={total} is less than one iteration {iteration}: it trains one iteration"
    trained = total // per_iteration * per_iteration
    if total - trained < ROUNDING_NOTED * total:
        return None
    return (
        f"note: train.total_env_steps={total} is not whole iterations {iteration}: it trains {trained} env steps, "
        f"{total // per_iteration} iteration{'s' if total // per_iteration != 1 else ''}"
    )


def bf16_matmul_time_ratio(rows: int = 1024, inner: int = 256, cols: int = 128, repeats: int = 5) -> float:
    """bf16 / fp32 time of a forward and a weight-gradient product of the update's kind, on one
    thread (what a core's arithmetic does, free of thread wake-ups: docs/performance.md, "Design
    choices, measured"). Both dtypes are warmed up, then timed alternately.

    Args:
        rows: the activations' rows.
        inner: the forward product's inner dimension.
        cols: the output's columns.
        repeats: timings per dtype; the best of each is taken.

    Returns:
        The bf16 time over the fp32 time.
    """
    gen = torch.Generator().manual_seed(0)  # never the global RNG
    x, w = torch.randn(rows, inner, generator=gen), torch.randn(inner, cols, generator=gen)
    operands = {torch.float32: (x, w), torch.bfloat16: (x.bfloat16(), w.bfloat16())}

    def timed(dtype: torch.dtype) -> float:
        a, b = operands[dtype]
        start = time.perf_counter()
        a.t() @ (a @ b)  # the forward, then the weight gradient's shape (long inner dimension)
        return time.perf_counter() - start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(2):  # a process's first products start threads and allocate buffers
            timed(torch.float32), timed(torch.bfloat16)
        times: dict[torch.dtype, list[float]] = {torch.float32: [], torch.bfloat16: []}
        for _ in range(repeats):
            for dtype, spent in times.items():
                spent.append(timed(dtype))
    finally:
        torch.set_num_threads(threads)
    return min(times[torch.bfloat16]) / min(times[torch.float32])


def choose_threads(usable: int, ranks_here: int) -> int:
    """Torch threads per process: the usable cores shared by the ranks on this machine."""
    return max(1, usable // max(1, ranks_here))


def estimate_memory(cfg: Config, num_envs: int, amp: Amp) -> dict[str, int]:
    """Bytes a run needs on its device.

    Args:
        cfg: the config; `num_envs` and `amp` stand in for its own.
        num_envs: environments on the device.
        amp: the precision.

    Returns:
        `{"storage", "env", "update", "imitation"}` in bytes: rollout storage (exact, allocated on the
        meta device), environment state and one step's transients (from a 2-env instance), the
        update's activations (an estimate: each layer's output kept for the backward, in two
        networks), and the demonstrations (`imitation_bytes`).
    """
    from uavsim.env import UAVSwarmEnv

    env_cfg = cfg.env_config()
    probe_env = UAVSwarmEnv(env_cfg, num_envs=2, device="cpu")
    obs = probe_env.reset()
    per_env = sum(v.nbytes for v in probe_env.state.values()) + sum(v.nbytes for v in obs.values())
    per_env = per_env // 2 * 8  # the state, plus observations and a reset's temporaries of a step
    meta_env = SimpleNamespace(
        num_envs=num_envs,
        num_uavs=env_cfg.num_uavs,
        num_actions=env_cfg.num_actions,
        local_obs_dim=env_cfg.local_obs_dim,
        state_dim=env_cfg.state_dim,
        device=torch.device("meta"),
    )
    storage = allocate_storage(
        dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, amp=amp)), meta_env
    ).nbytes()
    rows = cfg.train.num_steps * num_envs * env_cfg.num_uavs // cfg.train.num_minibatches
    layer_bytes = 4 * cfg.model.hidden_size * (cfg.model.num_layers + 1) * 3  # output, activation, grad
    update = rows * (2 * layer_bytes + 4 * env_cfg.local_obs_dim * 2)
    # the clone's log-probabilities of every row, float32 (agents.algo.ppo.clone_logprobs)
    if cfg.train.clone_kl_coef > 0:
        update += rows * cfg.train.num_minibatches * env_cfg.num_actions * 4
    return {"storage": storage, "env": per_env * num_envs, "update": update, "imitation": imitation_bytes(cfg, amp)}


def imitation_bytes(cfg: Config, amp: Amp) -> int:
    """The demonstrations of `imitation.teacher` (`agents.algo.imitation`), held beside the storage
    while the actor is cloned: observations in the AMP dtype, headings, shared maps, moves."""
    if cfg.imitation.teacher == Teacher.none:
        return 0
    env_cfg = cfg.env_config()
    obs_bytes = 4 if amp == Amp.off else 2
    per_uav = env_cfg.local_obs_dim * obs_bytes + 1  # + the move (uint8)
    per_step = env_cfg.num_uavs * per_uav
    if cfg.model.actor_shared_map:
        per_step += env_cfg.num_uavs * 3 * 4 + 2 * env_cfg.state_pool**2 * obs_bytes  # headings, pooled map
    ic = cfg.imitation
    return (ic.env_steps + ic.dagger_rounds * ic.dagger_env_steps) * per_step


def available_memory(device: torch.device) -> int:
    """Bytes new allocations can get: the GPU's free memory, or the host's available memory
    within this process's cgroup limit."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return host_memory()[1]


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_memory(cfg: Config, device: torch.device, available: int | None = None) -> None:
    """Refuse, before anything is allocated, a run that would not fit in 90 % of what `device` has.

    Args:
        cfg: the resolved config.
        device: the run's device.
        available: bytes available (None: `available_memory(device)`).

    Raises:
        ValueError: it would not fit; the message names the settings to lower.
    """
    need = estimate_memory(cfg, cfg.env.num_envs, cfg.train.amp)
    available = available_memory(device) if available is None else available
    ranks = ranks_sharing(device)  # torchrun's CPU ranks share the host's memory, each with its own demonstrations
    if ranks * sum(need.values()) > 0.9 * available:
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in need.items())
        each = f" for each of the {ranks} ranks on this machine" if ranks > 1 else ""
        raise ValueError(
            f"this run needs about {_gib(sum(need.values()))} on {device}{each} ({parts}) but {_gib(available)} is "
            f"available: {'; or '.join(_memory_advice(cfg, need))}"
        )


def launched_ranks(variable: str = "WORLD_SIZE") -> int:
    """torchrun's ranks: all of them (`WORLD_SIZE`) or this machine's (`LOCAL_WORLD_SIZE`); 1 without torchrun."""
    return max(1, int(os.environ.get(variable, "1") or 1))


def ranks_sharing(device: torch.device) -> int:
    """The torchrun ranks of this machine whose memory `device` is: its CPU ranks (`LOCAL_WORLD_SIZE`), or 1 (a GPU
    is each rank's own)."""
    return launched_ranks("LOCAL_WORLD_SIZE") if device.type == "cpu" else 1


def recipe_shortfall(cfg: Config, device: torch.device) -> str | None:
    """Why the GPU recipe `cfg` (`train.amp` and `env.num_envs` maybe `auto`) would not fit `device`'s free memory
    (`check_memory`'s 90 %), or None where it fits: `run.recipe=auto` then takes the preset instead."""
    amp = cfg.train.amp
    if amp == Amp.auto:
        amp = choose_cuda_amp(torch.cuda.get_device_capability(device))[0] if device.type == "cuda" else Amp.off
    resolved = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, amp=amp))
    num_envs = cfg.env.num_envs
    if num_envs == AUTO:
        num_envs = choose_num_envs(resolved, device, amp)[0]
    need, available = sum(estimate_memory(resolved, num_envs, amp).values()), available_memory(device)
    if need <= 0.9 * available:
        return None
    return f"the GPU recipe needs about {_gib(need)} at {num_envs} environments, {_gib(available)} is free on {device}"


def _memory_advice(cfg: Config, need: dict[str, int]) -> list[str]:
    """What to lower for each part of `need` (`estimate_memory`) that holds a tenth of it or more, the largest first."""
    e, t, ic = cfg.env, cfg.train, cfg.imitation
    envs, steps = f"lower env.num_envs (now {e.num_envs})", f"lower train.num_steps (now {t.num_steps})"
    advice = {  # each part's clauses; parts share some (the rollout's size sizes the update too)
        "storage": [envs, steps],
        "env": [envs],
        "update": [f"raise train.num_minibatches (now {t.num_minibatches}) for a smaller update", envs, steps],
        "imitation": [
            f"lower imitation.env_steps (now {ic.env_steps}), or imitation.dagger_env_steps (now "
            f"{ic.dagger_env_steps}) or imitation.dagger_rounds (now {ic.dagger_rounds}): the demonstrations are "
            "env_steps + dagger_rounds x dagger_env_steps steps"
        ],
    }
    large = sorted((k for k, v in need.items() if v >= 0.1 * sum(need.values())), key=need.get, reverse=True)
    # the GPU recipe's batch is what a small GPU cannot hold: the preset's (64 environments) first
    first = ["run.recipe=preset (the preset's batch: 64 environments)"] if cfg.run.recipe == Recipe.gpu else []
    return list(dict.fromkeys([*first, *(c for k in large for c in advice[k])]))  # each clause once


def choose_num_envs(
    cfg: Config, device: torch.device, amp: Amp, available: int | None = None, world_size: int | None = None
) -> tuple[int, str]:
    """`env.num_envs=auto`: 64 on the CPU; on a GPU see the module docstring. Never fewer than the run's size
    groups (each needs an environment).

    Args:
        cfg: the config, `train.amp` resolved.
        device: the run's device.
        amp: the precision.
        available: bytes available on the GPU (None: `available_memory(device)`).
        world_size: torchrun's ranks, each with `num_envs` environments of the one budget (None: `WORLD_SIZE`, else 1).

    Returns:
        `(num_envs, reason)`.
    """
    if device.type != "cuda":
        return CPU_NUM_ENVS, "the CPU default"
    available = available_memory(device) if available is None else available
    world = world_size if world_size is not None else launched_ranks()
    groups = len(cfg.env_configs())
    budget = max(1, cfg.train.total_env_steps // (cfg.train.num_steps * MIN_ITERATIONS * world))
    num_envs = 1 << (min(GPU_MAX_NUM_ENVS, budget).bit_length() - 1)  # a power of two
    limit = "the GPU maximum" if num_envs == GPU_MAX_NUM_ENVS else f"{MIN_ITERATIONS} iterations of the budget"
    if world > 1 and num_envs < GPU_MAX_NUM_ENVS:
        limit += f" over {world} ranks"
    while num_envs > groups and sum(estimate_memory(cfg, num_envs, amp).values()) > GPU_MEMORY_SHARE * available:
        num_envs //= 2
        limit = f"{GPU_MEMORY_SHARE:.0%} of the {_gib(available)} free on {device}"
    if num_envs < groups:
        num_envs, limit = groups, f"one environment per size group ({groups})"
    return num_envs, f"on {device}: bounded by {limit}"


def resolve(cfg: Config, device: torch.device, ranks_here: int | None = None) -> tuple[Config, dict[str, str]]:
    """`cfg` with every `auto` value chosen for `device`. Sets torch's thread count when
    `run.torch_threads` is auto (the CPU probe measures with the run's threads): call it from an
    entry point only.

    Args:
        cfg: the config, `auto` values and all.
        device: the run's device.
        ranks_here: torchrun ranks on this machine (None: `LOCAL_WORLD_SIZE`, else 1).

    Returns:
        `(resolved config, {"recipe", "threads", "precision", "environments": what and why})`.

    Raises:
        ValueError: the resolved config's batch geometry does not fit (`check_config`).
    """
    reasons: dict[str, str] = {}
    run, train, env = cfg.run, cfg.train, cfg.env
    if run.recipe == Recipe.auto:  # a config built in code: taken as given (the command line resolves auto)
        run = dataclasses.replace(run, recipe=Recipe.preset)
    reasons["recipe"] = describe_recipe(run.recipe, device.type)
    if run.torch_threads == AUTO:
        usable, why = hardware.usable_cores()
        ranks_here = ranks_here if ranks_here is not None else launched_ranks("LOCAL_WORLD_SIZE")
        threads = choose_threads(usable, ranks_here)
        run = dataclasses.replace(run, torch_threads=threads)
        torch.set_num_threads(threads)
        shared = f", shared by {ranks_here} ranks" if ranks_here > 1 else ""
        reasons["threads"] = f"{threads} (auto: {usable} usable cores, {why}{shared})"
    else:
        reasons["threads"] = f"{run.torch_threads} (set)" if run.torch_threads else "torch's default (0, set)"
    if train.amp == Amp.auto:
        if device.type == "cuda":
            amp, why = choose_cuda_amp(torch.cuda.get_device_capability(device))
        else:
            amp, why = choose_cpu_amp(hardware.cpu_class(), bf16_matmul_time_ratio)
        train = dataclasses.replace(train, amp=amp)
        reasons["precision"] = f"{'fp32' if amp == Amp.off else amp.value} (train.amp={amp.value}, auto: {why})"
    else:
        reasons["precision"] = f"{train.amp.value} (set)"
    if env.num_envs == AUTO:
        num_envs, why = choose_num_envs(dataclasses.replace(cfg, train=train), device, train.amp)
        env = dataclasses.replace(env, num_envs=num_envs)
        reasons["environments"] = f"{num_envs} (auto: {why})"
    else:
        reasons["environments"] = f"{env.num_envs} (set)"
    resolved = dataclasses.replace(cfg, run=run, train=train, env=env)
    check_config(resolved)  # the batch geometry, now that num_envs is known
    return resolved, reasons
