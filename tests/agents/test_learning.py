"""A short training run on a small map beats the random policy by a clear margin."""

from __future__ import annotations

import pytest
import torch

from agents.evaluate import evaluate_all
from agents.train_mappo import train

SMALL_MAP = [
    "env.grid_height=12",
    "env.grid_width=12",
    "env.num_uavs=3",
    "env.num_obstacles=6",
    "env.max_steps=50",
    "env.launch_size=2",
    "env.state_pool=4",
    "env.obs_radius=3",
    "env.sensor_radius=2",
    "env.num_envs=32",
    "model.hidden_size=64",
    "train.num_steps=32",
    "train.total_env_steps=32768",
    "train.update_epochs=4",
    "train.num_minibatches=4",
    "run.checkpoint_interval=0",
    "run.eval_interval=0",
    "run.torch_threads=1",
]


pytestmark = pytest.mark.usefixtures("restore_threads")  # tests here set torch's thread count


@pytest.mark.slow
def test_short_training_beats_random_clearly(make_config, tmp_path):
    cfg = make_config(*SMALL_MAP, f"run.dir={tmp_path}")
    learner = train(cfg)
    results, _ = evaluate_all(
        learner.actor, cfg.env_config(), episodes=64, seed=777, device=torch.device("cpu"), record=False
    )
    policy, sampled, rand = results["policy"], results["policy_sampled"], results["random"]
    best = max(policy["mean_coverage"], sampled["mean_coverage"])
    assert best > rand["mean_coverage"] + 0.25, results
    assert sampled["mean_return"] > rand["mean_return"] + 2.0, results
    assert sampled["mean_collisions"] < rand["mean_collisions"] / 2, results
