"""What one step costs on a GPU, counted on any machine: kernels launched and bytes moved.

    python -m benchmarks.step_cost            # writes benchmarks/results/step_cost-<machine>-<date>.*
    python -m benchmarks.step_cost --quick    # small batch, a few seconds

Counts, with `benchmarks.op_count.OpCounter` (a `TorchDispatchMode`; its docstring states the rules),
the aten ops that would each launch a kernel and the bytes of their operands, per call of:

    env.step[<mode>]   `UAVSwarmEnv.step` in each reset / autoreset / observation-dtype mode
                       (`ENV_MODES`), and with onboard memory (`MEMORY_MODES`), with the trainer's
                       settings (`check_action_range=False`);
    env.step[default preset]  the same, in the env's default modes, on the task of `PRESET`
                       (configs/default.yaml: 13x13 windows, onboard memory, window paths; not --quick);
    policy step        `Actor.act` (agents.algo.networks) with the trainer config's networks, fp32 and bf16;
    rollout step       one iteration of `agents.algo.learner.collect`'s loop: policy step, storage
                       writes, env.step, episode statistics (trainer config, bf16);
    PPO minibatch      `agents.algo.ppo.minibatch_loss` + backward + `optimizer_step`, at the trainer
                       config's minibatch.

and, with `--fused` (the default of a full run), the bf16 policy step compiled whole by inductor,
counted by inductor itself (`benchmarks.fused_count`): what capture and fusion save. The trainer's
paths are counted in `benchmarks.trainer_cost`; the counting both modules share (`count_calls`,
`graph_breaks`, `staggered_env`, `whole_periods`) is `benchmarks.cost_common`'s, imported here too:
`benchmarks.gpu_counts` takes them from this module, where older trees have them.

Episode phases are staggered so that resets happen at a steady rate: environment ``b`` starts the
count at step ``max_steps - L + b % L`` of its episode (``L = --episode-length``), so about
``B / L`` environments end in every counted step (truncations), as in a long training run whose
episodes last ``L`` steps. Counts are per call, averaged over ``--steps`` calls (min and max too),
and per environment-step (divided by the environments of the call). An env path counts whole
periods of its rebuilds of prepared starts (``prepare_period`` steps: 18 on the default task), so
the average carries their share; the max is a step with a rebuild.

Beside the counts: ``graph_breaks`` (per path, from ``torch._dynamo.explain``; a graph break is
where ``torch.compile``/CUDA graphs cannot capture the step whole) and a **model** of the ceiling a
GPU could reach: ``min(bandwidth / bytes_per_env_step, envs / (kernels x launch_cost))`` env-steps/s,
at 4,096 / 65,536 / 262,144 environments, for an H100 SXM (3.35 TB/s) and an H200 (4.8 TB/s) with
``--launch-us`` per eager kernel launch. It assumes every byte counted crosses DRAM once at peak
bandwidth and kernels do not overlap: a model to compare designs with, not a measurement.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import RESULTS_DIR, machine_info, write_results
from benchmarks.cost_common import count_calls, graph_breaks, staggered_env, whole_periods
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg
from benchmarks.step_cost_report import table
from benchmarks.trainer_cost import captured_paths, fused_paths, trainer_paths
from uavsim import EnvConfig

GPUS = {"H100 SXM": 3.35e12, "H200": 4.8e12}  # peak DRAM bandwidth, bytes/s
PRESET = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"  # the default preset: its env's task
BASELINE = RESULTS_DIR / "step_cost-before-redesign"  # the counts before issue 15's env redesign (commit 159bf42)
PROJECTED_ENVS = (4096, 65536, 262144)
# The eager launch cost `benchmarks.gpu_model` fitted on the committed GPU rows (Python, dispatch and launch of
# one op on an H100); a bare CUDA launch is ~4 us, which made ceilings 6x the step measured there.
FITTED_LAUNCH_US = 22.5  # benchmarks/results/gpu_model.json's launch_eager_us when it is missing


def fitted_launch_us() -> float:
    """The model's fitted eager launch cost, read when needed (gpu_model imports this module: not at import)."""
    try:
        return json.loads((RESULTS_DIR / "gpu_model.json").read_text(encoding="utf-8"))["constants"]["launch_eager_us"]
    except (OSError, ValueError, KeyError):
        return FITTED_LAUNCH_US


