"""Captured training replays CUDA graphs: `train.compile_rollout` (the rollout step: env and policy)
and `train.compile` (the PPO minibatch: loss, backward, the step's arithmetic) under CUDA graph trees.

On any machine, `benchmarks.graph_audit` checks what CUDA graph trees check before they capture a
graph (a write into an input that is not a static address, a non-tensor input): the trainer's
graphs pass. On a CUDA device the trainer runs its captured iterations: no graph skipped
(`counters["inductor"]["cudagraph_skips"]`), graphs replayed, and the run stays on the eager one.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from agents.algo.learner import build_learner, read_metrics, train_iteration
from agents.algo.static_inputs import is_static, mark_static_tensors
from benchmarks.graph_audit import GraphAudit
from tests.agents.conftest import audited

# Episodes of at most 12 steps: resets and the env's rebuilds of prepared starts inside 24 steps.
SMALL = ["train.num_steps=24", "env.num_envs=6", "train.num_minibatches=2", "train.update_epochs=2"]
CAPTURED = ["train.compile=true", "train.compile_rollout=true"]
VARIANTS = {
    "feed_forward": [],
    "shared_map": ["model.actor_shared_map=true"],
    "recurrent": ["model.recurrent=true", "train.chunk_length=8"],
    "shared_map_bf16": ["model.actor_shared_map=true", "train.amp=bf16"],
    "near_clone": ["model.actor_shared_map=true", "imitation.teacher=greedy", "train.clone_kl_coef=0.5"],
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_the_audit_sees_what_cuda_graph_trees_skip():
    """A write into an input that is not a static address is the skip the GPUs of 2026-11-26/27
    logged ("mutated inputs"); marked static, the same function passes."""

    def count(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return y * 2

    x, y = torch.zeros(3), torch.ones(3)
    audit = GraphAudit()
    torch.compile(count, fullgraph=True, backend=audit)(x, y)
    assert len(audit.skip_reasons) == 1 and "mutated inputs (1 instances)" in audit.skip_reasons[0]
    torch._dynamo.reset()
    mark_static_tensors(x)
    audit = GraphAudit()
    torch.compile(count, fullgraph=True, backend=audit)(x, y)
    assert audit.skip_reasons == [] and x.tolist() == [2.0, 2.0, 2.0]
    assert audit.graphs[0].static == {0}  # x; y is copied into the graph's memory before a replay

    def zero_where_positive(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[y > 0] = 0.0  # a write through a boolean mask: nonzero() inside, a host sync
        return y

    torch._dynamo.reset()
    audit = GraphAudit()
    torch.compile(zero_where_positive, fullgraph=True, backend=audit)(torch.randn(5))
    assert len(audit.skip_reasons) == 1 and "incompatible op (aten.index_put" in audit.skip_reasons[0]


def test_mark_static_tensors_reaches_the_rollouts_state_but_not_the_networks(make_config):
    learner = build_learner(make_config(*SMALL, "model.actor_shared_map=true"), torch.device("cpu"))
    marked = mark_static_tensors(learner.env, learner.storage, learner.stats, learner.action_noise)
    assert marked > 20
    env = learner.env
    assert all(is_static(t) for t in (env._buf, env._prep_buf, *env._prep_obs.values(), env._pending))
    assert is_static(learner.storage.local) and is_static(learner.storage.row) and is_static(learner.stats.sums)
    assert is_static(learner.action_noise.step)
    assert not any(is_static(p) for p in learner.actor.parameters())  # dynamo's own business


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_captured_training_makes_no_graph_cuda_graph_trees_would_skip(make_config, monkeypatch, variant):
    """Two captured iterations: every graph (the rollout step's, the minibatch's forward, backward
    and step arithmetic) writes only static inputs and takes only tensors; a replay copies in only
    what is new at each call (the observation, agent ids and hidden state; the minibatch's draw and
    the iteration's advantages, returns and values), not the env's tables or the stored rollout."""
    audit = GraphAudit()
    audited(monkeypatch, audit)
    learner = build_learner(make_config(*SMALL, *CAPTURED, *VARIANTS[variant]), torch.device("cpu"))
    for _ in range(2):
        metrics = train_iteration(learner)
    assert audit.skip_reasons == []
    graphs = {label: [g for g in audit.graphs if g.label == label] for label in ("rollout", "loss", "norms")}
    assert [g.kind for g in graphs["loss"]] == ["forward", "backward"]  # compiled once
    assert [g.kind for g in graphs["norms"]] == ["inference"]
    assert 1 <= len(graphs["rollout"]) <= 3  # each side of the env's rebuild branch, and the first call's counter
    assert len(audit.graphs) == sum(map(len, graphs.values()))
    for g in graphs["rollout"]:
        assert g.inputs - len(g.static) <= 4, g  # obs local, obs state, agent ids, hidden state
    loss_forward = graphs["loss"][0]
    assert loss_forward.inputs - len(loss_forward.static) <= 6  # steps, advantages, values, returns, clone, starts
    # CUDA graph trees' generations: each rollout step begins one (else the steps chain into one
    # tree, T graphs deep), and a minibatch's step arithmetic runs in its forward's (else a replay
    # could overwrite the gradients and statistics it reads, which the forward and backward produced)
    label = [audit.graphs[i].label for i, _ in audit.runs]
    generation = [gen for _, gen in audit.runs]
    for i in range(1, len(audit.runs)):
        if label[i] == "rollout":
            assert generation[i] != generation[i - 1], (i, label[i - 1])
        if label[i] == "norms":
            forward = max(j for j in range(i) if audit.graphs[audit.runs[j][0]].kind == "forward")
            assert generation[i] == generation[forward], i
    assert label.count("norms") == 2 * 2 * 2  # iterations x epochs x minibatches
    assert all(isinstance(v, float) for v in read_metrics(metrics).values())


def test_the_captured_update_computes_the_eager_one(make_config, monkeypatch):
    """The audited graphs are AOT autograd's eager kernels: the captured run's parameters and
    metrics equal the eager run's to float32 rounding (fused log-softmax and reductions aside)."""
    runs = {}
    for captured in (False, True):
        audit = GraphAudit()
        audited(monkeypatch, audit)
        torch.manual_seed(0)
        learner = build_learner(
            make_config(*SMALL, "model.actor_shared_map=true", *(CAPTURED if captured else [])), torch.device("cpu")
        )
        runs[captured] = learner, [read_metrics(train_iteration(learner)) for _ in range(3)]
    (eager, eager_metrics), (comp, comp_metrics) = runs[False], runs[True]
    for a, b in zip(
        [*eager.actor.parameters(), *eager.critic.parameters()], [*comp.actor.parameters(), *comp.critic.parameters()]
    ):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for name, value in eager_metrics[-1].items():
        assert comp_metrics[-1][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


# -- on a GPU --------------------------------------------------------------------------------------
def replays_per_iteration(learner, iterations: int, monkeypatch) -> list[int]:
    """CUDA graph replays in each of `iterations` training iterations of `learner`."""
    replays = [0]
    replay = torch.cuda.CUDAGraph.replay

    def counted(self):
        replays[0] += 1
        return replay(self)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counted)
    out = []
    for _ in range(iterations):
        replays[0] = 0
        train_iteration(learner)
        torch.cuda.synchronize()
        out.append(replays[0])
    monkeypatch.undo()
    return out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.timeout(300)  # inductor builds the rollout step's, the loss's and the step arithmetic's kernels
def test_captured_training_replays_cuda_graphs_and_skips_none(make_config, monkeypatch):
    """`train.compile` + `train.compile_rollout` on CUDA, fp32, the shared-map actor: after two
    iterations (warm-up, then recording), every rollout step and every minibatch's forward,
    backward and step arithmetic replays a CUDA graph, no graph is skipped, and the run stays on
    the eager run.

    Tolerances: each parameter tensor within 1e-4 of the eager one in relative norm after 4
    iterations of 4 Adam steps (inductor's kernels round reductions and fusions differently from
    eager, fp32 without TF32; the CPU's compiled-training test holds elementwise at rtol 1e-4 over 3
    iterations; a replay reruns the recorded kernels, so it adds nothing), and the first iteration's
    policy loss within 1e-4 (the captured rollout's fused actor is within 1e-4 of the eager chain's
    log-probabilities, tests/agents/test_rollout_graph.py, which bounds the first ratios' deviation)."""
    cfg = [*SMALL, "run.device=cuda", "train.amp=off", *VARIANTS["shared_map"]]
    eager = build_learner(make_config(*cfg), torch.device("cuda"))
    eager_metrics = [read_metrics(train_iteration(eager)) for _ in range(4)]
    captured = build_learner(make_config(*cfg, *CAPTURED), torch.device("cuda"))
    metrics = [read_metrics(train_iteration(captured)) for _ in range(2)]
    replays = replays_per_iteration(captured, 2, monkeypatch)
    assert counters["inductor"]["cudagraph_skips"] == 0
    tc = captured.cfg.train
    per_iteration = tc.num_steps + 3 * tc.update_epochs * tc.num_minibatches  # rollout steps; fw, bw, arithmetic
    assert min(replays) >= per_iteration, replays
    names = [n for n, _ in [*eager.actor.named_parameters(), *eager.critic.named_parameters()]]
    want = [*eager.actor.parameters(), *eager.critic.parameters()]
    got = [*captured.actor.parameters(), *captured.critic.parameters()]
    for name, a, b in zip(names, want, got):
        assert torch.linalg.vector_norm(b - a) <= 1e-4 * torch.linalg.vector_norm(a) + 1e-7, name
    assert metrics[0]["policy_loss"] == pytest.approx(eager_metrics[0]["policy_loss"], abs=1e-4)
    assert metrics[0]["value_loss"] == pytest.approx(eager_metrics[0]["value_loss"], rel=1e-4)
    assert captured.stats.read()["episodes"] > 0
