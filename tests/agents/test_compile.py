"""`train.compile`: the compiled minibatch loss computes what the eager one does, compiles once,
and a compiled training run stays on the eager run's parameters."""

from __future__ import annotations

import os

import pytest
import torch
from torch._dynamo.utils import counters

from agents.algo.compiled import check_compiler, compile_loss
from agents.algo.learner import build_learner, collect, prepare_batch, read_metrics, train_iteration
from agents.algo.ppo import chunk_steps, minibatch_loss
from tests.agents.conftest import needs_compiler


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # no cached graph from another test: each test compiles what it checks
    counters.clear()
    yield
    torch._dynamo.reset()


def _filled(make_config, *overrides):
    torch.manual_seed(0)
    learner = build_learner(make_config(*overrides), torch.device("cpu"))
    collect(learner)
    batch, _ = prepare_batch(learner)
    return learner, batch


RECURRENT = ["model.recurrent=true", "train.chunk_length=4", "env.max_steps=5"]


def half_the_steps(learner, batch):
    """A minibatch of half the environment steps (of the chunks, for a recurrent actor)."""
    n = batch.num_sequences if learner.actor.recurrent else batch.state.shape[0]
    steps = torch.randperm(n, generator=torch.Generator().manual_seed(3))[: n // 2]
    return chunk_steps(steps, learner.cfg.train.chunk_length, batch.num_envs) if learner.actor.recurrent else steps


def _loss_and_grads(loss_fn, learner, batch, steps):
    params = [*learner.actor.parameters(), *learner.critic.parameters()]
    for p in params:
        p.grad = None
    loss, stats = loss_fn(learner.actor, learner.critic, batch, steps, learner.cfg.train, learner.autocast)
    loss.backward()
    return loss.detach(), stats, [p.grad.clone() for p in params]


@needs_compiler
@pytest.mark.parametrize("amp, tol", [("off", 1e-5), ("bf16", 2e-2)])
@pytest.mark.parametrize("extra", [[], ["model.actor_shared_map=true"], RECURRENT])
def test_compiled_loss_and_gradients_match_eager(make_config, amp, tol, extra):
    learner, batch = _filled(make_config, f"train.amp={amp}", *extra)
    steps = half_the_steps(learner, batch)
    eager_loss, eager_stats, eager_grads = _loss_and_grads(minibatch_loss, learner, batch, steps)
    loss, stats, grads = _loss_and_grads(compile_loss(torch.device("cpu")), learner, batch, steps)
    assert counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"
    torch.testing.assert_close(loss, eager_loss, rtol=tol, atol=tol)
    for name in vars(stats):
        torch.testing.assert_close(getattr(stats, name), getattr(eager_stats, name), rtol=tol, atol=tol, msg=name)
    for g, e in zip(grads, eager_grads):
        assert torch.linalg.vector_norm(g - e) <= tol * (1 + torch.linalg.vector_norm(e))


@needs_compiler
@pytest.mark.parametrize("extra", [[], RECURRENT])
def test_compiled_ratio_before_the_first_update_is_one(make_config, extra):
    learner, batch = _filled(make_config, "train.compile=true", *extra)
    loss_fn = learner.loss_fn
    assert loss_fn is not minibatch_loss
    steps = torch.arange(batch.state.shape[0])
    if learner.actor.recurrent:
        steps = chunk_steps(torch.arange(batch.num_sequences), learner.cfg.train.chunk_length, batch.num_envs)
    _, stats = loss_fn(learner.actor, learner.critic, batch, steps, learner.cfg.train, learner.autocast)
    # approx_kl = mean((r - 1) - log r) and clipfrac are 0 exactly when every ratio r is 1
    assert stats.approx_kl.abs() < 1e-7 and stats.clipfrac == 0


@needs_compiler
@pytest.mark.parametrize("extra", [[], RECURRENT])
def test_compiled_training_compiles_once_and_tracks_the_eager_run(make_config, extra):
    runs = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        learner = build_learner(make_config(f"train.compile={str(compiled).lower()}", *extra), torch.device("cpu"))
        metrics = [read_metrics(train_iteration(learner)) for _ in range(3)]
        runs[compiled] = learner, metrics
    # the loss and the step's arithmetic (`minibatch_norms`), each one graph compiled once
    assert counters["stats"]["unique_graphs"] == 2, "the loss or the step's arithmetic recompiled (or broke)"
    (eager, eager_metrics), (comp, comp_metrics) = runs[False], runs[True]
    for a, b in zip(eager.actor.parameters(), comp.actor.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(eager.critic.parameters(), comp.critic.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert comp_metrics[-1]["policy_loss"] == pytest.approx(eager_metrics[-1]["policy_loss"], rel=1e-3, abs=1e-5)


def test_a_missing_cpu_compiler_is_a_clear_error(make_config, monkeypatch):
    from torch._inductor import cpp_builder

    def no_compiler():
        raise RuntimeError("no-such-compiler does not exist")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(ValueError, match="train.compile=true on the CPU needs a C\\+\\+ compiler"):
        build_learner(make_config("train.compile=true"), torch.device("cpu"))


def test_missing_triton_or_c_compiler_on_cuda_is_a_clear_error(monkeypatch):
    # checked before anything touches the GPU, so this runs without one
    import torch.utils._triton as triton_utils

    import agents.algo.compiled as compiled

    monkeypatch.setattr(triton_utils, "has_triton", lambda: False)
    with pytest.raises(ValueError, match="train.compile=true on CUDA needs Triton and a C compiler"):
        compile_loss(torch.device("cuda", 0))
    monkeypatch.setattr(triton_utils, "has_triton", lambda: True)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="needs Triton and a C compiler"):
        compile_loss(torch.device("cuda", 0))


def test_compiling_for_the_cpu_under_a_cap_uses_the_class_cache(monkeypatch):
    # train.compile and train.compile_rollout check the compiler before compiling on the CPU: under
    # the AVX2 class's caps that check also points inductor at the class's own cache
    from torch._inductor import cpp_builder

    from uavsim.machine.inductor_cache import CACHE_VARIABLE, class_cache_dir

    caps = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: "c++")  # no compiler needed for the wiring
    for name, value in caps.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(CACHE_VARIABLE, "unset below")  # restored (here: removed) after the test
    monkeypatch.delenv(CACHE_VARIABLE)
    check_compiler(torch.device("cpu"))
    assert os.environ[CACHE_VARIABLE] == str(class_cache_dir(caps))


def test_the_compiled_rollout_on_the_cpu_is_announced_as_slower(make_config, monkeypatch, capsys):
    # measured on the 2-core Zen 4 EPYC: inductor's rollout step collected 4.4x slower than the eager one
    from agents import train_mappo
    from agents.algo.compiled import cpu_rollout_warning

    assert cpu_rollout_warning(False, torch.device("cpu")) is None
    assert cpu_rollout_warning(True, torch.device("cuda")) is None
    monkeypatch.setattr(train_mappo, "_train", lambda cfg, resume, replicas, device: None)  # the banner only
    train_mappo.train(make_config("train.compile_rollout=true", "run.device=cpu"))
    note = cpu_rollout_warning(True, torch.device("cpu"))
    assert note.startswith("warning: train.compile_rollout=true on the CPU") and "docs/training.md" in note
    assert note in capsys.readouterr().err.splitlines()
