"""The trainer's rollout step captures whole: `torch.compile(rollout_step, fullgraph=True)` traces
the policy step, `env.step`, the storage writes and the episode statistics with no graph break (a
break raises), and the compiled rollout fills the storage exactly as the eager one."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend

from agents.algo.layers import Form
from agents.algo.learner import build_learner, collect, rollout_once
from agents.algo.networks import with_form
from agents.algo.rollout import agent_ids, rollout_step

# Episodes of at most 12 steps: resets and the env's rebuilds of prepared starts inside 24 steps.
ROLLOUT = ["train.num_steps=24", "train.chunk_length=8", "env.num_envs=6", "train.num_minibatches=2"]


def storage_fields(storage) -> dict[str, torch.Tensor]:
    return {f.name: getattr(storage, f.name) for f in dataclasses.fields(storage)}


@pytest.mark.parametrize(
    "variant",
    [["model.actor_shared_map=true"], ["model.recurrent=true"], ["model.actor_shared_map=true", "train.amp=bf16"]],
    ids=["shared-map", "recurrent", "shared-map-bf16"],
)
def test_the_rollout_step_is_one_graph_and_fills_the_eager_storage(make_config, variant):
    torch._dynamo.reset()
    cfg = make_config(*ROLLOUT, *variant)
    eager, captured = build_learner(cfg, torch.device("cpu")), build_learner(cfg, torch.device("cpu"))
    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(rollout_step, fullgraph=True, backend=counter)  # a graph break raises here
    captured.rollout_fn = step
    for learner in (eager, captured):
        collect(learner)
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
    for _ in range(learner.storage.actions.shape[0]):
        rollout_once(learner, agent, t)
    monkeypatch.undo()
    assert int(t) == learner.storage.actions.shape[0]


def _rollouts(make_config, compile_rollout: bool, device: str):
    """Two iterations' storage of the default-like learner, eager or with train.compile_rollout."""
    cfg = make_config(
        *ROLLOUT,
        "model.actor_shared_map=true",
        f"run.device={device}",
        f"train.compile_rollout={str(compile_rollout).lower()}",
    )
    learner = build_learner(cfg, torch.device(device))
    from agents.algo.learner import train_iteration

    snapshots = []
    for _ in range(2):
        train_iteration(learner)
        snapshots.append({k: v.clone() for k, v in storage_fields(learner.storage).items()})
    return learner, snapshots


def test_train_compile_rollout_runs_the_captured_step(make_config, monkeypatch):
    """The trainer's wiring, with a backend that needs no compiler (inductor's own kernels are
    tested on CUDA below; on the CPU they take minutes to build)."""
    import agents.algo.learner as learner_module
    from agents.algo import rollout

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(
        learner_module,
        "compile_rollout_step",
        lambda device, **kwargs: rollout.compile_rollout_step(device, counter, **kwargs),
    )
    captured, got = _rollouts(make_config, True, "cpu")
    _, want = _rollouts(make_config, False, "cpu")
    assert counter.frame_count >= 1
    for snap_got, snap_want in zip(got, want):
        for name, value in snap_want.items():
            assert torch.equal(value, snap_got[name]), name


def test_the_inductor_form_of_the_rollout_plays_the_eager_actions(make_config):
    """The actor in `Form.fused` (what `train.compile_rollout` compiles), run eagerly: the same actions
    and trajectories, log-probabilities within rounding of the eager chain's (bf16)."""
    cfg = make_config(*ROLLOUT, "model.actor_shared_map=true", "train.amp=bf16")
    chain, pointwise = build_learner(cfg, torch.device("cpu")), build_learner(cfg, torch.device("cpu"))
    pointwise.policy = with_form(pointwise.actor, Form.fused)
    for learner in (chain, pointwise):
        collect(learner)
    want, got = storage_fields(chain.storage), storage_fields(pointwise.storage)
    for name, value in want.items():
        if name == "logprobs":
            torch.testing.assert_close(got[name], value, atol=1e-4, rtol=0)
            assert not torch.equal(got[name], value)  # the forms round differently: this path ran
        else:
            assert torch.equal(value, got[name]), name


def test_the_policy_step_compiled_by_inductor_stays_within_1e4_of_the_eager_one():
    """The trainer config's bf16 policy step as `train.compile_rollout` compiles it on CUDA
    (`Form.fused`, its options), here with inductor's C++ kernels: the eager actions,
    log-probabilities within 1e-4, headings within one float32 rounding."""
    from agents.algo.compiled import check_compiler
    from agents.algo.rollout import inductor_options
    from benchmarks.trainer_cost import learner_for

    check_compiler(torch.device("cpu"), "this test")
    torch._dynamo.reset()
    learner = learner_for(64, 2, "bf16", 100)
    agent = agent_ids(64, learner.env.num_uavs, learner.env.device)
    step = learner.action_noise.step.clone()
    with torch.no_grad():
        actions, logprobs, heading, _ = learner.actor.act(learner.obs, agent, learner.action_noise, learner.autocast)
    learner.action_noise.step.copy_(step)
    fused = with_form(learner.actor, Form.fused)
    compiled = torch.compile(torch.no_grad()(fused.act), fullgraph=True, options=inductor_options(torch.device("cpu")))
    got_actions, got_logprobs, got_heading, _ = compiled(learner.obs, agent, learner.action_noise, learner.autocast)
    torch._dynamo.reset()
    assert torch.equal(got_actions, actions)
    torch.testing.assert_close(got_heading, heading, atol=1e-7, rtol=0)  # its distance: a float32 rounding apart
    torch.testing.assert_close(got_logprobs, logprobs, atol=1e-4, rtol=0)


