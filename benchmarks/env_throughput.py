"""Environment throughput: the batched env on CPU/GPU against the NumPy reference and VMAS.

    python -m benchmarks.env_throughput            # full sweep, writes benchmarks/results/
    python -m benchmarks.env_throughput --quick    # small sizes, a few seconds per backend

Every backend steps the default task (``EnvConfig()``: 32x32, 10 UAVs, 40 obstacles) with uniform
random actions drawn on its device each step; warm-up is excluded and the median of several timed
repeats is reported, with the speedup over the reference loop measured in the same run.

Backends
    reference-loop     ``ReferenceEnv`` instances stepped one after another in a Python loop (the
                       team's original way); resets when an episode ends. A loop's rate does not
                       depend on how many environments it cycles through, so a row of N > 64
                       environments steps 64 of them (``stepped_envs`` in the JSON).
    reference-async    the reference in ``gymnasium.vector.AsyncVectorEnv``, one worker process per
                       core (the seed note's "parallel environments" fix); measured at one size.
    batched-<device>   ``UAVSwarmEnv`` with its defaults: ``reset_mode="prepared"`` (no host sync),
                       same-step autoreset, float32 observations.
    batched-<device>-sparse  the starts built for the ended environments only (a host sync per step).
    batched-<device>-dense   every start rebuilt every step (the GPU path before "prepared").
    batched-<device>-next-step-bf16  next-step autoreset and bfloat16 observations: the fewest bytes.
    batched-cuda-compile  ``torch.compile`` of the step (CUDA only: on a 2-core CPU, compiling
                       took minutes and ran slower than eager; ``--compile-cpu`` tries it anyway).
    vmas-navigation    VMAS ``navigation`` with as many agents, discrete actions, no resets.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import (
    RESULTS_DIR,
    fmt_rate,
    machine_info,
    median_rate,
    peak_rss_mib,
    reset_peak_rss,
    setup_host,
    sync,
    write_results,
)
from benchmarks.env_throughput_report import plot, table
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg
from uavsim import EnvConfig
from uavsim.compile_compat import prepare_inductor
from uavsim.machine import hardware
from uavsim.machine.host_memory import release_free_memory
from uavsim.reference import ReferenceEnv

CPU_SIZES = [1, 16, 256, 4096, 16384]
GPU_SIZES = [1, 256, 4096, 16384, 65536, 131072, 262144]
QUICK_SIZES = [1, 16, 256, 1024]


def time_steps(step: Callable[[], None], env_steps_per_call: int, args, device: str = "cpu"):
    """Warm up, size a repeat to last about ``args.seconds``, return the median env-steps/s."""
    for _ in range(args.warmup):
        step()
    sync(device)
    start = time.perf_counter()
    step()
    sync(device)
    calls = int(min(1000, max(2, args.seconds / max(time.perf_counter() - start, 1e-6))))

    def run():
        for _ in range(calls):
            step()

    return median_rate(run, calls * env_steps_per_call, args.repeats, device)


# The batched env's variants: backend name suffix -> UAVSwarmEnv keyword arguments.
VARIANTS = {
    "": {},
    "-sparse": {"reset_mode": "sparse"},
    "-dense": {"reset_mode": "dense"},
    "-next-step-bf16": {"autoreset_mode": "next_step", "obs_dtype": torch.bfloat16},
}
MODEL_ENVS, MODEL_STEPS = 256, 18  # the batch and calls `model_bytes_per_env_step` counts


def model_bytes_per_env_step(cfg: EnvConfig, variants: list[str]) -> dict[str, float]:
    """Bytes one env step moves per environment in each variant (`VARIANTS` suffix; "" the
    default), counted by the cost model of `benchmarks.step_cost` (every aten op's operands,
    episodes ending at a steady rate, averaged over one rebuild of the prepared starts): what the
    achieved bandwidth of a GPU row divides by."""
    from benchmarks.step_cost import bytes_per_env_step

    return {
        variant_name(v): bytes_per_env_step(cfg, num_envs=MODEL_ENVS, steps=MODEL_STEPS, **VARIANTS[v])
        for v in variants
    }


def variant_name(suffix: str) -> str:
    return suffix.lstrip("-") or "default"


def variant_of(backend: str) -> str:
    """The `VARIANTS` suffix of a batched backend's name."""
    return next((v for v in sorted(VARIANTS, key=len, reverse=True) if v and backend.endswith(v)), "")


# -- backends: each returns (env_steps_per_s, repeats, extra) for one size ------------------------
REFERENCE_LOOP_MAX = 64  # environments a reference-loop row steps (its rate does not depend on the count)


def run_reference_loop(cfg, num_envs, args):
    envs = [ReferenceEnv(cfg, seed=0, env_index=i) for i in range(min(num_envs, REFERENCE_LOOP_MAX))]
    for env in envs:
        env.reset()
    rng = np.random.default_rng(0)

    def step():
        for env in envs:
            _, _, terminated, truncated, _ = env.step(rng.integers(0, cfg.num_actions, cfg.num_uavs))
            if terminated or truncated:
                env.reset()

    return time_steps(step, len(envs), args)


