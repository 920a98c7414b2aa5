"""Evaluate a trained policy against the scripted baselines on the same episodes.

    python -m agents.evaluate RUN_DIR_OR_CKPT --episodes 256 --seed 12345 --out eval.json
    python -m agents.evaluate RUN --env grid_height=48 grid_width=48 max_steps=400 --maps my_maps/
    python -m agents.evaluate RUN --temperature 0.3   # policy_sampled draws from softmax(logits / 0.3)

Every policy plays episode 0 of environments 0 .. episodes-1 of a fresh `UAVSwarmEnv` with the
given seed, so all of them see exactly the same maps. The task is the run's env config, with
`--env KEY=VALUE` overrides of any `EnvConfig` field and `--maps PATH`, a map set to play
(`uavsim.maps`); an actor that cannot play the task (its one-hot agent id is sized to the training
team, its window to its obs_radius) is an error saying so (`agents.evaluate.setup`). `meta` records
the checkpoint, seed, env config, `env_overrides` and the map set's files with the episodes of each
(`maps`, null without one). Written JSON:

    {"policy": {...}, "policy_sampled": {...}, "random": {...}, "greedy": {...}, "coordinated": {...},
     "paired_vs_greedy": {"policy": {...}, "policy_sampled": {...}},
     "paired_vs_coordinated": {"policy": {...}, "policy_sampled": {...}},
     "coverage_curve": {"policy": {"mean": [...], "q25": [...], "q75": [...]}, ...},
     "per_map": {"urban_block.txt": {"episodes": 85, "policy": {...}, ..., "paired_vs_greedy": {...}, ...}, ...},
     "meta": {...}}

each entry with `mean_coverage` (at episode end), `mean_steps_to_target` (`max_steps` where the
target was not reached), `target_reached`, `mean_collisions`, `mean_near_misses`, `mean_return`,
`mean_length`. `policy` takes the most likely action, `policy_sampled` samples (from
`softmax(logits / T)`, `--temperature T`, 1 by default: below 1 it keeps to the most likely
action where the policy is sure and still breaks the loops a deterministic policy can fall into
where it is not; `meta.temperature`); `greedy` and
`coordinated` are the scripted frontier baselines of `uavsim.policies`. A GIF and a PNG of the
first episode of the trained policy (most likely action) are written next to the JSON, and
`<out>_compare.gif`: greedy, coordinated and the trained policy (most likely action, and sampled)
side by side on that map. `paired_vs_greedy` and `paired_vs_coordinated` compare steps to target map by
map: the mean difference (negative: faster than the baseline), its standard error, and the counts
of maps where the policy was faster, equal or slower. `coverage_curve` holds each policy's
coverage at steps 0 .. max_steps over the maps (mean and quartiles; a map keeps its final coverage
once its episode ended), drawn in `<out>_coverage.png`: mean lines, interquartile bands.
With `--maps`, `per_map` gives every entry above (but the curves) again for each map of the set
that some episode drew, over those episodes only (printed as one line per map): a set's mean hides
the one layout where a policy stalls.

The baselines' results depend on the task, the maps, the device type and the code, not on the
checkpoint: they are kept in `--baseline-cache DIR` (default: `.baseline-cache` beside the run
directory) and read from there by the next evaluation on the same maps, which prints where each
came from (`agents.evaluate.baseline_cache`); `--no-baseline-cache` plays them, reading and
writing nothing. The JSON is the same either way.
"""

from __future__ import annotations

import argparse
import math
import sys

from agents.evaluate.baseline_cache import add_cache_arguments, cache_from_args
from agents.evaluate.episodes import POLICIES, evaluate_all
from agents.evaluate.report import summary_lines, write_report
from agents.evaluate.setup import add_protocol_arguments, add_task_arguments, load_setup, split_defaults, split_of
from uavsim.machine import hardware


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agents.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint", help="a run directory (its newest checkpoint) or a checkpoint file")
    add_protocol_arguments(p)  # --split, --episodes, --seed
    p.add_argument(
        "--out", default=None, help="JSON file (default: RUN_DIR/eval.json, or beside a checkpoint kept outside a run)"
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add_task_arguments(p)  # --env KEY=VALUE ..., --maps PATH
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="policy_sampled draws from softmax(logits / T) (default 1: the trained distribution)",
    )
    add_cache_arguments(p)  # --baseline-cache DIR, --no-baseline-cache
    args = p.parse_args(argv)
    split_defaults(args)
    if args.episodes < 1 or not 0 <= args.seed < 2**31:
        print("error: --episodes must be >= 1 and --seed in [0, 2**31)", file=sys.stderr)
        return 2
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        print(f"error: --temperature must be a finite number > 0, got {args.temperature}", file=sys.stderr)
        return 2
    from agents.run.process import pick_device

    try:
        device = pick_device(args.device, "--device")
        path, payload, env_cfg, actor, out, task = load_setup(args)  # the task: the run's env, --env, --maps
        cache = cache_from_args(args, path)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    actor.to(device).eval()
    print(
        hardware.banner(device, precision="fp32 (evaluation)", environments=f"{args.episodes} (one episode each)"),
        file=sys.stderr,
    )
    results, frames = evaluate_all(
        actor, env_cfg, args.episodes, args.seed, device, progress=None, temperature=args.temperature, cache=cache
    )
    results["meta"] = {
        "checkpoint": str(path),
        "env_steps": payload["env_steps"],
        "episodes": args.episodes,
        "seed": args.seed,
        "split": split_of(args.seed, args.episodes),  # --seed 20261126 --episodes 512 are the test maps too
        "env": env_cfg.to_dict(),
        "temperature": args.temperature,  # of policy_sampled
        **task,  # env_overrides, maps
    }
    title = f"{args.episodes} maps, seed {args.seed}, {payload['env_steps']} env steps of training"
    replaced = out.is_file()  # a validation's eval.json under a test run's, say: said, not silent
    written = write_report(out, results, frames, title, env_cfg.target_coverage)
    print("\n".join(summary_lines(results, POLICIES, args.episodes, env_cfg.target_coverage)))
    print("\n".join(cache.lines()) if cache is not None else "baselines played (--no-baseline-cache)")
    print(f"{'replaced' if replaced else 'wrote'} {', '.join(map(str, written))}")
    return 0
