"""Benchmark of agents.placement's data-parallel map against the usual ways to do the same, on real tiny models.

    python -m benchmarks.placement            # full run
    python -m benchmarks.placement --quick    # small sizes, well under a minute (used by CI)

Side by side in one run, on the same jobs and the same number of workers (2 CPU workers, 1 torch
thread each, by default): the local pool (``WorkerPool``) with 1 and 2 workers, its Ray backend,
Ray's own ``ray.util.ActorPool``, accelerate's ``split_between_processes`` under ``accelerate
launch``, and ``concurrent.futures.ProcessPoolExecutor``. Each builds the same worker object once
per process (benchmarks/placement_worker.py) and runs two jobs: no-op items (per-item overhead)
and tiny-CLIP scoring of image batches (items/s); start-up is reported on its own. Each round
starts every contender afresh; the medians of the rounds are reported. A contender that cannot
run here (Ray not installed, say) is kept in the results as skipped, with the reason. Also: the
machine's own 2-process ceiling, and the policy -> generator -> reward StagePipeline against the
same stages item by item. Writes benchmarks/results/placement-<machine>-<date>.{json,md,png}.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
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

from agents.placement import inventory_report
from agents.placement.pool.arguments import check_devices
from benchmarks.out_paths import OUT_DIR_HELP, free_stem, out_dir_arg
from benchmarks.placement_accelerate import Accelerate
from benchmarks.placement_contenders import LocalPool, ProcessPool, RayActorPool, RayBackend, Skip, measure, ray_session
from benchmarks.placement_pipeline import bench_stage_pipeline
from benchmarks.placement_report import machine_info, markdown, plot, versions
from benchmarks.placement_worker import make_jobs, spin
from uavsim.machine import hardware

SCHEMA_VERSION = 2
TARGETS = {"overhead_us_per_item_max": 1000.0, "speedup_2_vs_1_min": 1.8, "ray_backend_vs_actor_pool_max": 1.25}
QUICK = dict(reps=1, clip_items=12, clip_batch=8, echo_items=300, echo_batch_size=16, pipe_items=4, spin_s=0.3)
FULL = dict(reps=3, clip_items=64, clip_batch=16, echo_items=3000, echo_batch_size=16, pipe_items=12, spin_s=1.0)


def contender_specs(devices: list[str], quick: bool) -> list[dict[str, Any]]:
    """The rows, in the order each round runs them: key, label, class, workers' devices and threads."""
    n, cores = len(devices), os.cpu_count() or 1
    specs = [
        dict(key="local-1", label="local pool, 1 worker", cls=LocalPool, devices=devices[:1], threads=1),
        dict(key="local-1-all-threads", label=f"local pool, 1 worker × {cores} threads", cls=LocalPool,
             devices=devices[:1], threads=cores),
        dict(key="local-n", label=f"local pool, {n} workers", cls=LocalPool, devices=devices, threads=1),
        dict(key="process-pool", label=f"ProcessPoolExecutor, {n} processes", cls=ProcessPool, devices=devices,
             threads=1),
        dict(key="accelerate", label=f"accelerate split_between_processes, {n} processes", cls=Accelerate,
             devices=devices, threads=1),
        dict(key="ray-actor-pool", label=f"Ray ActorPool, {n} actors", cls=RayActorPool, devices=devices, threads=1,
             ray=True),
        dict(key="ray-backend", label=f"Ray backend, {n} workers", cls=RayBackend, devices=devices, threads=1,
             ray=True),
    ]  # fmt: skip
    for spec in specs:
        spec["skip"] = None
        if spec["key"] == "local-1-all-threads" and (devices[0] != "cpu" or cores == 1):
            spec["skip"] = "a CPU reference only: threads matter little to a GPU worker" if cores > 1 else "1 core"
        elif spec["key"] == "local-1-all-threads" and quick:
            spec["skip"] = "a reference of the full run only (--quick stays under a minute)"
    return specs


def cpu_ceiling(executor: concurrent.futures.Executor, n: int, iters: int) -> float:
    """How much faster ``n`` plain processes run ``n`` compute tasks than one process runs one.

    Independent of any pool: on an idle machine with ``n`` free cores it is ``n``; on a shared one
    it is what the other load leaves, the ceiling for any n-process speedup measured next to it.
    """
    start = time.perf_counter()
    executor.submit(spin, iters).result()
    one = time.perf_counter() - start
    start = time.perf_counter()
    for f in [executor.submit(spin, iters) for _ in range(n)]:
        f.result()
    return n * one / (time.perf_counter() - start)


