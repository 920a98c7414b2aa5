"""`python -m benchmarks.placement --quick` runs and writes its JSON and Markdown (schema, not speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("diffusers", reason="the benchmark needs the [pipelines] extra (diffusers)")
pytest.importorskip("transformers", reason="the benchmark needs the [pipelines] extra (transformers)")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_quick_benchmark_writes_its_results(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.placement", "--quick", "--out-dir", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jsons, mds = list(tmp_path.glob("placement-*.json")), list(tmp_path.glob("placement-*.md"))
    assert len(jsons) == 1 and len(mds) == 1 and jsons[0].stem == mds[0].stem
    assert jsons[0].stem.endswith("-quick")  # never the full run's file
    report = json.loads(jsons[0].read_text())
    assert report["benchmark"] == "placement" and report["quick"] is True and report["schema_version"] == 1
    assert report["machine"]["devices_used"] == ["cpu", "cpu"] and report["machine"]["tag"] in jsons[0].name
    summary = report["results"]["dp_map"]["summary"]
    for key in (
        "clip_speedup_steady",
        "clip_speedup_end_to_end",
        "clip_speedup_vs_1_worker_all_threads",
        "gen_speedup_steady",
        "overhead_us_per_item_1_worker",
        "overhead_us_per_item_2_workers",
        "clip_per_item_ms_1_worker",
    ):
        assert isinstance(summary[key], float), key
    assert isinstance(summary["cpu_parallel_ceiling"], float)  # workers on the CPU: the machine's ceiling is measured
    runs = report["results"]["dp_map"]["runs"]
    # the headline ratios are the run times they name, divided (no speed is asserted)
    one, many = runs["1 worker, 1 thread"], runs["2 workers, 1 thread each"]
    assert summary["clip_speedup_steady"] == pytest.approx(one["clip_s"] / many["clip_s"])
    assert summary["gen_speedup_steady"] == pytest.approx(one["gen_s"] / many["gen_s"])
    assert summary["clip_speedup_end_to_end"] == pytest.approx(
        (one["startup_s"] + one["clip_s"]) / (many["startup_s"] + many["clip_s"]))
    assert summary["overhead_us_per_item_2_workers"] == many["echo_us_per_item"]
    assert set(runs) == {"1 worker, 1 thread", f"1 worker, {os.cpu_count()} threads", "2 workers, 1 thread each"} or (
        os.cpu_count() == 1 and set(runs) == {"1 worker, 1 thread", "2 workers, 1 thread each"}
    )
    stage = report["results"]["stage_pipeline"]["threads_1"]
    assert (
        stage["sequential_s"] > 0
        and stage["pipeline_s"] > 0
        and set(stage["stage_s"]) == {"policy", "generator", "reward"}
    )
    assert isinstance(report["targets"]["clip_speedup_met"], bool)
    md = mds[0].read_text()
    assert "| 2 workers, 1 thread each |" in md and "Stage pipeline" in md


def test_devices_naming_no_device_is_rejected(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.placement", "--quick", "--devices", ",",
                           "--out-dir", str(tmp_path)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--devices names no device" in proc.stderr and not list(tmp_path.iterdir())



@pytest.mark.parametrize("devices, match", [
    ("gpu,gpu", "--devices 'gpu,gpu': device 'gpu' is not a device string"),
    ("cpu,mps", "only 'cpu' and 'cuda' are supported"),
])
def test_devices_that_are_not_devices_are_rejected_before_any_work(tmp_path, devices, match):
    # used to print the inventory, then a ValueError traceback from the first pool, exit 1
    proc = subprocess.run([sys.executable, "-m", "benchmarks.placement", "--quick", "--devices", devices,
                           "--out-dir", str(tmp_path)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and match in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("placement.py: error:")
    assert proc.stdout == "" and not list(tmp_path.iterdir())  # no inventory printed, nothing written


def test_gpus_this_machine_does_not_have_are_rejected_before_any_work(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible
    proc = subprocess.run([sys.executable, "-m", "benchmarks.placement", "--quick", "--devices", "cuda:0,cuda:1",
                           "--out-dir", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "ask for CUDA, but torch.cuda.is_available() is False" in proc.stderr, proc.stderr
    assert proc.stdout == "" and not list(tmp_path.iterdir())
