"""An env step before and after a change, timed in one process, step by step in turn.

    python -m benchmarks.env_ab 5746b83                     # the working tree's uavsim against that commit's
    python -m benchmarks.env_ab HEAD~2 --envs 64 1024 --threads 1 2 --steps 1000

A shared VM's speed drifts by more than a change of a tenth between two runs a minute apart (pairs of
whole processes gave ratios from 0.6 to 1.1 for one change, 2026-12-04). Here both trees step in one
process, alternately, the order swapped every step, so drift falls on both alike. The commit's
``uavsim/`` is read with ``git archive`` into a temporary folder as package ``uavsim_base`` (its
imports renamed), beside the working tree's ``uavsim``. Both envs get the same task (``--config``'s
env section, the default preset's by default), the same staggered episode phases
(`benchmarks.cost_common.stagger`) and the same actions; each step's observations, final
observations, rewards and ends are compared, and the result says whether they were equal
throughout (a change meant to keep the rules' values must keep them), and then counts a whole period of
each env's rebuilds of prepared starts (kernels and bytes, `benchmarks.op_count`'s model: what the two
launch on a GPU). Prints one line per point and, with ``--out``, writes them as JSON with the
machine's description."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import machine_info
from benchmarks.cost_common import count_calls, stagger
from benchmarks.out_paths import out_file_arg
from benchmarks.step_cost import PRESET, preset_env_config

ROOT = Path(__file__).resolve().parents[1]
BASE_PACKAGE = "uavsim_base"


def base_package(commit: str, folder: Path) -> ModuleType:
    """``uavsim`` at ``commit`` (of this repository) imported as `BASE_PACKAGE` from ``folder``."""
    try:
        tar = subprocess.run(
            ["git", "archive", "--format=tar", commit, "uavsim"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except FileNotFoundError as e:
        raise RuntimeError("benchmarks.env_ab reads the base commit with git, which is not on PATH") from e
    except subprocess.CalledProcessError as e:
        raise ValueError(f"cannot read uavsim at {commit!r}: {e.stderr.decode(errors='replace').strip()}") from e
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    package = folder / BASE_PACKAGE
    (folder / "uavsim").rename(package)
    for path in package.rglob("*.py"):
        path.write_text(re.sub(r"\buavsim\b", BASE_PACKAGE, path.read_text(encoding="utf-8")), encoding="utf-8")
    for name in [m for m in sys.modules if m == BASE_PACKAGE or m.startswith(BASE_PACKAGE + ".")]:
        del sys.modules[name]  # an earlier call's commit
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(BASE_PACKAGE)
    finally:
        sys.path.remove(str(folder))


def working_tree() -> str:
    """The working tree's commit, ``-dirty`` if it has changes (``git describe``)."""
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def base_commit(revision: str) -> str:
    """The commit ``revision`` names now (``git rev-parse --short``), or "unknown"."""
    done = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def same_step(a: tuple, b: tuple) -> bool:
    """Whether two `env.step` results hold the same observations, final observations, rewards and ends."""
    obs_a, reward_a, term_a, trunc_a, info_a = a
    obs_b, reward_b, term_b, trunc_b, info_b = b
    tensors = [(obs_a[k], obs_b[k]) for k in obs_a] + [(info_a["final_obs"][k], info_b["final_obs"][k]) for k in obs_a]
    tensors += [(reward_a, reward_b), (term_a, term_b), (trunc_a, trunc_b)]
    return all(torch.equal(x, y) for x, y in tensors)


def compare(base: ModuleType, cfg: Any, num_envs: int, threads: int, steps: int, warmup: int = 36) -> dict[str, Any]:
    """One point: ms per step of each tree, their ratio (after / before) and whether every step agreed."""
    torch.set_num_threads(threads)
    try:
        base_cfg = base.EnvConfig(**dataclasses.asdict(cfg))
    except TypeError as e:
        raise ValueError(f"the base commit's EnvConfig does not take this task's fields: {e}") from e
    envs = {
        name: stagger(package.UAVSwarmEnv(c, num_envs=num_envs, seed=0, check_action_range=False), 100)
        for name, package, c in (("before", base, base_cfg), ("after", importlib.import_module("uavsim"), cfg))
    }
    gen = torch.Generator().manual_seed(0)
    seconds = {"before": 0.0, "after": 0.0}
    equal = True
    for i in range(warmup + steps):
        actions = torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen)
        out = {}
        for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
            start = time.perf_counter()
            out[name] = envs[name].step(actions)
            if i >= warmup:
                seconds[name] += time.perf_counter() - start
        equal = equal and same_step(out["before"], out["after"])
    before, after = (seconds[k] / steps * 1e3 for k in ("before", "after"))
    counts = {}
    for name, env in envs.items():  # then a whole period of rebuilds of each, counted (`benchmarks.step_cost`'s model)
        period = max(1, env.prepare_period)
        actions = [torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen) for _ in range(period)]
        per_call = count_calls(lambda i: env.step(actions[i]), period, num_envs)  # noqa: B023 -- called here
        counts[name] = {"kernels": per_call["kernels_per_call"], "bytes_per_env_step": per_call["bytes_per_env_step"]}
    return {
        "envs": num_envs,
        "threads": threads,
        "steps": steps,
        "before_ms": round(before, 4),
        "after_ms": round(after, 4),
        "ratio": round(after / before, 4),
        "equal_every_step": equal,
        "counts": counts,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare the working tree's uavsim with (any git revision)")
    parser.add_argument("--config", type=Path, default=PRESET, help="a trainer config whose env section is the task")
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=1000, help="timed steps a point (after 36 untimed ones)")
    parser.add_argument("--out", type=out_file_arg, help="a JSON file for the points and the machine")
    args = parser.parse_args(argv)
    for name in ("envs", "threads"):
        if min(getattr(args, name)) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.steps < 1:
        parser.error(f"--steps must be positive, got {args.steps}")
    if not args.config.is_file():
        parser.error(f"--config {args.config} is not a file (a trainer config whose env is the task)")
    cfg = preset_env_config(args.config)
    points = []
    with tempfile.TemporaryDirectory() as folder:
        try:
            base = base_package(args.base, Path(folder))
        except ValueError as err:  # a revision git does not know: its own message, not a traceback
            parser.error(str(err))
        for num_envs in args.envs:
            for threads in args.threads:
                point = compare(base, cfg, num_envs, threads, args.steps)
                points.append(point)
                agreed = "equal" if point["equal_every_step"] else "NOT equal"
                kernels = " -> ".join(f"{point['counts'][k]['kernels']:.1f}" for k in ("before", "after"))
                print(
                    f"{num_envs} envs, {threads} threads: {point['before_ms']:.3f} -> {point['after_ms']:.3f} ms "
                    f"a step ({point['ratio']:.3f}x), {agreed} every step; kernels a step {kernels}"
                )
    if args.out:
        config = args.config.resolve()
        payload = {
            "base": args.base,
            "base_commit": base_commit(args.base),  # `HEAD~3` names another commit once more are made
            "after": working_tree(),
            "config": config.relative_to(ROOT).as_posix() if config.is_relative_to(ROOT) else str(config),
            "machine": machine_info(),
            "points": points,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return points


if __name__ == "__main__":
    main()
