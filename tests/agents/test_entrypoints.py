"""One smoke run per entry point, through a subprocess with a tiny budget, and what they leave
behind: resolved config, checkpoints, TensorBoard tags (CleanRL names + ours), evaluation JSON,
GIF and PNG, the exported actor and its sidecar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[2]
TINY_RUN = [
    "--config",
    "configs/smoke.yaml",
    "train.total_env_steps=1024",
    "env.num_envs=8",
    "train.num_steps=16",
    "run.checkpoint_interval=512",
    "run.eval_interval=512",
    "run.eval_envs=2",
    "run.torch_threads=1",
]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# Runs each `python -m MODULE ARGS...` as -m does (runpy: the module's __main__ block; the exit status
# is its SystemExit code), one after the other in one interpreter: one start-up of Python, torch and
# agents instead of one per command. Prints [[exit status, stderr], ...] as JSON on its last line.
RUN_EACH = r"""
import contextlib, io, json, runpy, sys
results = []
for argv in json.loads(sys.argv[1]):
    sys.argv = list(argv)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            code = exit.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def run_each(*commands: list[str]) -> list[tuple[int, str]]:
    """(exit status, stderr) of each command, as `run(*command)` would give them, from one subprocess."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_EACH, json.dumps(commands)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]


def test_train_then_evaluate_through_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    proc = run("agents.train_mappo", *TINY_RUN, f"run.dir={run_dir}", "train.amp=bf16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 1024 env steps" in proc.stdout

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["train"]["amp"] == "bf16" and saved["run"]["dir"] == str(run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "ckpt_000000000512.pt",
        "ckpt_000000001024.pt",
    ]

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    for tag in (
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "charts/learning_rate",
        "losses/value_loss",
        "losses/policy_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "charts/coverage",
        "charts/steps_to_target",
        "charts/collisions",
        "charts/near_misses",
        "perf/env_time",
        "perf/learn_time",
        "value_norm/mean",
        "value_norm/std",
        "losses/actor_grad_norm",
        "eval/mean_coverage",
        "eval_greedy/mean_steps_to_target",
        "eval_coordinated/mean_steps_to_target",
    ):
        assert tag in scalars, tag
    assert [e.step for e in acc.Scalars("charts/SPS")] == [128 * i for i in range(1, 9)]  # x-axis: env steps
    assert "eval/episode" in acc.Tags()["images"]

    out = tmp_path / "eval" / "result.json"
    proc = run("agents.evaluate", str(run_dir), "--episodes", "4", "--seed", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for name in ("policy", "policy_sampled", "random", "greedy", "coordinated"):
        assert set(result[name]) >= {"mean_coverage", "mean_steps_to_target", "mean_collisions", "mean_return"}
        assert 0.0 <= result[name]["mean_coverage"] <= 1.0
        assert 0 < result[name]["mean_steps_to_target"] <= 50  # smoke preset: max_steps 50
        assert len(result["coverage_curve"][name]["mean"]) == 51
    for base in ("greedy", "coordinated"):
        for name in ("policy", "policy_sampled"):
            d = result[f"paired_vs_{base}"][name]
            assert d["faster"] + d["equal"] + d["slower"] == 4
            assert d["mean_steps_diff"] == pytest.approx(
                result[name]["mean_steps_to_target"] - result[base]["mean_steps_to_target"]
            )
    assert "coordinated" in proc.stdout and "vs coordinated on the same maps" in proc.stdout
    plot = imageio.imread(out.with_name("result_coverage.png"))
    assert plot.ndim == 3 and plot.shape[0] > 200
    assert result["meta"]["env_steps"] == 1024
    frames = imageio.mimread(out.with_suffix(".gif"))  # identical frames may be merged by the GIF writer
    assert len(frames) >= 1 and frames[0].shape == (12 * 8, 12 * 8, 3)
    assert imageio.imread(out.with_suffix(".png")).shape == (96, 96, 3)
    # greedy | coordinated | MAPPO most likely | MAPPO sampled, labelled
    compare = imageio.mimread(out.with_name("result_compare.gif"))
    assert compare[0].shape == (14 + 96, 4 * 96 + 3 * 4, 3) and str(out.with_name("result_compare.gif")) in proc.stdout


def test_a_recurrent_run_trains_evaluates_and_exports_through_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    proc = run("agents.train_mappo", *TINY_RUN, f"run.dir={run_dir}", "model.recurrent=true", "train.chunk_length=8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["recurrent"] is True and saved["train"]["chunk_length"] == 8
    out = tmp_path / "eval.json"
    proc = run("agents.evaluate", str(run_dir), "--episodes", "4", "--seed", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert 0.0 < result["policy_sampled"]["mean_coverage"] <= 1.0 and result["meta"]["env_steps"] == 1024
    proc = run("agents.export", str(run_dir), "--format", "torchscript")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sidecar = json.loads((run_dir / "actor.pt.json").read_text())
    assert [i["name"] for i in sidecar["inputs"]] == ["local", "agent_id", "hidden"] and sidecar["env_steps"] == 1024
    assert (run_dir / "actor.pt").is_file() and f"wrote {run_dir / 'actor.pt'}" in proc.stdout


def test_play_shows_the_coordinated_planner(tmp_path):
    out = tmp_path / "team.gif"
    proc = run(
        "uavsim.play",
        "--policy",
        "coordinated",
        "--seed",
        "1",
        "--out",
        str(out),
        "--config",
        "grid_height=12",
        "grid_width=12",
        "num_uavs=4",
        "num_obstacles=6",
        "launch_size=2",
        "state_pool=4",
        "max_steps=40",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip()
    assert line.startswith("coordinated seed=1: coverage") and " 0 collisions" in line and str(out) in line
    frames = imageio.mimread(out)
    assert len(frames) >= 2 and frames[0].shape == (12 * 8, 12 * 8, 3)
    proc = run("uavsim.play", "--policy", "planner", "--out", str(out))
    assert proc.returncode == 2 and "invalid choice: 'planner'" in proc.stderr


def test_command_line_errors_are_clear(tmp_path):
    proc = run("agents.train_mappo", "train.lrr=1", f"run.dir={tmp_path}")  # one through `python -m` itself
    assert proc.returncode == 2 and "unknown config key 'train.lrr'" in proc.stderr
    (tmp_path / "a_file").write_text("")
    (tmp_path / "bad.yaml").write_text("train: [1, 2\n")
    expected = {
        ("agents.train_mappo", "--resume", str(tmp_path / "nothing")): "neither a checkpoint file nor a run directory",
        ("agents.evaluate", str(tmp_path / "nothing")): "neither a checkpoint file nor a run directory",
        ("agents.evaluate", str(tmp_path / "nothing"), "--device", "gpu"): (
            "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"
        ),
        ("agents.export", str(tmp_path / "nothing")): "neither a checkpoint file nor a run directory",
        ("agents.export", str(tmp_path / "nothing"), "--format", "tflite"): (
            "unknown format 'tflite': expected one of onnx, torchscript"
        ),
        ("agents.average", str(tmp_path / "nothing")): "is not a run directory",
        ("agents.train_mappo", f"run.dir={tmp_path / 'a_file'}"): "exists and is not a directory",
        ("agents.train_mappo", "--config", str(tmp_path / "bad.yaml")): "is not valid YAML",
    }
    results = run_each(*expected)
    assert len(results) == len(expected)
    for (command, message), (code, stderr) in zip(expected.items(), results):
        assert code == 2 and message in stderr, (command, code, stderr[-3000:])
