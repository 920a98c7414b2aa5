"""What one call of the coordinated planner costs, before and after issue 48, side by side.

    python -m benchmarks.planner_cost                     # 64 and 1,024 environments
    python -m benchmarks.planner_cost --num-envs 64 --calls 4

For each task (``EnvConfig()`` and the env section of configs/default.yaml) and batch size: the
planner plays ``--warmup`` steps from reset (so that coverage, and the auction's work, vary across
the batch), then, for ``--calls`` steps, the frozen planner of before (tests/uavsim/
coordinated_reference.py) and the library's (`uavsim.coordinated`) each plan the same state: kernels
and host syncs counted by `benchmarks.op_count.OpCounter` (the rules of `benchmarks.step_cost`),
and the wall time of a call (its median over ``--repeats`` timed calls per step). Both must return
the same targets and moves on every call (checked here; the test suite checks it on many more maps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import RESULTS_DIR, machine_info, setup_host, write_results
from benchmarks.op_count import OpCounter
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg
from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.coordinated import CoordinatedFrontierPolicy

ROOT = Path(__file__).resolve().parents[1]  # the repository: its preset, and the planner of before in tests/


def tasks() -> dict[str, EnvConfig]:
    from agents.config import load_config

    return {
        "EnvConfig()": EnvConfig(),
        "configs/default.yaml": load_config(ROOT / "configs" / "default.yaml").env_config(),
    }


def planners(env: UAVSwarmEnv) -> dict[str, Any]:
    if str(ROOT) not in sys.path:  # the planner of before is a test's reference, not a package's module
        sys.path.append(str(ROOT))
    from tests.uavsim.coordinated_reference import ReferenceCoordinatedFrontierPolicy

    return {"before": ReferenceCoordinatedFrontierPolicy(env, seed=0), "after": CoordinatedFrontierPolicy(env, seed=0)}


def measure_task(cfg: EnvConfig, num_envs: int, args) -> dict[str, Any]:
    env = UAVSwarmEnv(cfg, num_envs=num_envs, seed=0, device=args.device)
    env.reset()
    plans = planners(env)
    for _ in range(args.warmup):
        env.step(plans["after"](env))
    plans["before"].calls = plans["after"].calls
    rows: dict[str, dict[str, list]] = {name: {"kernels": [], "host_syncs": [], "ms": []} for name in plans}
    for _ in range(args.calls):
        results = {}
        for name, policy in plans.items():
            with OpCounter() as count:
                results[name] = policy.plan(env)
            times = []
            for _ in range(args.repeats):  # the same call again: the counter goes back each time
                policy.calls -= 1
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                start = time.perf_counter()
                policy.plan(env)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            rows[name]["kernels"].append(count.kernels)
            rows[name]["host_syncs"].append(count.host_syncs)
            rows[name]["ms"].append(1e3 * statistics.median(times))
        same = all(torch.equal(a, b) for a, b in zip(results["before"], results["after"]))
        if not same:
            raise AssertionError(f"the planners disagree on a call ({num_envs} environments)")
        env.step(plans["after"](env))
        plans["before"].calls += 1
    out = {
        name: {
            "kernels_per_call": statistics.mean(r["kernels"]),
            "kernels_min": min(r["kernels"]),
            "kernels_max": max(r["kernels"]),
            "host_syncs_per_call": statistics.mean(r["host_syncs"]),
            "host_syncs_max": max(r["host_syncs"]),
            "ms_per_call": statistics.median(r["ms"]),
        }
        for name, r in rows.items()
    }
    after = plans["after"]
    out["after"].update(search_rounds=after.search_rounds, deeper_calls=after.deeper_calls)
    return out


def table(payload: dict[str, Any]) -> str:
    lines = [
        f"# Coordinated planner, one call: before / after issue 48 ({payload['machine']['cpu']}, "
        f"{payload['settings']['device']}, torch {payload['machine']['torch']})",
        "",
        "| task | envs | kernels | host syncs | ms per call | search rounds (calls searching deeper) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in payload["rows"]:
        b, a = row["before"], row["after"]
        lines.append(
            f"| {row['task']} | {row['num_envs']} | {b['kernels_per_call']:.0f} -> {a['kernels_per_call']:.0f} "
            f"({a['kernels_min']}-{a['kernels_max']}) | {b['host_syncs_per_call']:.0f} -> "
            f"{a['host_syncs_per_call']:.0f} (max {a['host_syncs_max']}) | {b['ms_per_call']:.1f} -> "
            f"{a['ms_per_call']:.1f} | {a['search_rounds']} ({a['deeper_calls']}) |"
        )
    s = payload["settings"]
    lines += [
        "",
        f"Per call: mean over {s['calls']} steps after {s['warmup']} steps of play from reset; time: the median "
        f"of {s['repeats']} repeats per step, then over the steps. The same targets and moves on every call.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--calls", type=int, default=6, help="counted and timed steps per task and batch size")
    parser.add_argument("--warmup", type=int, default=20, help="steps played from reset before counting")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of each counted call")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = parser.parse_args(argv)
    for name in ("calls", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0 or min(args.num_envs) < 1:
        parser.error("--warmup must be >= 0 and --num-envs >= 1")
    if args.device != "cpu" and not (args.device.startswith("cuda") and torch.cuda.is_available()):
        parser.error(f"--device {args.device}: expected cpu, or cuda[:N] where torch ({torch.__version__}) sees a GPU")
    setup_host(args.threads, args.device)
    rows = [
        {"task": task, "num_envs": b, **measure_task(cfg, b, args)}
        for task, cfg in tasks().items()
        for b in args.num_envs
    ]
    payload = {
        "benchmark": "planner_cost",
        "machine": machine_info(args.device),
        "settings": {k: getattr(args, k) for k in ("num_envs", "calls", "warmup", "repeats", "threads", "device")},
        "rows": rows,
    }
    full = (args.num_envs, args.calls, args.warmup, args.repeats) == ([64, 1024], 6, 20, 3)
    return write_results("planner_cost", payload, table(payload), None, args.out_dir, subset=not full)


if __name__ == "__main__":
    main()
