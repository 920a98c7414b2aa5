"""The trainer's rollout step captures whole: `torch.compile(rollout_step, fullgraph=True)` traces
the policy step, `env.step`, the storage writes and the episode statistics with no graph break (a
break raises), and the compiled rollout fills the storage exactly as the eager one."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend

from agents.rollout import agent_ids, collect, rollout_step
from agents.learner import build_learner

# Episodes of at most 12 steps: resets and the env's rebuilds of prepared starts inside 24 steps.
ROLLOUT = ["train.num_steps=24", "train.chunk_length=8", "env.num_envs=6", "train.num_minibatches=2"]


def storage_fields(storage) -> dict[str, torch.Tensor]:
    return {f.name: getattr(storage, f.name) for f in dataclasses.fields(storage)}


@pytest.mark.parametrize("variant", [["model.actor_shared_map=true"], ["model.recurrent=true"],
                                     ["model.actor_shared_map=true", "train.amp=bf16"]],
                         ids=["shared-map", "recurrent", "shared-map-bf16"])
def test_the_rollout_step_is_one_graph_and_fills_the_eager_storage(make_config, variant):
    torch._dynamo.reset()
    cfg = make_config(*ROLLOUT, *variant)
    eager, captured = build_learner(cfg, torch.device("cpu")), build_learner(cfg, torch.device("cpu"))
    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(rollout_step, fullgraph=True, backend=counter)  # a graph break raises here
    for learner, fn in ((eager, rollout_step), (captured, step)):
        learner.obs, learner.hidden = collect(learner.env, learner.actor, learner.critic, learner.value_norm,
                                              learner.obs, learner.storage, learner.stats, learner.action_noise,
                                              learner.autocast, learner.hidden, step=fn)
    want, got = storage_fields(eager.storage), storage_fields(captured.storage)
    for name, value in want.items():
        assert torch.equal(value, got[name]), name
    assert torch.equal(eager.stats.sums, captured.stats.sums) and eager.stats.sums[0] > 0  # episodes ended
    assert eager.action_noise.state_dict() == captured.action_noise.state_dict()
    # graphs: one per side of the env's host-side rebuild branch, and the first call's static counter
    assert 1 <= counter.frame_count <= 4


def test_the_rollout_step_reads_nothing_back_to_the_host(make_config, monkeypatch):
    """Every host read raises inside the step (the trainer's guard, applied to this one function)."""
    learner = build_learner(make_config(*ROLLOUT, "model.recurrent=true"), torch.device("cpu"))
    agent = agent_ids(learner.env.num_envs, learner.env.num_uavs, learner.env.device)
    t = torch.zeros((), dtype=torch.int64)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a host read inside the rollout step")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "numpy", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    obs, hidden = learner.obs, learner.hidden
    for _ in range(learner.storage.actions.shape[0]):
        obs, hidden = rollout_step(learner.env, learner.actor, learner.storage, learner.stats, learner.action_noise,
                                   learner.autocast, agent, obs, hidden, t)
    monkeypatch.undo()
    assert int(t) == learner.storage.actions.shape[0]


def _rollouts(make_config, compile_rollout: bool, device: str):
    """Two iterations' storage of the default-like learner, eager or with train.compile_rollout."""
    cfg = make_config(*ROLLOUT, "model.actor_shared_map=true", f"run.device={device}",
                      f"train.compile_rollout={str(compile_rollout).lower()}")
    learner = build_learner(cfg, torch.device(device))
    from agents.learner import train_iteration

    snapshots = []
    for _ in range(2):
        train_iteration(learner)
        snapshots.append({k: v.clone() for k, v in storage_fields(learner.storage).items()})
    return learner, snapshots


def test_train_compile_rollout_runs_the_captured_step(make_config, monkeypatch):
    """The trainer's wiring, with a backend that needs no compiler (inductor's own kernels are
    tested on CUDA below; on the CPU they take minutes to build)."""
    import agents.learner as learner_module
    from agents import rollout

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(learner_module, "compile_rollout_step", lambda device: rollout.compile_rollout_step(device, counter))
    captured, got = _rollouts(make_config, True, "cpu")
    _, want = _rollouts(make_config, False, "cpu")
    assert counter.frame_count >= 1
    for snap_got, snap_want in zip(got, want):
        for name, value in snap_want.items():
            assert torch.equal(value, snap_got[name]), name


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_graph_rollout_equals_the_eager_one(make_config):
    torch._dynamo.reset()
    _, got = _rollouts(make_config, True, "cuda")
    _, want = _rollouts(make_config, False, "cuda")
    for snap_got, snap_want in zip(got, want):
        for name, value in snap_want.items():
            assert torch.equal(value, snap_got[name]), name