# (path name, UAVSwarmEnv keyword arguments): every reset / autoreset / observation mode.
ENV_MODES = [  # "prepared" with same_step autoreset and float32 observations is the env's default
    ("env.step[sparse]", {"reset_mode": "sparse"}),
    ("env.step[dense]", {"reset_mode": "dense"}),
    ("env.step[prepared]", {"reset_mode": "prepared"}),
    ("env.step[prepared, next_step]", {"reset_mode": "prepared", "autoreset_mode": "next_step"}),
    ("env.step[prepared, bf16 obs]", {"reset_mode": "prepared", "obs_dtype": torch.bfloat16}),
    (
        "env.step[prepared, next_step, bf16 obs]",
        {"reset_mode": "prepared", "autoreset_mode": "next_step", "obs_dtype": torch.bfloat16},
    ),
]

# (path name, EnvConfig.comm_radius): the default path with onboard memory (uavsim.memory); 64 is past the map.
MEMORY_MODES = [(f"env.step[prepared, memory, comm_radius={r}]", r) for r in (0, 4, 64)]


# -- counting ----------------------------------------------------------------------------------------
def projection(kernels: float, bytes_per_env_step: float, launch_us: float) -> list[dict[str, Any]]:
    """The model's ceiling (env-steps/s) for each GPU and environment count (see module docstring)."""
    rows = []
    for gpu, bandwidth in GPUS.items():
        for envs in PROJECTED_ENVS:
            bw_bound = bandwidth / bytes_per_env_step
            launch_bound = envs / (kernels * launch_us * 1e-6) if kernels else float("inf")
            rows.append(
                {
                    "gpu": gpu,
                    "envs": envs,
                    "bandwidth_bound": bw_bound,
                    "launch_bound": launch_bound,
                    "ceiling": min(bw_bound, launch_bound),
                    "bound_by": "bandwidth" if bw_bound <= launch_bound else "launches",
                }
            )
    return rows


# -- the environment ------------------------------------------------------------------------------
def random_actions(cfg: EnvConfig, num_envs: int, calls: int, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(0)
    return [
        torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen, device=device) for _ in range(calls)
    ]


def env_paths(args) -> dict[str, dict[str, Any]]:
    out = {}
    modes = [(name, EnvConfig(), kwargs) for name, kwargs in ENV_MODES]
    modes += [(name, EnvConfig(comm_radius=r), {"reset_mode": "prepared"}) for name, r in MEMORY_MODES]
    for name, cfg, kwargs in modes:
        env = staggered_env(cfg, args.num_envs, args.episode_length, **kwargs)
        steps = whole_periods(args.steps, env)
        actions = random_actions(cfg, args.num_envs, steps, env.device)
        out[name] = count_calls(lambda i: env.step(actions[i]), steps, args.num_envs)  # noqa: B023 -- called here
        small = staggered_env(cfg, args.explain_envs, args.episode_length, **kwargs)
        out[name]["graph_breaks"] = graph_breaks(small.step, random_actions(cfg, args.explain_envs, 1, small.device)[0])
    return out


def preset_env_config(config: Path = PRESET) -> EnvConfig:
    """The env task of a trainer config (`PRESET` by default: the default preset's)."""
    from agents.config import load_config
    from agents.config.env_section import env_configs

    (cfg,) = env_configs(load_config(config, []).env)
    return cfg


def preset_paths(args) -> dict[str, dict[str, Any]]:
    """``env.step[default preset]``: the env step of `PRESET`'s task, counted as `env_paths` counts."""
    cfg = preset_env_config()
    env = staggered_env(cfg, args.num_envs, args.episode_length)
    steps = whole_periods(args.steps, env)
    actions = random_actions(cfg, args.num_envs, steps, env.device)
    out = count_calls(lambda i: env.step(actions[i]), steps, args.num_envs)
    small = staggered_env(cfg, args.explain_envs, args.episode_length)
    out["graph_breaks"] = graph_breaks(small.step, random_actions(cfg, args.explain_envs, 1, small.device)[0])
    return {"env.step[default preset]": out}


def bytes_per_env_step(
    cfg: EnvConfig, num_envs: int = 1024, steps: int = 18, episode_length: int = 100, **env_kwargs
) -> float:
    """Bytes one `env.step` moves per environment, counted by the model (steady resets, whole
    rebuild periods, see module docstring): what `benchmarks.env_throughput` divides by."""
    env = staggered_env(cfg, num_envs, episode_length, **env_kwargs)
    steps = whole_periods(steps, env)
    actions = random_actions(cfg, num_envs, steps, env.device)
    return count_calls(lambda i: env.step(actions[i]), steps, num_envs)["bytes_per_env_step"]


