"""The GPU model: its arithmetic on hand-computed cases, and that its committed report covers every GPU row."""

import dataclasses
import json

import pytest

from benchmarks import gpu_model as gm
from benchmarks import gpu_model_arithmetic as arithmetic
from benchmarks import gpu_model_fit as fitting

C = arithmetic.Constants(
    launch_eager_us=20.0,
    launch_compiled_us=10.0,
    launch_replayed_us=2.0,
    launch_planner_us=5.0,
    sync_us=50.0,
    bw_fraction=0.5,
    mm_efficiency=0.25,
    process_s=10.0,
)


def test_a_piece_of_work_is_the_larger_of_launches_and_device_time_plus_its_syncs():
    # 1,000 kernels at 20 us = 20 ms of launches; 3.35 GB at half of 3.35 TB/s = 2 ms; 10 syncs at 50 us
    t = arithmetic.work_seconds(1000, 10, 3.35e9, 0.0, "H100 SXM", C)
    assert t["launches"] == pytest.approx(0.020)
    assert t["memory"] == pytest.approx(0.002)
    assert t["syncs"] == pytest.approx(0.0005)
    assert t["seconds"] == pytest.approx(0.0205)
    # bandwidth-bound on an H200: 10 kernels (0.2 ms) against 48 GB at 2.4 TB/s (20 ms) + 197 TFLOP at 197 TFLOP/s (1 s)
    t = arithmetic.work_seconds(10, 0, 48e9, 197e12, "H200", C)
    assert t["memory"] == pytest.approx(0.020) and t["matmul"] == pytest.approx(1.0)
    assert t["seconds"] == pytest.approx(1.020)
    # replayed from a graph: 2 us a kernel
    assert arithmetic.work_seconds(1000, 0, 0, 0, "H200", C, "replayed")["seconds"] == pytest.approx(0.002)


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="unknown GPU"):
        arithmetic.work_seconds(1, 0, 0, 0, "A100", C)
    with pytest.raises(ValueError, match="launch must be"):
        arithmetic.work_seconds(1, 0, 0, 0, "H200", C, "fast")
    with pytest.raises(ValueError, match="bw_fraction"):
        dataclasses.replace(C, bw_fraction=-1.0)
    with pytest.raises(ValueError, match="no GPU"):
        fitting.gpu_of("NVIDIA A100")


def test_the_iteration_fit_recovers_hand_made_counts():
    # kernels 100 + 7 per step; bytes 1,000 + 30 per step + 5 per env-step; FLOPs 2 per env-step; no syncs
    def shape(e, t):
        return {
            "envs": e,
            "steps": t,
            "kernels": 100 + 7 * t,
            "syncs": 0,
            "bytes": 1000 + 30 * t + 5 * e * t,
            "flops": 2 * e * t,
        }

    it = {f"{e}x{t}": shape(e, t) for e, t in ((16, 18), (32, 18), (16, 36))}
    f = arithmetic.iteration_fit(it)
    assert f["kernels_fixed"] == pytest.approx(100) and f["kernels_per_step"] == pytest.approx(7)
    assert f["bytes_fixed"] == pytest.approx(1000) and f["bytes_per_step"] == pytest.approx(30)
    assert f["bytes_per_env_step"] == pytest.approx(5) and f["flops_per_env_step"] == pytest.approx(2)
    assert f["same_kernels_at_two_batches"]
    n = arithmetic.iteration_counts(it, 4096, 64)
    assert n == pytest.approx(
        {"kernels": 548, "syncs": 0, "bytes": 1000 + 30 * 64 + 5 * 4096 * 64, "flops": 2 * 4096 * 64}
    )
    with pytest.raises(ValueError, match="shapes"):
        arithmetic.iteration_fit({"16x18": shape(16, 18), "32x18": shape(16, 18), "16x36": shape(16, 36)})


def test_a_run_adds_its_phases():
    # one iteration of 2 envs x 1 step: 10 kernels (0.2 ms); evaluations: none in 20 env steps
    it = {"16x18": {}, "32x18": {}, "16x36": {}}
    for k, (e, t) in zip(it, ((16, 18), (32, 18), (16, 36))):
        it[k] = {"envs": e, "steps": t, "kernels": 10, "syncs": 0, "bytes": 0, "flops": 0}
    call = {"kernels": 100, "syncs": 4, "bytes": 0, "flops": 0}
    lc = {"iteration": it, "eval_steps": 200, "eval_episode_argmax": call, "eval_episode_sampled": call}
    lc |= {"eval_baseline_greedy_call": call, "eval_baseline_coordinated_call": call}
    parts = arithmetic.learn_run(lc, envs=2, steps=1, env_steps=20, eval_interval=1e9, gpu="H100 SXM", c=C)
    assert parts["PPO iterations"]["seconds"] == pytest.approx(10 * 10 * 20e-6)  # 10 iterations
    # the planners' episodes, once: 2 planners x 200 calls x (100 x 5 us + 4 x 50 us)
    assert parts["planners' reference episodes (once)"]["seconds"] == pytest.approx(2 * 200 * 0.7e-3)
    assert arithmetic.total(parts)["seconds"] == pytest.approx(10 + 2e-3 + 0.28)
    # imitation: 4 demonstration calls of 1,000 planner ops (5 us) and 10 syncs (50 us): 5.5 ms each;
    # 1 DAgger round of 2 calls, each with a 10-kernel policy step (0.2 ms); cloning 2 epochs of
    # 1,024 frames then 1 of 2,048, 512 a minibatch: 8 minibatches of 50 kernels (1 ms) + 3 epochs' syncs
    lc["imitation"] = {
        "demo_call": {"kernels": 1000, "syncs": 10, "bytes": 0, "flops": 0},
        "dagger_policy_step": {"kernels": 10, "syncs": 0, "bytes": 0, "flops": 0},
        "clone_minibatch": {"kernels": 50, "syncs": 0, "bytes": 0, "flops": 0},
        "demo_steps": 4,
        "dagger_rounds": 1,
        "dagger_steps": 2,
        "epochs": [2, 1],
        "frames": [1024, 2048],
        "minibatch_steps": 512,
    }
    parts = arithmetic.learn_run(lc, envs=2, steps=1, env_steps=20, eval_interval=1e9, gpu="H100 SXM", c=C)
    assert parts["imitation: planner calls"]["seconds"] == pytest.approx(4 * 5.5e-3)
    assert parts["imitation: DAgger steps"]["seconds"] == pytest.approx(2 * 5.7e-3)
    assert parts["imitation: cloning"]["seconds"] == pytest.approx(8e-3 + 3 * 50e-6)
    # a design with one host sync per planner call saves 9 x 50 us on each of the 6 calls
    fewer = arithmetic.learn_run(lc, 2, 1, 20, 1e9, "H100 SXM", C, planner_syncs=1.0)
    assert arithmetic.total(parts)["seconds"] - arithmetic.total(fewer)["seconds"] == pytest.approx(6 * 9 * 50e-6)


