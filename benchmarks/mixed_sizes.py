"""Mixed-size training's cost: agent-steps per second of whole training iterations (collection +
update) of a mixed-size config against single-size ones, side by side in one process.

    python -m benchmarks.mixed_sizes                       # configs/size_agnostic.yaml's sizes
    python -m benchmarks.mixed_sizes --iterations 3 --rounds 2

Every config is `configs/default.yaml` with `model.size_agnostic=true model.agent_id=false` (and the
one-hot default itself, for reference), without the onboard memory, the clone's anchor and the
window paths it has carried since issue 30 (`env.comm_radius=null train.clone_kl_coef=0
env.window_paths=false`: the setup measured when
mixed sizes came, kept so the figures stay comparable), the same `env.num_envs`, one thread; the configs take turns
(`--rounds` rounds of `--iterations` timed iterations each, after one warm-up iteration each), so
a drift of the machine's speed touches them alike. Prints the median agent-steps/s of each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from agents.algo.learner import build_learner, read_metrics, train_iteration
from agents.config import load_config
from agents.run.machine_defaults import resolve

AGNOSTIC = ["model.size_agnostic=true", "model.agent_id=false"]
PRESET = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"  # wherever it runs from
CONFIGS = {
    "default (one-hot id, 10 UAVs, 32x32)": [],
    "size-agnostic, 8 UAVs, 32x32": [*AGNOSTIC, "env.num_uavs=8"],
    "size-agnostic, 10 UAVs, 32x32": [*AGNOSTIC],
    "mixed [6,8,12] x [28,32,36]": [
        *AGNOSTIC,
        "env.num_uavs=[6,8,12]",
        "env.grid_height=[28,32,36]",
        "env.grid_width=[28,32,36]",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + " Prints its table; writes no file.")
    parser.add_argument("--num-envs", type=int, default=63, help="env.num_envs (63: 7 per group of the 9; >= 9)")
    parser.add_argument("--iterations", type=int, default=2, help="timed training iterations per config and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the configs, alternating them")
    args = parser.parse_args()
    for name in ("num_envs", "iterations", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.num_envs < 9:  # the mixed configs' 9 size groups each need an environment
        parser.error(f"--num-envs must be >= 9 (one per size group of the mixed configs), got {args.num_envs}")
    torch.set_num_threads(1)
    device = torch.device("cpu")
    common = [f"env.num_envs={args.num_envs}", "train.amp=off", "run.torch_threads=1"]
    # as measured before the default gained its memory, anchor and window paths:
    common += ["env.comm_radius=null", "env.window_paths=false", "imitation.teacher=none", "train.clone_kl_coef=0"]
    learners = {}
    for name, overrides in CONFIGS.items():
        cfg, _ = resolve(load_config(PRESET, [*common, *overrides]), device)
        learners[name] = build_learner(cfg, device)
        read_metrics(train_iteration(learners[name]))  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in learners}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            for _ in range(args.iterations):
                start = time.perf_counter()
                read_metrics(train_iteration(learner))
                rates[name].append(learner.agent_steps_per_iteration / (time.perf_counter() - start))
    for name, values in rates.items():
        print(f"{name:40s} {statistics.median(values):9.0f} agent-steps/s  ({len(values)} iterations)")


if __name__ == "__main__":
    main()
