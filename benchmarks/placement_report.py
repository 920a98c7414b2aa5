"""The placement benchmark's report: the machine it ran on, library versions, and the Markdown page
(`benchmarks.placement` measures; this renders what it measured)."""

from __future__ import annotations

import os
import platform
import re

import torch

from agents.placement import inventory
from uavsim import hardware


def machine_info(devices: list[str]) -> dict:
    inv = inventory()
    gpus = [d.name for d in inv.devices]
    if gpus:
        tag = f"cuda{len(gpus)}x" + re.sub(r"[^A-Za-z0-9]+", "", gpus[0].replace("NVIDIA", ""))[:16]
    else:
        tag = f"cpu{os.cpu_count()}"
    return {
        "tag": tag,
        "cpu_count": os.cpu_count(),
        "cpu": hardware.cpu_model(),
        "cpu_class": hardware.cpu_class(),
        "torch_build": hardware.torch_build(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpus": gpus,
        "host_memory_bytes": inv.host_total,
        "devices_used": devices,
    }


def versions() -> dict:
    import diffusers
    import transformers

    return {"diffusers": diffusers.__version__, "transformers": transformers.__version__}


def _cell(rec: dict, key: str, digits: int = 3) -> str:
    return f"{rec[key]:.{digits}f}" if key in rec else "–"


def markdown(report: dict) -> str:
    """The report as a Markdown page: the dp_map table, the headline ratios, the stage pipeline."""
    s = report["results"]["dp_map"]["summary"]
    runs = report["results"]["dp_map"]["runs"]
    m = report["machine"]
    n = len(m["devices_used"])
    load = report["load_average"]
    lines = [
        f"# agents.placement benchmark — {m['tag']}, {report['date']}" + (" (quick)" if report["quick"] else ""),
        "",
        f"torch {m['torch']}, {m['cpu_count']} CPU cores, GPUs: {m['gpus'] or 'none'}; workers on {m['devices_used']}.",
        f"Load average {load['start']} at start, {load['end']} at end (1, 5, 15 min; it includes this run's own "
        "processes): the ratios below are what the other processes on this machine left to this run.",
        "",
        "## dp_map",
        "",
        f"Median of {s['reps']} timed run(s) per configuration, pools timed in turns on warm workers.",
        "",
        "| configuration | start-up s | CLIP scoring s | DDPM+CLIP s | no-op overhead µs/item |",
        "|---|---|---|---|---|",
    ]
    for label, r in runs.items():
        lines.append(
            f"| {label} | {_cell(r, 'startup_s')} | {_cell(r, 'clip_s')} | {_cell(r, 'gen_s')} "
            f"| {_cell(r, 'echo_us_per_item', 0)} |"
        )
    all_threads = s.get("clip_speedup_vs_1_worker_all_threads")
    lines += [
        "",
        f"- CLIP scoring ({s['clip_items']} items, {s['clip_per_item_ms_1_worker']:.1f} ms/item on one 1-thread "
        f"worker): **{s['clip_speedup_steady']:.2f}x** with {n} workers vs 1 worker with 1 thread; "
        f"{s['clip_speedup_end_to_end']:.2f}x end to end including worker start-up"
        + (f"; {all_threads:.2f}x vs 1 worker using all threads" if all_threads is not None else "")
        + ".",
        *(
            [
                f"- Machine ceiling: {n} plain processes of pure compute ran {s['cpu_parallel_ceiling']:.2f}x faster "
                f"than one (median of {s['reps']}, measured between the timings above; {n}.00x on {n} idle cores)."
            ]
            if "cpu_parallel_ceiling" in s
            else []
        ),
        f"- DDPM generation + CLIP scoring ({s['gen_items']} prompts, {s['gen_per_item_ms_1_worker']:.0f} ms/prompt "
        f"on one worker): **{s['gen_speedup_steady']:.2f}x** with {n} workers.",
        f"- Overhead per no-op item ({s['echo_items']} items, warm pool): "
        f"{s['overhead_us_per_item_1_worker']:.0f} µs with 1 worker, "
        f"{s[f'overhead_us_per_item_{n}_workers']:.0f} µs with {n} workers.",
        "",
        "## Stage pipeline (policy → generator → reward, threads in one process)",
        "",
        "| torch threads | item by item s | pipelined s | speedup | policy / generator / reward s | ideal |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in report["results"]["stage_pipeline"].items():
        if key.startswith("threads_"):
            stages = " / ".join(f"{v:.3f}" for v in r["stage_s"].values())
            lines.append(
                f"| {key.split('_')[1]} | {r['sequential_s']:.3f} | {r['pipeline_s']:.3f} | {r['speedup']:.2f}x "
                f"| {stages} | {r['ideal_speedup']:.2f}x |"
            )
    lines += [
        "",
        "Ideal = sum of the stage times / the slowest stage: the most that overlap can give.",
        "",
        "Inventory at start:",
        "",
        "```",
        report["inventory"],
        "```",
        "",
    ]
    return "\n".join(lines)