def test_every_committed_gpu_row_is_predicted_in_the_committed_report():
    rows = fitting.measured_rows()
    kinds = {r["kind"] for r in rows}
    assert kinds == {"env", "train", "learn", "imitation"}
    assert len([r for r in rows if r["kind"] == "learn"]) == len(fitting.LEARN_ROWS) == 3  # the 92, 155 and 281 s runs
    env = {(r["folder"], r["variant"], r["envs"]) for r in rows if r["kind"] == "env"}
    for folder in ("gpu-nvidia-h100-2026-11-26", "gpu-nvidia-h100-2026-11-27b"):
        for variant in fitting.ENV_VARIANTS:
            assert {(folder, variant, n) for n in fitting.ENV_SIZES} <= env
    assert len([r for r in rows if r["kind"] == "train"]) == 8  # eager and captured on four loans
    counts = json.loads(gm.COUNTS.read_text())
    report = json.loads(gm.OUT.with_suffix(".json").read_text())
    reported = {fitting.key(r): r for r in report["rows"]}
    assert set(reported) == {fitting.key(r) for r in rows}  # the report is of today's results folders
    for r in rows:
        p = fitting.predict(r, counts, arithmetic.Constants(**report["constants"]))
        if r["kind"] == "env" and r["variant"] not in fitting.ENV_VARIANTS:
            assert p["seconds"] is None and r["variant"] in fitting.NOT_MODELLED  # VMAS's and the compiled step's
            continue
        assert p["seconds"] is not None and p["seconds"] > 0, fitting.key(r)
        got = reported[fitting.key(r)]
        assert got["predicted_s"] == pytest.approx(p["seconds"])  # the report is this code's arithmetic
        assert got["within"] or got["note"].strip(), f"{fitting.key(r)} misses without naming a term"


def test_the_counts_scale_as_the_model_assumes():
    counts = json.loads(gm.COUNTS.read_text())
    for env in counts["env"].values():  # kernels per step do not depend on the batch (sparse's resets do)
        for variant in ("batched-cuda", "batched-cuda-next-step-bf16"):
            assert env[variant]["64"]["kernels"] == env[variant]["256"]["kernels"]
    for tree, it in counts["trainer"].items():
        f = arithmetic.iteration_fit(it)
        assert f["same_kernels_at_two_batches"], tree
        check = it["32x36"]  # the fourth shape, not fitted: bytes and FLOPs within 1 %
        n = arithmetic.iteration_counts(it, check["envs"], check["steps"])
        assert n["bytes"] == pytest.approx(check["bytes"], rel=0.01) and n["flops"] == pytest.approx(
            check["flops"], rel=0.01
        )
        assert n["kernels"] == check["kernels"]


def test_the_counter_beside_the_model_counts_kernels_and_flops():
    import torch

    from benchmarks import gpu_counts

    a, b = torch.ones(4, 8), torch.ones(8, 2)
    c = gpu_counts.counted(lambda: (a @ b).sum().item())
    assert c["flops"] == 2 * 4 * 8 * 2  # the matmul's multiply-adds
    assert c["kernels"] == 2 and c["syncs"] == 1  # mm, sum; the read back
    assert set(gpu_counts.ENV_VARIANTS) == set(fitting.ENV_VARIANTS)


def test_only_the_newest_of_a_days_runs_is_fitted(tmp_path):
    from benchmarks.gpu_model_fit import newest_runs

    names = ["env-2026-11-26.json", "env-2026-11-26-2.json", "env-2026-11-26-3.json", "train-2026-11-26.json"]
    for name in [*names, "lone-x-2.json"]:
        (tmp_path / name).write_text("{}")
    got = [f.name for f in newest_runs(sorted(tmp_path.glob("*.json")))]
    assert got == ["env-2026-11-26-3.json", "lone-x-2.json", "train-2026-11-26.json"]  # a date's "-26" is no run
