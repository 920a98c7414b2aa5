"""The env benchmark's --quick mode runs every backend and writes JSON, Markdown and PNG (schema, not speed)."""

import argparse
import gc
import json
import statistics
import sys

import pytest
import torch

from benchmarks import env_throughput

# One torch thread: what these tests check does not depend on it, and two threads on a 2-core machine
# that runs anything else (another pytest-xdist worker) made the quick run several times slower.
QUICK = ["--quick", "--repeats", "1", "--seconds", "0.02", "--threads", "1"]


def run_main(argv: list[str]) -> dict:
    """`env_throughput.main(argv)` with the test session's objects frozen (gc.freeze), and torch's
    thread count (which main sets) put back after. `measure` runs gc.collect() before each of its
    26 points; after the agents' tests it walked some 600k objects of theirs, 0.4 s a point, half
    of this module's time. Frozen, it walks the benchmark's own objects, as in its own process."""
    threads = torch.get_num_threads()
    gc.freeze()
    try:
        return env_throughput.main(argv)
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One --quick run of every backend (paths, JSON payload), read by the schema and cost-model tests."""
    paths = run_main([*QUICK, "--out-dir", str(tmp_path_factory.mktemp("quick"))])
    return paths, json.loads(paths["json"].read_text())


def test_quick_run_writes_complete_results(quick_run):
    paths, payload = quick_run
    assert set(paths) == {"json", "md", "png"}
    assert paths["json"].name.endswith("-quick.json")  # never the full run's file
    assert payload["benchmark"] == "env_throughput" and payload["quick"] is True
    for key in ("cpu", "cpu_count", "torch", "date"):
        assert key in payload["machine"]
    rows = payload["results"]
    errors = [r for r in rows if "error" in r]
    assert not errors, errors
    backends = {r["backend"] for r in rows}
    assert {
        "reference-loop",
        "reference-async",
        "batched-cpu",
        "batched-cpu-sparse",
        "batched-cpu-dense",
        "batched-cpu-next-step-bf16",
        "vmas-navigation",
    } <= backends
    for r in rows:
        assert r["env_steps_per_s"] > 0
        assert r["uav_steps_per_s"] == pytest.approx(r["env_steps_per_s"] * payload["config"]["num_uavs"])
    # each ratio is the row's rate over the rate it names, measured in this run
    # (the reference loop: the median of its rows, one rate for every size: its rows of 64 envs and more time the
    # same work)
    ref = statistics.median(r["env_steps_per_s"] for r in rows if r["backend"] == "reference-loop")
    vmas = {r["num_envs"]: r["env_steps_per_s"] for r in rows if r["backend"] == "vmas-navigation"}
    for r in rows:
        assert r["speedup_vs_reference_loop"] == pytest.approx(r["env_steps_per_s"] / ref)
        if r["backend"].startswith("batched-cpu"):
            assert r["speedup_vs_vmas_cpu"] == pytest.approx(r["env_steps_per_s"] / vmas[r["num_envs"]])
        assert len(r["repeats_env_steps_per_s"]) == 1
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = paths["md"].read_text()
    assert "| batched-cpu | 1024 |" in table and "x reference loop" in table
    assert f"about B / {payload['config']['max_steps']} of them end in every step" in table


def test_the_staggered_envs_end_at_a_steady_rate():
    # staggered over the whole episode, as the benchmark starts them: B / max_steps end in every step (over 100 of
    # the 200 steps, until 2026-12-05, the sparse mode's repeats alternated between B / 100 ends a step and none)
    from uavsim import EnvConfig

    cfg = EnvConfig()  # random moves do not reach the target in its 200 steps: every episode runs them all
    env = env_throughput.timed_env(cfg, 200, variant="-sparse")
    gen = torch.Generator().manual_seed(0)
    ends = []
    for _ in range(2 * cfg.max_steps):
        _, _, terminated, truncated, _ = env.step(torch.randint(0, cfg.num_actions, (200, cfg.num_uavs), generator=gen))
        ends.append(int((terminated | truncated).sum()))
    assert ends == [1] * (2 * cfg.max_steps)


def test_bytes_per_step_are_the_cost_models_count_for_each_variant(quick_run):
    from benchmarks.step_cost import bytes_per_env_step
    from uavsim import EnvConfig

    # what the quick run recorded: model_bytes_per_env_step(EnvConfig(), every variant), as `measure` calls it
    payload = quick_run[1]
    counted = payload["bytes_per_env_step_model"]
    assert payload["config"] == EnvConfig().to_dict()
    assert set(counted) == {"default", "sparse", "dense", "next-step-bf16"}
    assert counted["sparse"] == bytes_per_env_step(
        EnvConfig(), num_envs=env_throughput.MODEL_ENVS, steps=env_throughput.MODEL_STEPS, reset_mode="sparse"
    )
    # dense resets build a fresh episode for every environment each step: several times the traffic;
    # the prepared starts, rebuilt every 18 steps, cost far less; next-step bf16 least of all
    assert counted["dense"] > 2 * counted["default"] > 0
    assert counted["next-step-bf16"] < counted["default"]
    small = env_throughput.model_bytes_per_env_step(EnvConfig(num_uavs=2, launch_size=2), ["-sparse"])
    assert counted["sparse"] > small["sparse"] > 0
    assert env_throughput.variant_of("batched-cuda-next-step-bf16") == "-next-step-bf16"
    assert env_throughput.variant_of("batched-cpu-dense") == "-dense"
    assert env_throughput.variant_of("batched-cpu") == ""


def test_without_vmas_its_backends_are_skipped_with_a_one_line_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vmas", None)  # `import vmas` now raises ImportError
    args = argparse.Namespace(quick=True, max_gpu_envs=1 << 20, workers=2, compile_cpu=False, backends=None)
    names = [b[0] for b in env_throughput.available_backends(args)]
    assert names and not any(n.startswith("vmas") for n in names)
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["vmas is not installed (pip install '.[peers]'): skipping the VMAS backends"]


def test_quick_and_subset_runs_never_take_the_full_runs_file_names(tmp_path, monkeypatch):
    # the cost model's counts are the tests above's subject (and took most of this run): here a stand-in
    monkeypatch.setattr(
        env_throughput,
        "model_bytes_per_env_step",
        lambda cfg, variants: {env_throughput.variant_name(v): 1.0 for v in variants},
    )
    paths = run_main([*QUICK, "--out-dir", str(tmp_path), "--backends", "batched-cpu"])
    assert paths["json"].name.endswith("-quick-subset.json")
    rows = json.loads(paths["json"].read_text())["results"]
    assert {r["backend"] for r in rows} == {"batched-cpu"}


@pytest.mark.parametrize(
    "argv", [["--backends", "batched-cpux"], ["--threads", "0"], ["--repeats", "0"], ["--seconds", "0"]]
)
def test_bad_arguments_are_rejected_before_any_run(tmp_path, argv):
    with pytest.raises(SystemExit):
        env_throughput.main(["--quick", "--out-dir", str(tmp_path), *argv])
    assert not list(tmp_path.iterdir())
