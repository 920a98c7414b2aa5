"""The environment-throughput benchmark's report: its Markdown table and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import cpu_label, fmt_rate


def table(payload: dict[str, Any], *, model_envs: int, reference_loop_max: int) -> str:
    """The Markdown report of `payload`; the keywords are the benchmark's settings it explains."""
    m = payload["machine"]
    lines = [
        f"# Environment throughput ({'quick' if payload['quick'] else 'full'})",
        "",
        f"CPU: {cpu_label(m)}, torch threads {payload['threads']}"
        + (f"; GPU: {m['gpu']}" if "gpu" in m else "; no GPU")
        + f"; torch {m['torch']}; {m['date']}",
        "",
        "| backend | envs | env-steps/s | UAV-steps/s | x reference loop | x VMAS (CPU) | peak RSS MiB | CUDA MiB "
        "| BW fraction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in payload["results"]:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['num_envs']} | failed: {r['error'][:60]} | | | | | | |")
            continue
        fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)  # noqa: E731
        lines.append(
            f"| {r['backend']} | {r['num_envs']} | {fmt_rate(r['env_steps_per_s'])} "
            f"| {fmt_rate(r['uav_steps_per_s'])} | {fmt(r.get('speedup_vs_reference_loop'))} "
            f"| {fmt(r.get('speedup_vs_vmas_cpu'))} | {fmt(r.get('peak_rss_mib'))} "
            f"| {fmt(r.get('cuda_max_allocated_mib'))} | {fmt(r.get('bandwidth_fraction'), '{:.2f}')} |"
        )
    model = ", ".join(f"{b / 1024:.1f} KiB ({name})" for name, b in payload["bytes_per_env_step_model"].items())
    lines += [
        "",
        f"Bytes per env step, counted by the cost model of benchmarks.step_cost (its operands counted "
        f"whole; {model_envs} envs): {model}. The bandwidth fraction of a GPU row divides by its variant's. "
        f"Batched envs start at staggered steps of their first episode, so that about B / "
        f"{payload['config']['max_steps']} of them end in every step (every episode of random moves runs max_steps).",
        f"reference-loop rows of more than {reference_loop_max} envs step {reference_loop_max} of them in turn "
        "(a Python loop's rate does not depend on the count): the 'x reference loop' column divides by the median "
        "of the reference-loop rows; peak RSS is the process's peak during each "
        "point, after freed memory was returned to the system.",
        "",
    ]
    return "\n".join(lines)


def plot(payload: dict[str, Any], path: Path) -> None:
    """env-steps/s against the number of environments, one line per backend, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    backends = dict.fromkeys(r["backend"] for r in payload["results"] if "error" not in r)
    for name in backends:
        pts = sorted(
            (r["num_envs"], r["env_steps_per_s"])
            for r in payload["results"]
            if r["backend"] == name and "error" not in r
        )
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", linestyle="-" if len(xs) > 1 else "none", label=name)
    m = payload["machine"]
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="parallel environments",
        ylabel="env-steps / s",
        title=f"uavsim throughput — {m.get('gpu', m['cpu'])}"[:90],
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
