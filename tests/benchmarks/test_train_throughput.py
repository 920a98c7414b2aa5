"""The training benchmark's --quick mode runs both pipelines and writes its three files (schema, not speed)."""

import json
import platform

import pytest
import torch

from benchmarks import torchrl_pipeline, train_throughput


def test_quick_run_writes_complete_results(tmp_path):
    paths = train_throughput.main(["--quick", "--out-dir", str(tmp_path), "--iterations", "1", "--threads", "1"])
    payload = json.loads(paths["json"].read_text())
    assert payload["benchmark"] == "train_throughput"
    rows = payload["results"]
    assert {(r["pipeline"], r["amp"]) for r in rows if r["device"] == "cpu"} == {
        (p, a)
        for p in ("ours", "ours-compiled", "torchrl", "torchrl-mlp", "torchrl-multiagentmlp")
        for a in ("off", "bf16")
    }
    for r in rows:
        assert r["agent_steps_per_s"] > 0 and len(r["iteration_seconds"]) == 1
        for key, base in (("speedup_vs_torchrl", "torchrl"), ("speedup_vs_torchrl_mlp", "torchrl-mlp")):
            other = next(b for b in rows if (b["pipeline"], b["device"], b["amp"]) == (base, r["device"], r["amp"]))
            assert r[key] == pytest.approx(r["agent_steps_per_s"] / other["agent_steps_per_s"])
    assert paths["png"].read_bytes()[:4] == b"\x89PNG" and paths["json"].name.endswith("-quick.json")
    assert "| ours | cpu | bf16 |" in paths["md"].read_text()
    # all pipelines ran in one process under the trainer's host-memory setting (glibc only)
    assert payload["machine"]["host_memory_retained"] == (platform.libc_ver()[0] == "glibc")


def test_profile_reports_where_the_time_goes(tmp_path):
    # a smaller iteration than --quick's (4 steps, 1 epoch of 2 minibatches): what is checked is how the
    # profile is split and reported, and torch.profiler's parsing of the events took 2.5 s a pipeline
    paths = train_throughput.main(
        [
            "--quick",
            "--out-dir",
            str(tmp_path),
            "--iterations",
            "1",
            "--threads",
            "1",
            "--num-steps",
            "4",
            "--epochs",
            "1",
            "--minibatches",
            "2",
            "--pipelines",
            "ours",
            "torchrl",
            "--profile",
            "1",
        ]
    )
    payload = json.loads(paths["json"].read_text())
    assert payload["settings"]["profile"] == 1
    for r in payload["results"]:
        p = r["profile"]
        parts = [p[k] for k in ("matmul_ms", "compiled_kernels_ms", "other_ops_ms", "outside_ops_ms")]
        assert all(x >= 0 for x in parts) and p["matmul_ms"] > 0 and p["compiled_kernels_ms"] == 0  # eager pipelines
        assert abs(sum(parts) - p["profiled_ms"]) <= 0.01 * p["profiled_ms"] + 1e-6 or p["outside_ops_ms"] == 0
        assert 0 < len(p["top_ops"]) <= 8 and all(o["self_ms"] >= 0 and o["calls"] > 0 for o in p["top_ops"])
        # our trainer's own phase marks split the iteration into rollout and update; TorchRL's has none
        assert (("rollout_ms" in p) and p["rollout_ms"] > 0 and p["update_ms"] > 0) == (r["pipeline"] == "ours")
    assert "Where the time goes" in paths["md"].read_text()
    assert paths["json"].name.endswith("-quick-subset.json")  # two of the five pipelines: not the full run's file


def test_devices_and_precisions_can_be_picked_and_the_captured_pipeline_named(tmp_path, monkeypatch):
    # what benchmarks/gpu_session.sh runs on a GPU (--devices cuda --amps bf16 --pipelines ours-captured),
    # here on the CPU with the captured pipeline's trainer wired to a backend that needs no compiler
    import agents.algo.learner as learner_module
    from agents.algo import ppo, rollout

    monkeypatch.setattr(
        learner_module,
        "compile_rollout_step",
        lambda device, **kwargs: rollout.compile_rollout_step(device, "aot_eager", actor=kwargs["actor"]),
    )
    monkeypatch.setattr(learner_module, "compile_loss", lambda device: ppo.minibatch_loss)
    seen = []
    real = train_throughput.ours_iteration_runner
    monkeypatch.setattr(train_throughput, "ours_iteration_runner", lambda *args: seen.append(args[1:]) or real(*args))
    paths = train_throughput.main(
        [
            "--quick",
            "--out-dir",
            str(tmp_path),
            "--iterations",
            "1",
            "--threads",
            "1",
            "--devices",
            "cpu",
            "--amps",
            "off",
            "--pipelines",
            "ours",
            "ours-captured",
        ]
    )
    payload = json.loads(paths["json"].read_text())
    assert [(r["pipeline"], r["device"], r["amp"]) for r in payload["results"]] == [
        ("ours", "cpu", "off"),
        ("ours-captured", "cpu", "off"),
    ]
    assert seen == [("off", "cpu", False, False), ("off", "cpu", True, True)]  # compiled, captured
    assert payload["settings"]["devices"] == ["cpu"] and payload["settings"]["amps"] == ["off"]
    assert paths["json"].name.endswith("-quick-subset.json")


@pytest.mark.parametrize(
    "argv",
    [
        ["--profile", "-1"],
        ["--iterations", "0"],
        ["--epochs", "0"],
        ["--minibatches", "3"],
        ["--num-envs", "0"],
        ["--devices", "gpu"],
        ["--amps", "fp16", "--devices", "cpu"],
        ["--amps", "fp8"],
        *(
            pytest.param(argv, marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible"))
            for argv in (["--devices", "cuda"], ["--amps", "fp16"])
        ),
    ],
)
def test_bad_arguments_are_rejected_before_any_run(tmp_path, argv):
    with pytest.raises(SystemExit):
        train_throughput.main(["--quick", "--out-dir", str(tmp_path), *argv])
    assert not list(tmp_path.iterdir())


def test_torchrl_fp16_pipeline_scales_its_loss_like_ours():
    # the benchmark runs fp16 on CUDA only; its GradScaler branch runs on the CPU just the same
    import types

    args = types.SimpleNamespace(num_envs=4, num_steps=4, epochs=1, minibatches=2, hidden=16)
    iteration = torchrl_pipeline.torchrl_iteration_runner(args, "fp16", "cpu", "ours")
    try:
        before = [p.detach().clone() for p in iteration.parameters()]
        iteration()
        iteration()
        assert iteration.scaler is not None and iteration.scaler.is_enabled()
        assert 0 < iteration.scaler.get_scale() < float("inf")
        assert any(not torch.equal(a, b) for a, b in zip(before, iteration.parameters()))  # it trained
    finally:
        iteration.close()
    eager = torchrl_pipeline.torchrl_iteration_runner(args, "bf16", "cpu", "ours")
    try:
        assert eager.scaler is None  # bf16 and fp32 need no loss scaling
    finally:
        eager.close()
