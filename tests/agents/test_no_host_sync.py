"""Collection and update never read a tensor on the host.

On the CPU every Tensor method that hands a value to Python (or prints one) is patched to raise
for the duration of a training iteration; on a GPU, CUDA's sync debug mode turns any
synchronizing call into an error.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from agents.algo.learner import build_learner, read_metrics, train_iteration
from tests.agents.conftest import needs_compiler
from uavsim.env import UAVSwarmEnv

HOST_READS = (
    "item",
    "tolist",
    "numpy",
    "cpu",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "__repr__",
    "__str__",
    "__format__",
    "__array__",
)


# Ops whose output shape depends on the data: on a GPU each one waits for the device to learn it.
DATA_DEPENDENT = ("nonzero", "argwhere", "masked_select", "unique", "unique_consecutive")


def _is_mask(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts)


@contextlib.contextmanager
def host_reads_raise(monkeypatch):
    def forbid(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"host read: Tensor.{name} called inside collection/update")

        return raiser

    getitem = torch.Tensor.__getitem__

    def no_mask_getitem(self, index):  # x[mask] has as many rows as the mask has True values
        if _is_mask(index):
            raise AssertionError("host read: boolean-mask indexing inside collection/update")
        return getitem(self, index)

    with monkeypatch.context() as m:
        for name in HOST_READS:
            m.setattr(torch.Tensor, name, forbid(name))
        for name in DATA_DEPENDENT:
            m.setattr(torch.Tensor, name, forbid(name))
            m.setattr(torch, name, forbid(name))
        m.setattr(torch.Tensor, "__getitem__", no_mask_getitem)
        yield


def dense_env_learner(cfg, device):
    learner = build_learner(cfg, device)
    # The CPU default "sparse" autoreset uses nonzero(); "dense" is the GPU path: test that one
    # (in every size group of a mixed-size run).
    for group in learner.groups:
        group.env = UAVSwarmEnv(
            group.env.config,
            num_envs=group.env.num_envs,
            device=device,
            seed=cfg.seed,
            first_env_index=int(group.env.env_index[0]),
            check_action_range=False,
            reset_mode="dense",
        )
        group.obs = group.env.reset()
    return learner


def test_the_guard_catches_host_reads(monkeypatch):
    x = torch.ones(3)
    with host_reads_raise(monkeypatch):
        for read in (
            lambda: x.sum().item(),
            lambda: bool(x.any()),
            lambda: x.tolist(),
            lambda: print(x),
            lambda: float(x[0]),
            lambda: x.numpy(),
            lambda: f"{x[0]:.2f}",
            lambda: x.cpu(),
            lambda: x.nonzero(),
            lambda: torch.nonzero(x),
            lambda: x[x > 0],
            lambda: torch.unique(x),
            lambda: x.masked_select(x > 0),
            lambda: x[:, None][x > 0, 0],
        ):
            with pytest.raises(AssertionError, match="host read"):
                read()
    assert x.sum().item() == 3.0  # restored afterwards


RECURRENT = ("model.recurrent=true", "train.chunk_length=4")
NEAR_CLONE = (
    "imitation.teacher=greedy",
    "train.clone_kl_coef=0.5",
    "model.actor_shared_map=true",
)  # PPO + KL to a clone


MIXED_SIZES = (  # mixed-size training: two team sizes x two map sizes
    "model.size_agnostic=true",
    "model.agent_id=false",
    "env.num_uavs=[2,3]",
    "env.grid_height=[8,10]",
    "env.grid_width=[8,10]",
)


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
@pytest.mark.parametrize(
    "extra", [(), RECURRENT, NEAR_CLONE, MIXED_SIZES], ids=["feed_forward", "recurrent", "near_clone", "mixed_sizes"]
)
def test_training_iterations_make_no_host_reads(make_config, monkeypatch, amp, extra):
    cfg = make_config(f"train.amp={amp}", "env.max_steps=5", *extra)  # several autoresets per rollout
    learner = dense_env_learner(cfg, torch.device("cpu"))
    with host_reads_raise(monkeypatch):
        for _ in range(3):
            metrics = train_iteration(learner)
    values = read_metrics(metrics)  # the once-per-iteration read happens outside
    assert learner.stats.read()["episodes"] > 0
    assert all(isinstance(v, float) for v in values.values())


@needs_compiler
@pytest.mark.parametrize("extra", [(), RECURRENT, NEAR_CLONE], ids=["feed_forward", "recurrent", "near_clone"])
def test_compiled_training_iterations_make_no_host_reads(make_config, monkeypatch, extra):
    cfg = make_config("train.amp=bf16", "env.max_steps=5", "train.compile=true", *extra)
    learner = dense_env_learner(cfg, torch.device("cpu"))
    train_iteration(learner)  # compiles the loss (tracing inspects tensors; that is not the hot path)
    with host_reads_raise(monkeypatch):
        for _ in range(2):
            metrics = train_iteration(learner)
    assert all(isinstance(v, float) for v in read_metrics(metrics).values())


@pytest.mark.parametrize("extra", [(), RECURRENT, NEAR_CLONE], ids=["feed_forward", "recurrent", "near_clone"])
def test_captured_training_iterations_make_no_host_reads(make_config, monkeypatch, extra):
    """`train.compile` + `train.compile_rollout` as captured on CUDA (the step's static addresses,
    a generation a step, the minibatch's step arithmetic), traced without inductor
    (`benchmarks.graph_audit`): nothing in the captured iteration reads back to the host."""
    from benchmarks.graph_audit import GraphAudit
    from tests.agents.conftest import audited

    torch._dynamo.reset()
    audit = GraphAudit()
    audited(monkeypatch, audit)
    cfg = make_config("train.amp=bf16", "env.max_steps=5", "train.compile=true", "train.compile_rollout=true", *extra)
    learner = dense_env_learner(cfg, torch.device("cpu"))
    train_iteration(learner)  # traces (tracing inspects tensors; that is not the hot path)
    with host_reads_raise(monkeypatch):
        for _ in range(2):
            metrics = train_iteration(learner)
    assert all(isinstance(v, float) for v in read_metrics(metrics).values())
    assert audit.skip_reasons == [] and {g.label for g in audit.graphs} == {"rollout", "loss", "norms"}
    torch._dynamo.reset()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("amp, compiled", [("off", False), ("bf16", False), ("fp16", False), ("bf16", True)])
@pytest.mark.parametrize("extra", [(), RECURRENT, NEAR_CLONE], ids=["feed_forward", "recurrent", "near_clone"])
def test_training_iterations_make_no_cuda_syncs(make_config, amp, compiled, extra):
    cfg = make_config(
        f"train.amp={amp}", "env.max_steps=5", "run.device=cuda", f"train.compile={str(compiled).lower()}", *extra
    )
    learner = build_learner(cfg, torch.device("cuda"))  # the env picks "dense" on CUDA itself
    train_iteration(learner)  # warm-up: lazy initialisations (and compilation) may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            metrics = train_iteration(learner)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    read_metrics(metrics)
