"""The evaluation report: coverage curves and their plot, strict JSON, the files written and the
console summary."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from agents.evaluate.report import (
    compare_gif_path,
    coverage_plot_path,
    curve_summary,
    nan_to_none,
    plot_coverage,
    summary_lines,
)


def test_plot_coverage_draws_a_png(tmp_path):
    curves = np.array([[0.1, 0.5, 0.9], [0.2, 0.4, 0.95], [0.1, 0.3, 0.7]])
    summary = curve_summary(curves)
    assert summary["mean"] == pytest.approx([0.4 / 3, 0.4, 2.55 / 3], abs=1e-6)  # written to 6 decimals
    assert summary["q25"] == pytest.approx([0.1, 0.35, 0.8]) and summary["q75"] == pytest.approx([0.15, 0.45, 0.925])
    path = coverage_plot_path(tmp_path / "eval.json")
    assert path == tmp_path / "eval_coverage.png"
    plot_coverage({"a": summary, "b": curve_summary(curves[:, ::-1].copy())}, path, "title", target=0.95)
    image = imageio.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
    assert len(np.unique(image.reshape(-1, image.shape[2]), axis=0)) > 10  # lines, bands, text


def test_results_are_written_as_strict_json():
    # one episode has no standard error (NaN): it is written as null, never as a bare NaN token
    text = json.dumps(nan_to_none({"stderr": float("nan"), "runs": [1.5, float("nan")], "n": 1}), allow_nan=False)
    assert json.loads(text) == {"stderr": None, "runs": [1.5, None], "n": 1}


def test_the_summary_names_the_task_target_and_every_comparison():
    entry = {"mean_coverage": 0.9, "mean_steps_to_target": 40.0, "target_reached": 0.5, "mean_collisions": 0.0}
    entry["mean_return"] = 1.0
    diff = {"mean_steps_diff": -2.0, "stderr": 0.5, "faster": 3, "equal": 0, "slower": 1}
    results = {name: dict(entry) for name in ("policy", "greedy", "coordinated")}
    results |= {f"paired_vs_{b}": {"policy": diff} for b in ("greedy", "coordinated")}
    results["per_map"] = {"a.txt": {"episodes": 4, **results, "paired_vs_greedy": {"policy": diff}}}
    lines = summary_lines(results, ("policy", "greedy"), 4, target=0.9)
    assert lines[0].startswith("policy ") and "reached 90 % on 50.0% of maps" in lines[0]
    assert "policy          vs coordinated on the same maps: -2.0 +- 0.5 steps" in lines[3]
    assert "(faster on 3, equal on 0, slower on 1 of 4)" in lines[3]
    want = "map a.txt: 4 maps, reached 90 %: policy 50.0%, greedy 50.0%, coordinated 50.0%; policy vs greedy"
    assert lines[-1] == want + " -2.0 +- 0.5 steps"
    assert len(lines) == 2 + 2 + 1
    assert compare_gif_path(coverage_plot_path(Path("r/e.json"))) == Path("r/e_coverage_compare.gif")
