"""Shared fixtures: a tiny task and config so that agent tests run in seconds on a CPU."""

from __future__ import annotations

import shutil

import pytest
import torch

from agents.config import Config, load_config

TINY = [
    "env.num_envs=4",
    "env.grid_height=8",
    "env.grid_width=8",
    "env.num_uavs=2",
    "env.num_obstacles=3",
    "env.max_steps=12",
    "env.launch_size=2",
    "env.state_pool=4",
    "env.obs_radius=2",
    "env.sensor_radius=1",
    "model.hidden_size=16",
    "train.num_steps=8",
    "train.num_minibatches=2",
    "train.update_epochs=2",
    "train.total_env_steps=256",
    "run.device=cpu",
    "run.progress=false",
    "run.eval_interval=0",
    "run.checkpoint_interval=0",
    "run.torch_threads=1",
    "train.amp=off",
    # configs/default.yaml (what train_mappo.main reads without --config) imitates the planner first:
    # tiny runs skip it (tests/agents/test_imitation.py covers it)
    "imitation.teacher=none",
    "train.clone_kl_coef=0",
]


def tiny_config(*overrides: str) -> Config:
    return load_config(None, [*TINY, *overrides])


@pytest.fixture
def make_config():
    """`make_config("train.amp=bf16", ...)`: the tiny config plus overrides."""
    return tiny_config


# torch.compile on the CPU builds C++ kernels (train.compile)
needs_compiler = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")), reason="torch.compile on the CPU needs a C++ compiler"
)


@pytest.fixture
def restore_threads():
    """Puts torch's thread count back after a test that sets it."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def audited(monkeypatch, audit) -> None:
    """The learner's compiled functions (`train.compile`, `train.compile_rollout`), traced by `audit`
    (a `benchmarks.graph_audit.GraphAudit`) instead of inductor, as the trainer compiles them (whole
    graphs, static shapes) and, on any device, wrapped as on CUDA (`outputs_kept`)."""
    import agents.algo.learner as learner_module
    from agents.algo import rollout
    from agents.algo.optimizer_step import minibatch_norms
    from agents.algo.ppo import minibatch_loss

    def rollout_step(device, **kwargs):  # the CUDA path's wrapper on any device: a generation a step
        step, policy = rollout.compile_rollout_step(device, audit.labelled("rollout"), **kwargs)
        return rollout.outputs_kept(step) if device.type != "cuda" else step, policy

    def compiled(fn, label):
        return lambda device: torch.compile(fn, dynamic=False, fullgraph=True, backend=audit.labelled(label))

    monkeypatch.setattr(learner_module, "compile_rollout_step", rollout_step)
    monkeypatch.setattr(learner_module, "compile_loss", compiled(minibatch_loss, "loss"))
    monkeypatch.setattr(learner_module, "compile_norms", compiled(minibatch_norms, "norms"))
