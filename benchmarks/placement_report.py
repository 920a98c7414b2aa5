"""The placement benchmark's report: the machine it ran on, library versions, and the Markdown page
(`benchmarks.placement` measures; this renders what it measured)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from pathlib import Path

import torch

from agents.placement import inventory
from uavsim.machine import hardware


def _cores(m: dict) -> int:
    """The cores the run could use; files written before 2026-12-05 record the machine's only."""
    return m.get("usable_cores") or m["cpu_count"]


def machine_info(devices: list[str]) -> dict:
    inv = inventory()
    gpus = [d.name for d in inv.devices]
    if gpus:
        tag = f"cuda{len(gpus)}x" + re.sub(r"[^A-Za-z0-9]+", "", gpus[0].replace("NVIDIA", ""))[:16]
    else:
        tag = f"cpu{hardware.usable_cores()[0]}"  # the cores this process may use (taskset, quota), as it ran
    return {
        "tag": tag,
        "cpu_count": os.cpu_count(),
        "usable_cores": hardware.usable_cores()[0],
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


def _num(row: dict, key: str, fmt: str) -> str:
    return format(row[key], fmt) if key in row else "–"


def _met(value: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[value]


def contender_table(rows: dict[str, dict], cfg: dict) -> list[str]:
    lines = [
        "| contender | start-up s | no-op items/s | overhead µs/item | overhead µs/item, "
        f"batch_size={cfg['echo_batch_size']} | CLIP items/s (×{cfg['clip_batch']} pairs) | vs local pool, 1 worker "
        "| same results |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        if row.get("skipped"):
            lines.append(f"| {row['label']} | skipped: {row['skipped']} |||||||")
            continue
        lines.append(
            f"| {row['label']} | {_num(row, 'startup_s', '.2f')} | {_num(row, 'echo_items_per_s', ',.0f')} "
            f"| {_num(row, 'overhead_us_per_item', ',.0f')} | {_num(row, 'overhead_batched_us_per_item', ',.1f')} "
            f"| {_num(row, 'clip_items_per_s', '.1f')} "
            f"| {_num(row, 'clip_speedup_vs_local_1', '.2f')}x | {'yes' if row.get('results_match') else '**no**'} |"
        )
    return lines


def target_lines(report: dict) -> list[str]:
    c = report["results"]["contenders"]
    s, t, rows = c["summary"], report["targets"], c["rows"]
    n = rows["local-n"]["workers"]
    lines = [
        f"- Local pool, per-item overhead ≤ {t['overhead_us_per_item_max']:.0f} µs: {_met(t['overhead_met'])} "
        f"({rows['local-1']['overhead_us_per_item']:.0f} µs with 1 worker, "
        f"{rows['local-n']['overhead_us_per_item']:.0f} µs with {n}).",
        f"- Local pool, ≥ {t['speedup_2_vs_1_min']}x items/s with {n} workers vs 1 on CLIP scoring: "
        f"{_met(t['speedup_met'])} (**{s['local_clip_speedup_n_vs_1']:.2f}x**; "
        f"{s['local_clip_speedup_n_vs_1_end_to_end']:.2f}x end to end with the start-up)"
        + (
            f"; the machine ceiling, {n} plain processes of pure compute against one, was "
            f"{s['cpu_parallel_ceiling']:.2f}x during the run ({n}.00x on {n} idle cores)."
            if "cpu_parallel_ceiling" in s
            else "."
        ),
    ]
    if t["ray_backend_met"] is None:
        why = rows["ray-backend"].get("skipped") or rows["ray-actor-pool"].get("skipped")
        lines.append(
            f"- Ray backend within {t['ray_backend_vs_actor_pool_max']}x of Ray's ActorPool: not measured ({why})."
        )
    else:
        lines.append(
            f"- Ray backend within {t['ray_backend_vs_actor_pool_max']}x of Ray's ActorPool: "
            f"{_met(t['ray_backend_met'])} "
            f"(its time over ActorPool's: {s['ray_backend_vs_actor_pool_clip']:.2f}x on CLIP scoring, "
            f"{s['ray_backend_vs_actor_pool_echo']:.2f}x on no-op items)."
        )
    return lines


def markdown(report: dict) -> str:
    """The report as a Markdown page: the contenders' table, the targets, how each was measured, the stage pipeline."""
    c = report["results"]["contenders"]
    m, cfg, load = report["machine"], report["config"], report["load_average"]
    lines = [
        f"# agents.placement benchmark — {m['tag']}, {report['date']}" + (" (quick)" if report["quick"] else ""),
        "",
        f"{_cores(m)}-core {m['cpu']} ({m['cpu_class']}), torch {m['torch']} ({m['torch_build']}), "
        f"GPUs: {m['gpus'] or 'none'}; workers on {m['devices_used']}, 1 torch thread each unless the row says.",
        f"Load average {load['start']} at start, {load['end']} at end (1, 5, 15 min; it includes this run's own "
        "processes): the figures are what the other processes on this machine left to this run.",
        "",
        "## Data-parallel map: the local pool against the usual ways",
        "",
        f"Median of {cfg['reps']} round(s); each round starts every contender afresh. No-op: {cfg['echo_items']} "
        f"items that return their input; CLIP: {cfg['clip_items']} items of {cfg['clip_batch']} image-text pairs "
        f"({cfg['clip_image_size']} px) scored by a tiny random-weight CLIP.",
        "",
        *contender_table(c["rows"], cfg),
        "",
        *target_lines(report),
        "",
        "How each was measured. Start-up: from nothing until every worker has answered an item (so each has "
        "built its model). Then one warm-up map of 4 CLIP items, then each job timed on the warm workers: "
        "overhead = the no-op job's wall time / its items (start-up excluded), also with the items handed over in "
        "batches where the contender takes `batch_size` (agents.placement's pools), CLIP items/s = items / wall time. "
        "Same results: the no-op items came back in order and the CLIP scores equal the local pool's."
        + (
            f" `ray.init` took {c['summary']['ray_init_s']:.1f} s a round, not counted in any start-up."
            if "ray_init_s" in c["summary"]
            else ""
        ),
        "",
        *(f"- {row['label']}: {row['how']}" for row in c["rows"].values()),
        "",
        "Reading it: accelerate's processes each build every item and take a fixed contiguous share, so no item "
        "crosses a process boundary and its no-op overhead is one `gather_object` per job; it cannot rebalance (the "
        "slowest process holds up the job), retry an item, or take items that only the calling process has. Ray's "
        "ActorPool keeps one item in flight per actor, so each item waits out a round trip; the pools of "
        "agents.placement keep 2 per worker (`prefetch=2`) and take `batch_size=` to amortize the hand-over.",
        "",
        "## Stage pipeline (policy → generator → reward, threads in one process)",
        "",
        "| torch threads | item by item s | pipelined s | speedup | policy / generator / reward s | ideal |",
        "|---|---|---|---|---|---|",
    ]
    r = report["results"]["stage_pipeline"]["threads_1"]
    stages = " / ".join(f"{v:.3f}" for v in r["stage_s"].values())
    lines += [
        f"| 1 | {r['sequential_s']:.3f} | {r['pipeline_s']:.3f} | {r['speedup']:.2f}x | {stages} "
        f"| {r['ideal_speedup']:.2f}x |",
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


def plot(report: dict, path: Path) -> None:
    """Three panels per contender: start-up, per-item overhead (log scale), CLIP items/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = report["results"]["contenders"]["rows"]
    rows = list(by_key.values())
    ours = ["#4c72b0" if key.startswith("local") or key == "ray-backend" else "#999999" for key in by_key]
    labels = [r["label"] + (" (skipped)" if r.get("skipped") else "") for r in rows]
    panels = [
        ("startup_s", "start-up, s", False),
        ("overhead_us_per_item", "no-op overhead, µs/item (log)", True),
        ("clip_items_per_s", "CLIP scoring, items/s", False),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.45 * len(rows) + 1.6), sharey=True)
    y = list(range(len(rows)))[::-1]
    for ax, (key, title, log) in zip(axes, panels):
        values = [r.get(key, 0.0) for r in rows]
        ax.barh(y, values, color=ours)  # agents.placement in blue, the alternatives in grey
        for yi, v, r in zip(y, values, rows):
            if key in r:
                ax.text(v, yi, f" {v:,.3g}", va="center", fontsize=8)
        if log:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, labels, fontsize=8)
    m, load = report["machine"], report["load_average"]["start"]
    ceiling = report["results"]["contenders"]["summary"].get("cpu_parallel_ceiling")
    fig.suptitle(
        f"agents.placement vs alternatives — {_cores(m)}-core {m['cpu']}, {report['date']}, load {load[0]} at "
        "start"
        + (f", 2 plain processes ran {ceiling:.2f}x one" if ceiling else "")
        + (" (quick)" if report["quick"] else ""),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Render a results JSON again: ``python -m benchmarks.placement_report placement-....json``
    rewrites the ``.md`` and ``.png`` beside it (after a change to this page, without measuring again)."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    args = parser.parse_args(argv)
    report = json.loads(args.json.read_text(encoding="utf-8"))
    args.json.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    plot(report, args.json.with_suffix(".png"))
    print(f"wrote {args.json.with_suffix('.md')} and .png")


if __name__ == "__main__":
    main(sys.argv[1:])
