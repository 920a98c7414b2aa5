"""Benchmark of agents.placement on real tiny models: dp_map scaling and overhead, stage pipeline.

    python -m benchmarks.placement            # full run
    python -m benchmarks.placement --quick    # small sizes, well under a minute (used by CI)

Measures, in one run and side by side:
- dp_map per-item overhead on no-op items (warm pool, 1 and N workers);
- tiny-CLIP scoring through dp_map: 1 worker with 1 thread, 1 worker with all threads, N workers
  with 1 thread each (N = 2 CPU workers, or every GPU), steady state and end to end (with start-up);
- DDPM generation + CLIP scoring per prompt through dp_map, 1 vs N workers;
- the policy -> generator -> reward StagePipeline against the same stages run item by item.
Writes benchmarks/results/placement-<machine>-<date>.json and a Markdown table next to it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
import functools
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from agents.placement import Stage, StagePipeline, WorkerPool, inventory_report
from agents.placement.dp import check_devices
from benchmarks.placement_report import machine_info, markdown, versions
from uavsim import hardware

SCHEMA_VERSION = 1


# ------------------------------------------------------------------ worker side (spawned children)
class BenchWorker:
    """One worker serving every workload of the benchmark, so each pool is started only once.

    Items are ``(kind, payload)``: ``("echo", x)`` returns x, ``("clip", batch)`` CLIP-scores a
    batch, ``("gen", prompt_ids)`` generates images with the DDPM and scores them.
    """

    def __init__(self, device: torch.device, clip_image_size: int, gen_steps: int):
        from agents.placement import toy  # imports diffusers/transformers: only in the workers

        self.clip = toy.make_clip_scorer(device, image_size=clip_image_size)
        self.gen = toy.make_generate_and_score(device, steps=gen_steps)

    def __call__(self, item: tuple[str, Any]) -> Any:
        kind, payload = item
        if kind == "echo":
            return payload
        if kind == "clip":
            return self.clip(payload)
        if kind == "gen":
            return self.gen(payload)["scores"]
        raise ValueError(f"unknown benchmark item kind {kind!r}")


def make_bench_worker(device: torch.device, *, clip_image_size: int = 64, gen_steps: int = 4) -> BenchWorker:
    """dp_map worker factory for the benchmark (module-level so spawned workers can import it)."""
    return BenchWorker(device, clip_image_size, gen_steps)


# ------------------------------------------------------------------ measurements
def spin(iters: int) -> float:
    """Pure single-threaded compute (small matmuls) for ``iters`` rounds; returns its own seconds."""
    torch.set_num_threads(1)
    a = torch.randn(128, 128) / 12
    start = time.perf_counter()
    for _ in range(iters):
        a = torch.tanh(a @ a)
    return time.perf_counter() - start


def cpu_ceiling(executor: concurrent.futures.Executor, n: int, iters: int) -> float:
    """How much faster ``n`` plain processes run ``n`` compute tasks than one process runs one.

    Independent of dp_map: on an idle machine with ``n`` free cores it is ``n``; on a shared one it
    is what the other load leaves, the ceiling for any n-process speedup measured next to it.
    """
    start = time.perf_counter()
    executor.submit(spin, iters).result()
    one = time.perf_counter() - start
    start = time.perf_counter()
    for f in [executor.submit(spin, iters) for _ in range(n)]:
        f.result()
    return n * one / (time.perf_counter() - start)


def timed_map(pool: WorkerPool, items: list) -> float:
    start = time.perf_counter()
    pool.map(items, progress=False)
    return time.perf_counter() - start


def start_pool(devices: list[str], threads: int, cfg: dict) -> tuple[WorkerPool, float]:
    """A started pool and the seconds until every worker has built its models (one echo each)."""
    start = time.perf_counter()
    make = functools.partial(make_bench_worker, clip_image_size=cfg["clip_image_size"], gen_steps=cfg["gen_steps"])
    pool = WorkerPool(make, devices, threads_per_worker=threads, prefetch=2)
    pool.map([("echo", i) for i in range(len(devices) * 2)], progress=False)
    return pool, time.perf_counter() - start


def bench_pools(devices: list[str], cfg: dict) -> dict:
    """All pools are started first and then timed in turns, ``cfg["reps"]`` times each, so that
    the machine's other load falls on every configuration alike; the medians are reported."""
    from agents.placement import toy

    n = len(devices)
    cores = os.cpu_count() or 1
    clip_items = [
        ("clip", b) for b in toy.random_clip_items(cfg["clip_items"], cfg["clip_batch"], cfg["clip_image_size"])
    ]
    gen_items = [("gen", p) for p in toy.random_prompts(cfg["gen_items"], batch=1, seed=3)]
    echo_items = [("echo", i) for i in range(cfg["echo_items"])]
    configs = [("1 worker, 1 thread", [devices[0]], 1)]
    if devices[0] == "cpu" and cores > 1:  # threads matter little for GPU workers; skip that pool there
        configs.append((f"1 worker, {cores} threads", [devices[0]], cores))
    configs.append((f"{n} workers, 1 thread each", devices, 1))
    all_label = f"1 worker, {cores} threads"

    pools: dict[str, WorkerPool] = {}
    out: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        for label, devs, threads in configs:
            pools[label], startup = start_pool(devs, threads, cfg)
            stack.callback(pools[label].close)
            out[label] = {"workers": len(devs), "threads_per_worker": threads, "startup_s": startup}
            timed_map(pools[label], clip_items[: len(devs) * 2])  # warm-up: first calls allocate
            timed_map(pools[label], gen_items[: len(devs)])
        times: dict[tuple[str, str], list[float]] = {}
        ceilings: list[float] = []
        if devices[0] == "cpu":
            calib = concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
            stack.callback(calib.shutdown)
            # start all n calibration processes now (the executor spawns them on demand)
            per_iter = min(f.result() for f in [calib.submit(spin, 200) for _ in range(n)]) / 200
            iters = max(1, int(cfg["spin_s"] / max(per_iter, 1e-6)))
        for _ in range(cfg["reps"]):
            if devices[0] == "cpu":
                ceilings.append(cpu_ceiling(calib, n, iters))
            for label in pools:
                for kind, items in (("clip", clip_items), ("echo", echo_items), ("gen", gen_items)):
                    if label == all_label and kind != "clip":
                        continue  # the all-threads worker is only a reference for CLIP scoring
                    times.setdefault((label, kind), []).append(timed_map(pools[label], items))
    for (label, kind), ts in times.items():
        out[label][f"{kind}_s"] = statistics.median(ts)
        out[label][f"{kind}_s_all"] = ts
    for label, rec in out.items():
        if "echo_s" in rec:
            rec["echo_us_per_item"] = 1e6 * rec["echo_s"] / len(echo_items)
        shown = {k: round(v, 4) for k, v in rec.items() if isinstance(v, float)}
        print(f"  {label}: {json.dumps(shown)}", flush=True)

    one, many = out["1 worker, 1 thread"], out[f"{n} workers, 1 thread each"]
    summary = {
        "reps": cfg["reps"],
        "clip_items": len(clip_items),
        "clip_per_item_ms_1_worker": 1e3 * one["clip_s"] / len(clip_items),
        "clip_speedup_steady": one["clip_s"] / many["clip_s"],
        "clip_speedup_end_to_end": (one["startup_s"] + one["clip_s"]) / (many["startup_s"] + many["clip_s"]),
        "gen_items": len(gen_items),
        "gen_per_item_ms_1_worker": 1e3 * one["gen_s"] / len(gen_items),
        "gen_speedup_steady": one["gen_s"] / many["gen_s"],
        "echo_items": len(echo_items),
        "overhead_us_per_item_1_worker": one["echo_us_per_item"],
        f"overhead_us_per_item_{n}_workers": many["echo_us_per_item"],
    }
    if all_label in out:
        summary["clip_speedup_vs_1_worker_all_threads"] = out[all_label]["clip_s"] / many["clip_s"]
    if ceilings:
        summary["cpu_parallel_ceiling"] = statistics.median(ceilings)
        summary["cpu_parallel_ceiling_all"] = ceilings
    return {"runs": out, "summary": summary}


