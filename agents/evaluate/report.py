"""The report `python -m agents.evaluate` writes and prints from its results: the JSON file (strict:
NaN as null), the first episode's GIF and PNG, the baselines and the policy side by side
(`<out>_compare.gif`), the coverage-over-time plot (`<out>_coverage.png`), and the console summary
(one line per policy, per baseline comparison, and per map of a map set).

`agents.evaluate.episodes` plays the episodes; this module only turns its results into files and lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import imageio.v2 as imageio
import numpy as np

from agents.run.paths import write_text_atomically
from uavsim.video import side_by_side, write_video

COMPARED = {
    "greedy": "greedy",
    "coordinated": "coordinated",
    "policy": "MAPPO (most likely)",
    "policy_sampled": "MAPPO (sampled)",
}  # drawn side by side in <out>_compare.gif, with these labels


def curve_summary(curves: np.ndarray) -> dict[str, list[float]]:
    """Mean and quartiles over the maps of `curves` `[B, T]`, per step (to 6 decimals: a readable file)."""
    q25, q75 = np.quantile(curves, [0.25, 0.75], axis=0)
    return {k: np.round(v, 6).tolist() for k, v in (("mean", curves.mean(0)), ("q25", q25), ("q75", q75))}


def plot_coverage(
    curves: dict[str, dict[str, list[float]]], path: Path, title: str, target: float | None = None
) -> None:
    """Coverage vs step, one line per policy (the mean over maps) in an interquartile band, as PNG;
    `target` draws the target coverage as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    if target is not None:
        ax.axhline(target, color="0.5", linestyle="--", linewidth=0.8, label=f"target {target:g}")
    for name, c in curves.items():
        steps = np.arange(len(c["mean"]))
        (line,) = ax.plot(steps, c["mean"], label=name, linewidth=1.6)
        ax.fill_between(steps, c["q25"], c["q75"], color=line.get_color(), alpha=0.18, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel("coverage")
    ax.set_ylim(0, 1.02)
    ax.set_title(
        f"{title}\nlines: mean over maps; bands: 25th-75th percentile; a map keeps its final coverage "
        "once its episode ended",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def compare_gif_path(out: Path) -> Path:
    """Where `write_report` draws `COMPARED` side by side on map 0."""
    return out.with_name(out.stem + "_compare.gif")


def coverage_plot_path(out: Path) -> Path:
    """Where the coverage-over-time plot of the results file `out` goes: `<stem>_coverage.png`."""
    return out.with_name(f"{out.stem}_coverage.png")


def nan_to_none(obj):
    """NaN (e.g. the standard error of a single episode) as None, so the file is strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_none(v) for v in obj]
    return obj


def write_report(
    out: Path, results: dict, frames: dict[str, list[np.ndarray]], plot_title: str, target: float | None
) -> list[Path]:
    """Write `results` to `out` (strict JSON), the trained policy's first episode (`frames["policy"]`)
    as `out`'s GIF and PNG (its last frame), `COMPARED` side by side, and the coverage plot of
    `results["coverage_curve"]` titled `plot_title`. Returns the paths written, the JSON first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # strict JSON: NaN -> null
    # whole or not at all: a full disk or a kill leaves the results of the run before (`write_text_atomically`)
    write_text_atomically(out, json.dumps(nan_to_none(results), indent=2, allow_nan=False))
    gif, png = out.with_suffix(".gif"), out.with_suffix(".png")
    compare, plot = compare_gif_path(out), coverage_plot_path(out)
    write_video(frames["policy"], gif, fps=12.5)  # as the comparison; imageio's own `duration` unit changed (s -> ms)
    imageio.imwrite(png, frames["policy"][-1])
    write_video(side_by_side([frames[n] for n in COMPARED], list(COMPARED.values())), compare, fps=12.5)
    plot_coverage(results["coverage_curve"], plot, plot_title, target)
    return [out, gif, png, plot, compare]


def summary_lines(results: dict, policies: tuple[str, ...], episodes: int, target: float) -> list[str]:
    """The console summary of `results`: each of `policies`, each paired comparison with a baseline,
    and each map of a map set (`per_map`); `target` is the task's target coverage."""
    lines, reached = [], f"reached {target * 100:g} %"
    for name in policies:
        r = results[name]
        lines.append(
            f"{name:15s} coverage {r['mean_coverage']:.3f}  steps_to_target {r['mean_steps_to_target']:.1f}  "
            f"{reached} on {r['target_reached']:.1%} of maps  collisions {r['mean_collisions']:.1f}  "
            f"return {r['mean_return']:.3f}"
        )
    for base in ("greedy", "coordinated"):
        for name, d in results[f"paired_vs_{base}"].items():
            lines.append(
                f"{name:15s} vs {base} on the same maps: {d['mean_steps_diff']:+.1f} +- {d['stderr']:.1f} steps "
                f"(faster on {d['faster']}, equal on {d['equal']}, slower on {d['slower']} of {episodes})"
            )
    for name, m in results.get("per_map", {}).items():
        d = m["paired_vs_greedy"]["policy"]
        reach = ", ".join(f"{p} {m[p]['target_reached']:.1%}" for p in ("policy", "greedy", "coordinated"))
        lines.append(
            f"map {name}: {m['episodes']} maps, {reached}: {reach}; policy vs greedy "
            f"{d['mean_steps_diff']:+.1f} +- {d['stderr']:.1f} steps"
        )
    return lines
