"""Learning curves of training runs, from their TensorBoard files: the in-training evaluations'
steps to the coverage target (sampled and most likely action) against environment steps, with the
greedy and coordinated baselines of the same evaluation maps.

    python -m benchmarks.learning_curves RUN_DIR [RUN_DIR ...] --labels a b --out curves.png

Writes ``curves.png`` and ``curves.json`` ({label: {tag: [[env_steps, value], ...]}}). Reading the
event files is TensorBoard's own ``EventAccumulator``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

TAGS = (
    "eval_sampled/mean_steps_to_target",
    "eval/mean_steps_to_target",
    "eval_sampled/mean_coverage",
    "eval_greedy/mean_steps_to_target",
    "eval_coordinated/mean_steps_to_target",
)


def read_curves(run_dir: Path) -> dict[str, list[list[float]]]:
    """``{tag: [[env_steps, value], ...]}`` of `TAGS` logged in ``run_dir`` (those present)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    present = set(acc.Tags()["scalars"])
    if "eval_sampled/mean_steps_to_target" not in present:
        raise ValueError(f"{str(run_dir)!r} holds no in-training evaluations (run.eval_interval > 0 writes them)")
    return {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in TAGS if tag in present}


def plot(curves: dict[str, dict[str, list[list[float]]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for label, tags in curves.items():
        x, y = zip(*tags["eval_sampled/mean_steps_to_target"])
        (line,) = ax.plot([v / 1e6 for v in x], y, marker="o", label=f"{label} (sampled)")
        if "eval/mean_steps_to_target" in tags:
            x, y = zip(*tags["eval/mean_steps_to_target"])
            ax.plot([v / 1e6 for v in x], y, linestyle=":", color=line.get_color(), label=f"{label} (most likely)")
    first = next(iter(curves.values()))
    for tag, name, style in (
        ("eval_greedy/mean_steps_to_target", "greedy", "--"),
        ("eval_coordinated/mean_steps_to_target", "coordinated", "-."),
    ):
        if tag in first:
            ax.axhline(first[tag][-1][1], color="black", linestyle=style, label=name)
    ax.set_xlabel("environment steps (millions)")
    ax.set_ylabel("mean steps to the coverage target (lower is better)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the axes: never over the curves' ends
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.learning_curves",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", type=Path, help="run directories (their TensorBoard event files)")
    p.add_argument("--labels", nargs="+", default=None, help="one per run (default: the folder names)")
    p.add_argument("--title", default="in-training evaluation")
    p.add_argument("--out", type=Path, required=True, help="a .png file; the curves go beside it as .json")
    args = p.parse_args(argv)
    labels = args.labels or [r.name for r in args.runs]
    try:
        if len(labels) != len(args.runs):
            raise ValueError(f"--labels must name each of the {len(args.runs)} runs, got {len(labels)}")
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:  # the curves are keyed by label: one run would hide another
            raise ValueError(f"runs share the label(s) {', '.join(repeated)}: give each its own with --labels")
        if args.out.suffix.lower() != ".png" or not args.out.resolve().parent.is_dir():
            raise ValueError(f"--out must be a .png file in a folder that exists, got {str(args.out)!r}")
        curves = {label: read_curves(run) for label, run in zip(labels, args.runs)}
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plot(curves, args.out, args.title)
    args.out.with_suffix(".json").write_text(json.dumps(curves, indent=1), encoding="utf-8")
    print(f"wrote {args.out}, {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