def bench_stage_pipeline(device: str, cfg: dict) -> dict:
    from agents.placement import toy

    prompts = toy.random_prompts(cfg["pipe_items"], batch=2, seed=5)
    # sizes chosen so the three stages take similar time on a CPU core (~20-40 ms per item):
    # overlap can only hide stages behind the slowest one
    policy = toy.PromptPolicy(toy.tiny_policy_lm(hidden=384, layers=6), device)
    generator = toy.ImageGenerator(toy.tiny_ddpm(), device, steps=1)
    reward = toy.ClipReward(toy.tiny_clip(image_size=32, hidden=384, layers=6), device)
    pipe = StagePipeline(
        [Stage(policy, device, "policy"), Stage(generator, device, "generator"), Stage(reward, device, "reward")]
    )
    out: dict[str, Any] = {"items": len(prompts), "device": device}
    saved = torch.get_num_threads()
    try:
        # one torch thread: with several, the stage threads' OpenMP teams fight over the cores
        for threads in (1,):
            torch.set_num_threads(threads)
            [reward(generator(policy(p))) for p in prompts[:1]]  # warm-up
            stage_s = [0.0, 0.0, 0.0]
            sequential = []
            start = time.perf_counter()
            for p in prompts:
                value = p
                for k, fn in enumerate((policy, generator, reward)):
                    t0 = time.perf_counter()
                    value = fn(value)
                    stage_s[k] += time.perf_counter() - t0
                sequential.append(value)
            t_seq = time.perf_counter() - start
            start = time.perf_counter()
            piped = pipe.run(prompts)
            t_pipe = time.perf_counter() - start
            assert all(torch.allclose(a, b) for a, b in zip(sequential, piped)), "pipeline changed the results"
            out[f"threads_{threads}"] = {
                "sequential_s": t_seq,
                "pipeline_s": t_pipe,
                "speedup": t_seq / t_pipe,
                "stage_s": dict(zip(("policy", "generator", "reward"), stage_s)),
                # overlap can at best hide every stage behind the slowest one
                "ideal_speedup": sum(stage_s) / max(stage_s),
            }
            print(
                f"  stage pipeline, {threads} torch thread(s): item by item {t_seq:.3f} s, pipelined {t_pipe:.3f} s "
                f"(stages {', '.join(f'{v:.3f}' for v in stage_s)} s; ideal {sum(stage_s) / max(stage_s):.2f}x)",
                flush=True,
            )
    finally:
        torch.set_num_threads(saved)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI): checks the outputs, not the speed")
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument(
        "--devices", default=None, help="comma-separated worker devices (default: every GPU, else cpu,cpu)"
    )
    args = parser.parse_args(argv)

    if args.devices is not None:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
        if not devices:
            parser.error(f"--devices names no device: {args.devices!r} (e.g. cpu,cpu or cuda:0,cuda:1)")
        try:  # checked before the inventory and the first pool, as the pool would check it later
            devices = check_devices(devices)
        except (TypeError, ValueError) as exc:
            parser.error(f"--devices {args.devices!r}: {exc}")
    elif torch.cuda.is_available() and torch.cuda.device_count() > 0:
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        devices = ["cpu", "cpu"]
    print(hardware.banner(devices[0], workers=", ".join(devices)), file=sys.stderr)
    if args.quick:
        cfg = dict(
            reps=1,
            clip_items=12,
            clip_batch=8,
            gen_items=4,
            gen_steps=2,
            echo_items=300,
            pipe_items=4,
            spin_s=0.3,
        )
    else:
        cfg = dict(
            reps=3,
            clip_items=64,
            clip_batch=16,
            gen_items=16,
            gen_steps=4,
            echo_items=3000,
            pipe_items=12,
            spin_s=1.0,
        )
    cfg["clip_image_size"] = 64
    load_start = psutil.getloadavg()  # os.getloadavg is POSIX-only; psutil estimates it on Windows
    inventory_at_start = inventory_report()
    print(inventory_at_start, flush=True)
    print(f"dp_map on {devices} ({'quick' if args.quick else 'full'}):", flush=True)
    results = {"dp_map": bench_pools(devices, cfg), "stage_pipeline": bench_stage_pipeline(devices[0], cfg)}
    s = results["dp_map"]["summary"]
    report = {
        "benchmark": "placement",
        "schema_version": SCHEMA_VERSION,
        "date": dt.date.today().isoformat(),
        "quick": args.quick,
        "config": cfg,
        "machine": machine_info(devices),
        "versions": versions(),
        "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in psutil.getloadavg()]},
        "inventory": inventory_at_start,
        "results": results,
        "targets": {
            "clip_speedup_2_cpu_workers_min": 1.7,
            "clip_speedup_met": s["clip_speedup_steady"] >= 1.7,
            "overhead_us_per_item_max": 1000.0,
            "overhead_met": max(s["overhead_us_per_item_1_worker"], s[f"overhead_us_per_item_{len(devices)}_workers"])
            < 1000.0,
        },
        "notes": "The 1-worker baseline uses 1 torch thread, like each of the N workers; the 1-worker "
        "all-threads figure is given too. Steady state = warm pool (models built, first batch done); "
        "pools are timed in turns and the median of `reps` runs is reported. Overhead = wall time per "
        "no-op item through a warm pool.",
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"placement-{report['machine']['tag']}-{report['date'].replace('-', '')}" + ("-quick" if args.quick else "")
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown(report))
    print(f"wrote {out_dir / stem}.json and .md", flush=True)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
