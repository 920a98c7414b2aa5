"""The evaluation's statistics over episodes: per-policy summaries, paired differences against a
baseline on the same maps, and the breakdown by user map (`--maps`), which says which of a set's
layouts a policy fails on: one hard map hides in the set's mean."""

from __future__ import annotations

import numpy as np

METRICS = ("coverage", "steps_to_target", "reached", "collisions", "near_misses", "return", "length")
PAIRED = ("policy", "policy_sampled")  # the trained policy's rows compared with each baseline
BASES = ("greedy", "coordinated")


def summarize(res: dict[str, np.ndarray]) -> dict[str, float]:
    out = {f"mean_{k}": float(res[k].mean()) for k in METRICS if k != "reached"}
    out["target_reached"] = float(res["reached"].mean())
    out["episodes"] = int(len(res["coverage"]))
    return out


def paired_difference(res: dict[str, np.ndarray], base: dict[str, np.ndarray]) -> dict[str, float]:
    """Steps to target of `res` minus `base` on the same maps (negative: `res` is faster): the
    mean, its standard error, and how many episodes were faster, equal or slower."""
    d = res["steps_to_target"] - base["steps_to_target"]
    stderr = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {
        "mean_steps_diff": float(d.mean()),
        "stderr": stderr,
        "faster": int((d < 0).sum()),
        "equal": int((d == 0).sum()),
        "slower": int((d > 0).sum()),
    }


def paired_results(raw: dict[str, dict[str, np.ndarray]]) -> dict[str, dict]:
    """`{"paired_vs_greedy": {...}, "paired_vs_coordinated": {...}}` for the trained policy's rows."""
    return {f"paired_vs_{base}": {name: paired_difference(raw[name], raw[base]) for name in PAIRED} for base in BASES}


def per_map(raw: dict[str, dict[str, np.ndarray]], picked: np.ndarray, names: list[str]) -> dict[str, dict]:
    """`{map name: {"episodes", policy: summary, ..., "paired_vs_greedy", "paired_vs_coordinated"}}`
    over the episodes that played each map (`picked[i]`: the map index of episode `i`); maps no
    episode drew are left out.

    Raises:
        ValueError: `picked` does not hold one map index per episode, within `names`.
    """
    picked = np.asarray(picked)
    episodes = len(next(iter(raw.values()))["coverage"])
    if picked.shape != (episodes,) or (len(picked) and not 0 <= picked.min() <= picked.max() < len(names)):
        raise ValueError(f"per_map needs one map index in [0, {len(names)}) per episode ({episodes}), got {picked!r}")
    out = {}
    for m, name in enumerate(names):
        mask = picked == m
        if not mask.any():
            continue
        sub = {policy: {k: v[mask] for k, v in res.items()} for policy, res in raw.items()}
        out[name] = {
            "episodes": int(mask.sum()),
            **{policy: summarize(res) for policy, res in sub.items()},
            **paired_results(sub),
        }
    return out
