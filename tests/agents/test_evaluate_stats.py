"""The evaluation's statistics: summaries, paired differences and the breakdown by user map."""

import numpy as np
import pytest

from agents.evaluate.stats import METRICS, per_map, summarize


def raw_results(steps: dict[str, list[float]]) -> dict[str, dict[str, np.ndarray]]:
    """Results of each policy with the given steps to target (max 10: the rest reached the target)."""
    out = {}
    for name, s in steps.items():
        s = np.asarray(s, dtype=np.float64)
        res = {k: np.zeros_like(s) for k in METRICS}
        res.update(steps_to_target=s, reached=(s < 10).astype(np.float64), coverage=np.where(s < 10, 0.95, 0.5))
        out[name] = res
    return out


def test_per_map_splits_every_policy_and_the_paired_differences_by_map():
    raw = raw_results(
        {
            "policy": [4, 10, 6, 10],
            "policy_sampled": [5, 5, 5, 5],
            "greedy": [6, 8, 6, 9],
            "coordinated": [3, 3, 3, 3],
        }
    )
    got = per_map(raw, np.array([0, 2, 0, 2]), ["a.txt", "b.txt", "c.txt"])
    assert list(got) == ["a.txt", "c.txt"]  # b.txt: no episode drew it
    a, c = got["a.txt"], got["c.txt"]
    assert a["episodes"] == c["episodes"] == 2
    assert a["policy"]["target_reached"] == 1.0 and c["policy"]["target_reached"] == 0.0
    assert c["greedy"] == summarize({k: v[[1, 3]] for k, v in raw["greedy"].items()})
    assert a["paired_vs_greedy"]["policy"]["mean_steps_diff"] == -1.0  # 4 - 6, 6 - 6
    assert (a["paired_vs_greedy"]["policy"]["faster"], a["paired_vs_greedy"]["policy"]["equal"]) == (1, 1)
    assert c["paired_vs_greedy"]["policy"]["mean_steps_diff"] == 1.5  # 10 - 8, 10 - 9: it stalled there
    assert c["paired_vs_coordinated"]["policy_sampled"]["mean_steps_diff"] == 2.0


def test_per_map_refuses_map_indices_that_do_not_fit():
    raw = raw_results({"policy": [1, 2], "policy_sampled": [1, 2], "greedy": [1, 2], "coordinated": [1, 2]})
    with pytest.raises(ValueError, match=r"one map index in \[0, 2\) per episode \(2\)"):
        per_map(raw, np.array([0, 2]), ["a", "b"])
    with pytest.raises(ValueError, match="per episode"):
        per_map(raw, np.array([0]), ["a", "b"])
