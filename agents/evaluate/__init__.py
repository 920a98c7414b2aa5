"""Evaluate a trained policy against the scripted baselines on the same episodes.

    python -m agents.evaluate RUN_DIR_OR_CKPT --episodes 256 --seed 12345 --out eval.json

The command and the JSON it writes: `agents.evaluate.cli`. Its parts: `episodes` (every policy plays
the same maps), `setup` (the checkpoint's actor, the task, the split), `stats` (summaries and paired
differences), `report` (the JSON, GIFs, plot and printed lines). The names others use are imported
here; the modules of this package import each other, never this file (no import cycle).
"""

from agents.evaluate.cli import main
from agents.evaluate.episodes import (
    BASELINES,
    EVAL_SEED_OFFSET,
    POLICIES,
    RECORDED,
    actor_policy,
    baseline_reference,
    evaluate_all,
    evaluate_for_tensorboard,
    first_episode_frames,
    run_episodes,
)
from agents.evaluate.stats import METRICS, paired_difference, paired_results, per_map, summarize

__all__ = [
    "BASELINES",
    "EVAL_SEED_OFFSET",
    "METRICS",
    "POLICIES",
    "RECORDED",
    "actor_policy",
    "baseline_reference",
    "evaluate_all",
    "evaluate_for_tensorboard",
    "first_episode_frames",
    "main",
    "paired_difference",
    "paired_results",
    "per_map",
    "run_episodes",
    "summarize",
]