def same_results(outputs: dict[str, list], jobs: dict[str, list], reference: list | None) -> bool:
    """The no-op items came back as sent, in order (batched too), and the CLIP scores equal the reference's."""
    sent = [payload for _, payload in jobs["echo"]]
    if any(outputs[job] != sent for job in ("echo", "echo_batched") if job in outputs):
        return False
    clip = outputs["clip"]
    return reference is None or (
        len(clip) == len(reference)
        and all(torch.allclose(torch.as_tensor(a), b, rtol=1e-4, atol=1e-5) for a, b in zip(clip, reference))
    )


def run_one(spec: dict, jobs: dict[str, list], row: dict, state: dict) -> None:
    """Start one contender afresh, time it (:func:`~benchmarks.placement_contenders.measure`), close it."""
    contender = spec["contender"]
    if isinstance(contender, Accelerate):
        record, outputs = contender.measure()  # timed inside its own processes
    else:
        record, outputs = measure(contender, jobs, jobs["clip"][:4], state["echo_batch_size"])
    state.setdefault("reference", outputs["clip"])  # the first row's scores: the local pool, 1 worker
    row["results_match"] = row.get("results_match", True) and same_results(outputs, jobs, state["reference"])
    for key, value in record.items():
        if key.endswith("_s"):
            row.setdefault(f"{key}_all", []).append(value)
    shown = {k: round(v, 4) for k, v in record.items() if isinstance(v, float)}
    print(f"  {spec['label']}: {json.dumps(shown)}", flush=True)


def run_round(specs: list[dict], jobs: dict[str, list], rows: dict[str, dict], state: dict) -> None:
    """One round: every contender that can run here; the Ray ones share one Ray instance, started
    after the others have finished (its processes stay out of their timings) and shut down after."""
    live = [s for s in specs if s["skip"] is None]
    for spec in live:
        if not spec.get("ray"):
            run_one(spec, jobs, rows[spec["key"]], state)
    on_ray = [s for s in live if s.get("ray")]
    if on_ray:
        with ray_session(max(s["threads"] * len(s["devices"]) for s in on_ray)) as init_s:
            state.setdefault("ray_init_s_all", []).append(init_s)
            for spec in on_ray:
                run_one(spec, jobs, rows[spec["key"]], state)


def summarize(specs: list[dict], rows: dict[str, dict], cfg: dict) -> dict[str, Any]:
    """Medians per row, rates, and the issue's targets (None where a row was skipped)."""
    for spec in specs:
        row = rows[spec["key"]]
        if spec["skip"] is not None:
            continue
        for key in ("startup_s", "echo_s", "clip_s"):
            row[key] = statistics.median(row[f"{key}_all"])
        row["echo_items_per_s"] = cfg["echo_items"] / row["echo_s"]
        row["overhead_us_per_item"] = 1e6 * row["echo_s"] / cfg["echo_items"]
        if "echo_batched_s_all" in row:
            row["echo_batched_s"] = statistics.median(row["echo_batched_s_all"])
            row["overhead_batched_us_per_item"] = 1e6 * row["echo_batched_s"] / cfg["echo_items"]
        row["clip_items_per_s"] = cfg["clip_items"] / row["clip_s"]
        row["clip_pairs_per_s"] = cfg["clip_items"] * cfg["clip_batch"] / row["clip_s"]
    ok = {k: r for k, r in rows.items() if "clip_s" in r}
    one, many = ok.get("local-1"), ok.get("local-n")
    for row in ok.values():
        row["clip_speedup_vs_local_1"] = one["clip_s"] / row["clip_s"]
    overheads = [r["overhead_us_per_item"] for r in (one, many)]
    summary: dict[str, Any] = {
        "local_overhead_us_per_item_max": max(overheads),
        "local_clip_speedup_n_vs_1": one["clip_s"] / many["clip_s"],
        "local_clip_speedup_n_vs_1_end_to_end": (one["startup_s"] + one["clip_s"])
        / (many["startup_s"] + many["clip_s"]),
    }
    targets: dict[str, Any] = {
        **TARGETS,
        "overhead_met": max(overheads) <= TARGETS["overhead_us_per_item_max"],
        "speedup_met": summary["local_clip_speedup_n_vs_1"] >= TARGETS["speedup_2_vs_1_min"],
        "ray_backend_met": None,
    }
    if "ray-backend" in ok and "ray-actor-pool" in ok:
        backend, actors = ok["ray-backend"], ok["ray-actor-pool"]
        for job in ("clip", "echo"):
            summary[f"ray_backend_vs_actor_pool_{job}"] = backend[f"{job}_s"] / actors[f"{job}_s"]
        targets["ray_backend_met"] = all(
            summary[f"ray_backend_vs_actor_pool_{job}"] <= TARGETS["ray_backend_vs_actor_pool_max"]
            for job in ("clip", "echo")
        )
    return {"summary": summary, "targets": targets}