def test_compile_rollout_step_compiles_the_fused_form_where_it_is_faster(make_config, monkeypatch):
    # inductor: the actor in the fused form on CUDA (with CUDA graphs) and on the CPU in float32,
    # the actor as built for a CPU's bf16; another backend: the actor as built, no options
    from agents.algo import compiled, rollout

    actor = build_learner(make_config(*ROLLOUT), torch.device("cpu")).actor
    calls, policies = [], []
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: calls.append((fn, kwargs)) or fn)
    monkeypatch.setattr(compiled, "check_compiler", lambda device, key: None)  # no Triton needed to wire it
    for device, dtype in (("cuda", torch.bfloat16), ("cpu", torch.float32), ("cpu", torch.bfloat16)):
        policies.append(rollout.compile_rollout_step(torch.device(device), actor=actor, dtype=dtype)[1])
    policies.append(rollout.compile_rollout_step(torch.device("cpu"), backend="aot_eager", actor=actor)[1])
    assert [fn for fn, _ in calls] == [rollout_step] * 4
    (_, cuda_kwargs), (_, fp32_kwargs), _, (_, other_kwargs) = calls
    assert cuda_kwargs["fullgraph"] and cuda_kwargs["options"]["emulate_precision_casts"]
    assert cuda_kwargs["options"]["triton.cudagraphs"]  # reduce-overhead's CUDA graphs
    assert cuda_kwargs["options"]["eager_numerics.division_rounding"]  # torch 2.13's name: triton divides as eager
    assert fp32_kwargs["options"] == {"emulate_precision_casts": True}
    assert other_kwargs == {"fullgraph": True, "backend": "aot_eager"}
    cuda, fp32, bf16, other = policies
    assert cuda.net.first.form == fp32.net.first.form == Form.fused and cuda is not actor
    assert bf16 is actor and other is actor and actor.net.first.form == Form.epilogue


def test_the_learner_compiles_the_rollout_for_its_compute_dtype(make_config, monkeypatch):
    import agents.algo.learner as learner_module

    seen = []
    monkeypatch.setattr(
        learner_module,
        "compile_rollout_step",
        lambda device, **kwargs: seen.append((device, kwargs)) or (rollout_step, kwargs["actor"]),
    )
    for amp, dtype in (("off", torch.float32), ("bf16", torch.bfloat16)):
        learner = build_learner(
            make_config(*ROLLOUT, "train.compile_rollout=true", f"train.amp={amp}"), torch.device("cpu")
        )
        assert seen[-1] == (torch.device("cpu"), {"actor": learner.actor, "dtype": dtype})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_graph_rollout_equals_the_eager_one(make_config, monkeypatch):
    """CUDA graphs of the eager kernels (the `cudagraphs` backend) store exactly what eager does."""
    import agents.algo.learner as learner_module
    from agents.algo import rollout

    torch._dynamo.reset()
    monkeypatch.setattr(
        learner_module,
        "compile_rollout_step",
        lambda device, **kwargs: rollout.compile_rollout_step(device, "cudagraphs", **kwargs),
    )
    _, got = _rollouts(make_config, True, "cuda")
    _, want = _rollouts(make_config, False, "cuda")
    for snap_got, snap_want in zip(got, want):
        for name, value in snap_want.items():
            assert torch.equal(value, snap_got[name]), name


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_inductor_rollout_on_cuda_plays_the_eager_actions(make_config):
    """`train.compile_rollout` on CUDA (inductor, CUDA graphs): the eager actions and trajectories,
    log-probabilities within rounding (the actor in `Form.fused`)."""
    torch._dynamo.reset()
    _, got = _rollouts(make_config, True, "cuda")
    _, want = _rollouts(make_config, False, "cuda")
    for snap_got, snap_want in zip(got, want):
        for name, value in snap_want.items():
            if name == "logprobs":
                torch.testing.assert_close(snap_got[name], value, atol=1e-4, rtol=0)
            elif name == "heading":  # inductor's CPU kernels: the distance a float32 rounding apart
                torch.testing.assert_close(snap_got[name], value, atol=1e-6, rtol=0)
            else:
                assert torch.equal(value, snap_got[name]), name


def test_outputs_kept_copies_what_the_next_cuda_graph_replay_overwrites():
    """The observation and hidden state a captured step returns live in its CUDA graphs' memory, which
    the next call's replay reuses: the learner gets copies (torch 2.11 on an H100 raised "accessing
    tensor output of CUDAGraphs that has been overwritten" without them)."""
    from agents.algo.rollout import outputs_kept

    out_obs, out_hidden = {"local": torch.ones(2, 3), "state": torch.zeros(2, 4)}, torch.full((2, 3, 5), 2.0)
    obs, hidden = outputs_kept(lambda *args: (out_obs, out_hidden))()
    for got, returned in [(obs["local"], out_obs["local"]), (obs["state"], out_obs["state"]), (hidden, out_hidden)]:
        assert torch.equal(got, returned) and got.data_ptr() != returned.data_ptr()
    assert outputs_kept(lambda *args: (out_obs, None))()[1] is None