# -- report ---------------------------------------------------------------------------------------
def measure(args) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    paths = env_paths(args)
    if not args.env_only:
        if not args.quick:  # --quick (CI's smoke run) leaves it to its own counted test
            paths.update(preset_paths(args))  # the preset is read by the trainer's config loader (agents)
        paths.update(trainer_paths(args))
        if args.captured:
            paths.update(captured_paths(args))
    fused = fused_paths(args) if args.fused else {}
    for name, p in paths.items():
        if not name.startswith("PPO") and "launches_per_call" not in p:  # the model's launches are eager ones
            p["projection"] = projection(p["kernels_per_call"], p["bytes_per_env_step"], args.launch_us)
    return {
        "benchmark": "step_cost",
        "machine": machine_info(),
        "config": EnvConfig().to_dict(),
        "quick": args.quick,
        "baseline": baseline_paths(args.num_envs),
        "settings": {
            "num_envs": args.num_envs,
            "steps": args.steps,
            "episode_length": args.episode_length,
            "launch_us": args.launch_us,
            "gpus_bandwidth_bytes_per_s": GPUS,
            "update_envs": args.update_envs,
            "update_steps": args.update_steps,
        },
        "graph_breaks": {name: p["graph_breaks"]["breaks"] for name, p in paths.items()},
        "paths": paths,
        "fused": fused,
    }


def baseline_paths(num_envs: int) -> dict[str, dict[str, float]]:
    """The counts of `BASELINE` (same batch size only): ``{path: {kernels, bytes_per_env_step}}``."""
    files = sorted(BASELINE.glob("*.json")) if BASELINE.is_dir() else []
    if not files:
        return {}
    before = json.loads(files[-1].read_text(encoding="utf-8"))
    if before["settings"]["num_envs"] != num_envs:
        return {}
    return {
        name: {"kernels_per_call": p["kernels_per_call"], "bytes_per_env_step": p["bytes_per_env_step"]}
        for name, p in before["paths"].items()
    }


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small batch and few calls (CI smoke)")
    parser.add_argument("--num-envs", type=int, default=None, help="environments per counted call (default 1024)")
    parser.add_argument(
        "--steps", type=int, default=None, help="counted calls per path (default 18; env paths: whole rebuild periods)"
    )
    parser.add_argument("--episode-length", type=int, default=100, help="steps per episode of the staggered start")
    launch_us = round(fitted_launch_us(), 1)
    parser.add_argument(
        "--launch-us",
        type=float,
        default=launch_us,
        help=f"eager kernel launch cost of the model, us (default: {launch_us}, fitted on the GPU rows)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (counts do not depend on it)")
    parser.add_argument("--env-only", action="store_true", help="only the env.step paths (no agents import)")
    parser.add_argument(
        "--fused",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also count the policy step compiled by inductor (default: on, off with "
        "--quick or --env-only; needs a C++ compiler, about 10 s)",
    )
    parser.add_argument(
        "--captured",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also count the rollout step and the PPO minibatch as captured on CUDA, with their launches "
        "under CUDA graphs (default: on, off with --env-only)",
    )
    parser.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = parser.parse_args(argv)
    quick = args.quick
    args.num_envs = (64 if quick else 1024) if args.num_envs is None else args.num_envs
    args.steps = (4 if quick else 18) if args.steps is None else args.steps
    args.explain_envs = 8 if quick else 64
    args.fused = not (quick or args.env_only) if args.fused is None else args.fused
    args.captured = not args.env_only if args.captured is None else args.captured
    if args.captured and args.env_only:
        parser.error("--captured counts the trainer's steps: it cannot go with --env-only")
    if args.fused and args.env_only:
        parser.error("--fused counts the trainer's steps: it cannot go with --env-only")
    args.update_envs, args.update_steps, args.update_calls = (8, 8, 1) if quick else (64, 64, 2)
    for name in ("num_envs", "steps", "episode_length", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.episode_length > EnvConfig().max_steps:  # the staggered start cannot go past an episode's end
        parser.error(f"--episode-length must be <= max_steps ({EnvConfig().max_steps}), got {args.episode_length}")
    if not args.launch_us > 0:
        parser.error(f"--launch-us must be > 0, got {args.launch_us}")
    payload = measure(args)
    report = table(payload, baseline=BASELINE.name, gpus=GPUS, envs=PROJECTED_ENVS)
    return write_results("step_cost", payload, report, None, args.out_dir, subset=args.env_only)


if __name__ == "__main__":
    main()
