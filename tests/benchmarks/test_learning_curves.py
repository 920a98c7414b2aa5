"""benchmarks.learning_curves reads the in-training evaluations TensorBoard holds and plots them."""

from __future__ import annotations

import json

import imageio.v2 as imageio
import pytest
from torch.utils.tensorboard import SummaryWriter

from benchmarks.learning_curves import main, read_curves


def fake_run(path, steps_to_target):
    with SummaryWriter(str(path)) as writer:
        for i, value in enumerate(steps_to_target):
            step = (i + 1) * 1000
            writer.add_scalar("eval_sampled/mean_steps_to_target", value, step)
            writer.add_scalar("eval/mean_steps_to_target", value + 5, step)
            writer.add_scalar("eval_greedy/mean_steps_to_target", 73.6, step)
            writer.add_scalar("charts/SPS", 1.0, step)


def test_curves_are_read_plotted_and_written(tmp_path):
    fake_run(tmp_path / "a", [120.0, 90.0, 70.0])
    fake_run(tmp_path / "b", [150.0, 140.0])
    curves = read_curves(tmp_path / "a")
    assert curves["eval_sampled/mean_steps_to_target"] == [[1000, 120.0], [2000, 90.0], [3000, 70.0]]
    assert "charts/SPS" not in curves and "eval_coordinated/mean_steps_to_target" not in curves
    out = tmp_path / "curves.png"
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "ff", "gru", "--out", str(out)]) == 0
    written = json.loads(out.with_suffix(".json").read_text())
    assert set(written) == {"ff", "gru"} and written["gru"]["eval/mean_steps_to_target"][-1] == [2000, 145.0]
    assert imageio.imread(out).shape[2] in (3, 4)


def test_bad_input_is_named(tmp_path, capsys):
    with SummaryWriter(str(tmp_path / "no_eval")) as writer:
        writer.add_scalar("charts/SPS", 1.0, 1)
    with pytest.raises(ValueError, match="no in-training evaluations"):
        read_curves(tmp_path / "no_eval")
    with pytest.raises(ValueError, match="does not exist"):
        read_curves(tmp_path / "missing")
    assert main([str(tmp_path / "no_eval"), "--labels", "a", "b", "--out", str(tmp_path / "c.png")]) == 2
    assert "--labels must name each of the 1 runs" in capsys.readouterr().err
    assert main([str(tmp_path / "no_eval"), "--out", str(tmp_path / "c.svg")]) == 2
    assert "--out must be a .png" in capsys.readouterr().err


def test_runs_of_one_label_are_refused(tmp_path, capsys):
    for name in ("a", "b"):  # two runs named alike in different folders: the default labels collide
        with SummaryWriter(str(tmp_path / name / "run")) as writer:
            writer.add_scalar("eval/mean_steps_to_target", 50.0, 1)
    runs = [str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run")]
    assert main([*runs, "--out", str(tmp_path / "c.png")]) == 2
    assert "runs share the label(s) run: give each its own with --labels" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()