def run_reference_async(cfg, num_envs, args):
    import gymnasium as gym

    from uavsim.adapters.gymnasium_single import CoverageReferenceEnv

    envs = gym.vector.AsyncVectorEnv(
        [partial(CoverageReferenceEnv, config=cfg, seed=0, env_index=i) for i in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    try:
        envs.reset()
        rng = np.random.default_rng(0)
        return time_steps(lambda: envs.step(rng.integers(0, cfg.num_actions, (num_envs, cfg.num_uavs))), num_envs, args)
    finally:
        envs.close()


# Batched envs start staggered over the whole of max_steps: random actions seldom reach the target, so every
# episode runs max_steps and B / max_steps of them end in every step, as in a steady run. (Staggered over 100 of
# the 200 steps, until 2026-12-05, B / 100 ended per step in one stretch of 100 steps and none in the next: the
# sparse mode's repeats mixed the two rates.)


def timed_env(cfg: EnvConfig, num_envs: int, device: str = "cpu", variant: str = ""):
    """The batched env a row times: `variant`'s modes, its environments staggered over the whole of max_steps."""
    from benchmarks.cost_common import staggered_env

    return staggered_env(cfg, num_envs, cfg.max_steps, device=device, **VARIANTS[variant])


def batched_runner(device: str, variant: str = "", compile_step: bool = False):
    def run_batched(cfg, num_envs, args):
        env = timed_env(cfg, num_envs, device, variant)
        if compile_step:
            prepare_inductor()  # what inductor lowers wrong in the env's step (uavsim.compile_compat)
        step = torch.compile(env.step) if compile_step else env.step
        gen = torch.Generator(device=device).manual_seed(0)
        shape = (num_envs, cfg.num_uavs)
        if compile_step:
            for _ in range(3):  # compilation happens here, outside the timing
                step(torch.randint(0, cfg.num_actions, shape, generator=gen, device=device))
        return time_steps(
            lambda: step(torch.randint(0, cfg.num_actions, shape, generator=gen, device=device)), num_envs, args, device
        )

    return run_batched


def vmas_runner(device: str):
    def run_vmas(cfg, num_envs, args):
        import vmas

        env = vmas.make_env(
            "navigation", num_envs=num_envs, device=device, continuous_actions=False, n_agents=cfg.num_uavs, seed=0
        )
        env.reset()
        n_actions = env.action_space[0].n
        gen = torch.Generator(device=device).manual_seed(0)
        return time_steps(
            lambda: env.step(
                [torch.randint(0, n_actions, (num_envs,), generator=gen, device=device) for _ in range(cfg.num_uavs)]
            ),
            num_envs,
            args,
            device,
        )

    return run_vmas


# Every backend's name (which of them run depends on the machine: CUDA, vmas installed).
BACKENDS = (
    "reference-loop",
    "reference-async",
    *(f"batched-{d}{v}" for d in ("cpu", "cuda") for v in VARIANTS),
    "batched-cuda-compile",
    "vmas-navigation",
    "vmas-navigation-cuda",
)


def available_backends(args) -> list[tuple[str, str, Callable, list[int]]]:
    """(name, device, runner, sizes) for everything this machine can run."""
    cpu_sizes = QUICK_SIZES if args.quick else CPU_SIZES
    gpu_sizes = [s for s in (QUICK_SIZES if args.quick else GPU_SIZES) if s <= args.max_gpu_envs]
    out = [
        ("reference-loop", "cpu", run_reference_loop, cpu_sizes),
        ("reference-async", "cpu", run_reference_async, [args.workers]),
        *((f"batched-cpu{v}", "cpu", batched_runner("cpu", v), cpu_sizes) for v in VARIANTS),
    ]
    if args.compile_cpu:
        out.append(("batched-cpu-compile", "cpu", batched_runner("cpu", "", True), cpu_sizes))
    if torch.cuda.is_available():
        out += [(f"batched-cuda{v}", "cuda", batched_runner("cuda", v), gpu_sizes) for v in VARIANTS]
        out.append(("batched-cuda-compile", "cuda", batched_runner("cuda", "", True), gpu_sizes))
    try:
        import vmas  # noqa: F401

        out.append(("vmas-navigation", "cpu", vmas_runner("cpu"), cpu_sizes))
        if torch.cuda.is_available():
            out.append(("vmas-navigation-cuda", "cuda", vmas_runner("cuda"), gpu_sizes))
    except ImportError:
        print("vmas is not installed (pip install '.[peers]'): skipping the VMAS backends")
    return [b for b in out if args.backends is None or b[0] in args.backends]


def measure(args) -> dict[str, Any]:
    cfg = EnvConfig()
    setup_host(args.threads)
    rows: list[dict[str, Any]] = []
    for name, device, runner, sizes in available_backends(args):
        for num_envs in sizes:
            gc.collect()
            release_free_memory()  # the host keeps freed memory (setup_host): drop the last point's
            reset_peak_rss()  # before this point's peak window opens
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                rate, repeats = runner(cfg, num_envs, args)
            except Exception as exc:  # one failing backend must not sink the whole sweep
                print(f"{name:22s} {num_envs:>8d} envs  FAILED: {type(exc).__name__}: {exc}")
                rows.append(
                    {"backend": name, "device": device, "num_envs": num_envs, "error": f"{type(exc).__name__}: {exc}"}
                )
                continue
            sync(device)
            row = {
                "backend": name,
                "device": device,
                "num_envs": num_envs,
                "env_steps_per_s": rate,
                **({"stepped_envs": min(num_envs, REFERENCE_LOOP_MAX)} if name == "reference-loop" else {}),
                "uav_steps_per_s": rate * cfg.num_uavs,
                "repeats_env_steps_per_s": repeats,
                "peak_rss_mib": peak_rss_mib(),
            }
            if device == "cuda":
                row["cuda_max_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            rows.append(row)
            print(f"{name:22s} {num_envs:>8d} envs  {fmt_rate(rate):>8s} env-steps/s")
    model_bytes = model_bytes_per_env_step(cfg, list(VARIANTS))
    add_ratios(rows, model_bytes)
    return {
        "benchmark": "env_throughput",
        "machine": machine_info("cuda" if torch.cuda.is_available() else None),
        "config": cfg.to_dict(),
        "quick": args.quick,
        "threads": args.threads,
        "bytes_per_env_step_model": model_bytes,
        "results": rows,
    }


def add_ratios(rows: list[dict[str, Any]], model_bytes: dict[str, float]) -> None:
    ref = {r["num_envs"]: r["env_steps_per_s"] for r in rows if r["backend"] == "reference-loop" and "error" not in r}
    # one rate for every row: the rows of REFERENCE_LOOP_MAX envs and more time the very same work, and a size's own
    # (a noisy repeat at 16,384, say) would move that size's ratios alone (131x against 94x from the median, Zen 3)
    ref_any = float(np.median(list(ref.values()))) if ref else None  # the loop's rate barely depends on size
    vmas = {r["num_envs"]: r["env_steps_per_s"] for r in rows if r["backend"] == "vmas-navigation" and "error" not in r}
    peak = None
    if torch.cuda.is_available():
        peak = machine_info("cuda").get("gpu_peak_bandwidth_gbs")
    for r in rows:
        if "error" in r:
            continue
        r["speedup_vs_reference_loop"] = r["env_steps_per_s"] / ref_any if ref_any else None
        if r["num_envs"] in vmas and r["backend"].startswith("batched-cpu"):
            r["speedup_vs_vmas_cpu"] = r["env_steps_per_s"] / vmas[r["num_envs"]]
        if r["device"] == "cuda" and r["backend"].startswith("batched") and peak:
            r["bytes_per_env_step"] = model_bytes[variant_name(variant_of(r["backend"]))]
            achieved = r["env_steps_per_s"] * r["bytes_per_env_step"] / 1e9
            r["achieved_bandwidth_gbs"] = achieved
            r["bandwidth_fraction"] = achieved / peak


def main(argv: list[str] | None = None) -> dict[str, Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs (CI smoke)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per point (median reported)")
    parser.add_argument("--seconds", type=float, default=None, help="length of one timed repeat")
    cores = hardware.usable_cores()[0]  # the cores this process may run on (CPU affinity, cgroup quota), as the trainer
    parser.add_argument(
        "--threads", type=int, default=cores, help=f"torch CPU threads (default: {cores}, the usable cores)"
    )
    parser.add_argument("--workers", type=int, default=cores, help=f"AsyncVectorEnv workers (default: {cores})")
    parser.add_argument("--max-gpu-envs", type=int, default=262144)
    parser.add_argument("--backends", nargs="+", default=None, help="only these backends")
    parser.add_argument("--compile-cpu", action="store_true", help="also time torch.compile on the CPU")
    parser.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.seconds is None:
        args.seconds = 0.05 if args.quick else 0.5
    for name in ("repeats", "threads", "workers", "max_gpu_envs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 < args.seconds < math.inf:
        parser.error(f"--seconds must be a finite number > 0, got {args.seconds}")
    if args.backends is not None:
        known = set(BACKENDS) | ({"batched-cpu-compile"} if args.compile_cpu else set())
        unknown = sorted(set(args.backends) - known)
        if unknown:
            parser.error(f"unknown --backends {unknown}; choose from {sorted(known)}")
        on_cuda = sorted(b for b in args.backends if "cuda" in b)
        if on_cuda and not torch.cuda.is_available():
            parser.error(f"--backends {on_cuda} need a CUDA device, and torch sees none")
    args.warmup = 1 if args.quick else 3
    payload = measure(args)
    return write_results(
        "env_throughput",
        payload,
        table(payload, model_envs=MODEL_ENVS, reference_loop_max=REFERENCE_LOOP_MAX),
        lambda p: plot(payload, p),
        args.out_dir,
        subset=args.backends is not None,
    )


if __name__ == "__main__":
    main()