def bench_contenders(devices: list[str], cfg: dict, quick: bool) -> dict[str, Any]:
    specs = contender_specs(devices, quick)
    rows: dict[str, dict] = {}
    for spec in specs:
        rows[spec["key"]] = {
            "label": spec["label"],
            "workers": len(spec["devices"]),
            "threads_per_worker": spec["threads"],
            "how": spec["cls"].how,
        }
        if spec["skip"] is None:
            try:
                spec["contender"] = spec["cls"](spec["devices"], spec["threads"], cfg)
                rows[spec["key"]]["how"] = spec["contender"].how
            except Skip as why:
                spec["skip"] = str(why)
        rows[spec["key"]]["skipped"] = spec["skip"]
        if spec["skip"] is not None:
            print(f"  {spec['label']}: skipped ({spec['skip']})", flush=True)
    jobs = make_jobs(cfg)
    n = len(devices)
    ceilings: list[float] = []
    state: dict[str, Any] = {"echo_batch_size": cfg["echo_batch_size"]}
    with contextlib.ExitStack() as stack:
        if devices[0] == "cpu":
            calib = concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
            stack.callback(calib.shutdown)
            per_iter = min(f.result() for f in [calib.submit(spin, 200) for _ in range(n)]) / 200
            iters = max(1, int(cfg["spin_s"] / max(per_iter, 1e-6)))
        for r in range(cfg["reps"]):
            print(f" round {r + 1} of {cfg['reps']}", flush=True)
            if devices[0] == "cpu":
                ceilings.append(cpu_ceiling(calib, n, iters))
            run_round(specs, jobs, rows, state)
    out = {"rows": rows, **summarize(specs, rows, cfg)}
    if state.get("ray_init_s_all"):
        out["summary"]["ray_init_s"] = statistics.median(state["ray_init_s_all"])
        out["summary"]["ray_init_s_all"] = state["ray_init_s_all"]
    if ceilings:
        out["summary"]["cpu_parallel_ceiling"] = statistics.median(ceilings)
        out["summary"]["cpu_parallel_ceiling_all"] = ceilings
    return out


def parse_devices(parser: argparse.ArgumentParser, value: str | None) -> list[str]:
    if value is None:
        return ["cpu", "cpu"]
    devices = [d.strip() for d in value.split(",") if d.strip()]
    if not devices:
        parser.error(f"--devices names no device: {value!r} (e.g. cpu,cpu or cuda:0,cuda:1)")
    try:  # checked before the inventory and the first pool, as the pool would check it later
        return check_devices(devices)
    except (TypeError, ValueError) as exc:
        parser.error(f"--devices {value!r}: {exc}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI): checks the outputs, not the speed")
    parser.add_argument(
        "--out-dir", type=out_dir_arg, default=Path(__file__).resolve().parent / "results", help=OUT_DIR_HELP
    )
    parser.add_argument(
        "--devices",
        default=None,
        help="comma-separated worker devices (default cpu,cpu; the baselines other than the local pool and the "
        "Ray backend run on CPU workers only and are skipped otherwise)",
    )
    args = parser.parse_args(argv)
    devices = parse_devices(parser, args.devices)
    print(hardware.banner(devices[0], workers=", ".join(devices)), file=sys.stderr)
    cfg = {**(QUICK if args.quick else FULL), "clip_image_size": 64}
    load_start = psutil.getloadavg()  # os.getloadavg is POSIX-only; psutil estimates it on Windows
    inventory_at_start = inventory_report()
    print(inventory_at_start, flush=True)
    print(f"contenders on {devices} ({'quick' if args.quick else 'full'}):", flush=True)
    contenders = bench_contenders(devices, cfg, args.quick)
    results = {"contenders": contenders, "stage_pipeline": bench_stage_pipeline(devices[0], cfg)}
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
        "targets": contenders.pop("targets"),
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"placement-{report['machine']['tag']}-{report['date'].replace('-', '')}" + ("-quick" if args.quick else "")
    stem = free_stem(out_dir, stem, (".json", ".md", ".png"))  # an earlier run's files of the day are kept
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(markdown(report), encoding="utf-8")
    plot(report, out_dir / f"{stem}.png")
    print(f"wrote {out_dir / stem}.json, .md and .png", flush=True)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
