"""`python -m benchmarks.placement --quick` runs every contender (or says why it skipped one) and
writes its JSON, Markdown and plot (schema and consistency, not speed); the harness's own pieces."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("diffusers", reason="the benchmark needs the [pipelines] extra (diffusers)")
pytest.importorskip("transformers", reason="the benchmark needs the [pipelines] extra (transformers)")

from agents.placement import WorkerPool  # noqa: E402
from benchmarks.placement import contender_specs, same_results  # noqa: E402
from benchmarks.placement_contenders import ProcessPool, RayActorPool, Skip  # noqa: E402
from benchmarks.placement_report import main as report_main  # noqa: E402
from benchmarks.placement_report import markdown  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ROWS = {"local-1", "local-1-all-threads", "local-n", "process-pool", "accelerate", "ray-actor-pool", "ray-backend"}


def _has_ray_backend() -> bool:
    return "backend" in inspect.signature(WorkerPool).parameters or (
        importlib.util.find_spec("agents.placement.pool.ray") is not None
    )


def expected_skip(key: str) -> str | None:
    """The reason a row must give on this machine for being skipped, or None when it must run."""
    has_ray = importlib.util.find_spec("ray") is not None
    if key == "local-1-all-threads":
        return "full run only" if (os.cpu_count() or 1) > 1 else "1 core"
    if key in ("ray-actor-pool", "ray-backend") and not has_ray:
        return "Ray is not installed"
    if key == "ray-backend" and not _has_ray_backend():
        return "no Ray backend"
    if key == "accelerate" and importlib.util.find_spec("accelerate") is None:
        return "accelerate is not installed"
    return None


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
    stems = {p.suffix: p.stem for p in tmp_path.iterdir()}
    assert set(stems) == {".json", ".md", ".png"} and len(set(stems.values())) == 1, sorted(tmp_path.iterdir())
    stem = stems[".json"]
    assert stem.endswith("-quick")  # never the full run's files
    report = json.loads((tmp_path / f"{stem}.json").read_text())
    assert report["benchmark"] == "placement" and report["quick"] is True and report["schema_version"] == 2
    assert report["machine"]["devices_used"] == ["cpu", "cpu"] and report["machine"]["tag"] in stem
    cfg, contenders = report["config"], report["results"]["contenders"]
    rows, summary, targets = contenders["rows"], contenders["summary"], report["targets"]
    assert set(rows) == ROWS
    for key, row in rows.items():
        assert row["label"] and row["how"], key
        reason = expected_skip(key)
        if reason is not None:  # skipped, and saying why
            assert reason in (row["skipped"] or ""), (key, row["skipped"])
            assert "clip_s" not in row
            continue
        assert row["skipped"] is None, (key, row["skipped"])
        assert row["results_match"] is True, key  # no-op items in order, CLIP scores equal the 1-worker pool's
        for job in ("startup_s", "echo_s", "clip_s"):
            assert len(row[f"{job}_all"]) == cfg["reps"] and row[job] > 0, (key, job)
        assert row["overhead_us_per_item"] == pytest.approx(1e6 * row["echo_s"] / cfg["echo_items"])
        # agents.placement's pools also run the no-op job in batches (batch_size=); the others have no such option
        ours = key.startswith("local") or key == "ray-backend"
        assert ("overhead_batched_us_per_item" in row) == ours, key
        if ours:
            assert row["overhead_batched_us_per_item"] == pytest.approx(1e6 * row["echo_batched_s"] / cfg["echo_items"])
        assert row["clip_items_per_s"] == pytest.approx(cfg["clip_items"] / row["clip_s"])
        assert row["clip_speedup_vs_local_1"] == pytest.approx(rows["local-1"]["clip_s"] / row["clip_s"])
    # the headline ratios are the run times they name, divided (no speed is asserted)
    one, many = rows["local-1"], rows["local-n"]
    assert summary["local_clip_speedup_n_vs_1"] == pytest.approx(one["clip_s"] / many["clip_s"])
    assert summary["local_overhead_us_per_item_max"] == max(one["overhead_us_per_item"], many["overhead_us_per_item"])
    assert isinstance(summary["cpu_parallel_ceiling"], float)  # workers on the CPU: the machine's ceiling is measured
    assert isinstance(targets["overhead_met"], bool) and isinstance(targets["speedup_met"], bool)
    if rows["ray-backend"]["skipped"] is None:
        ratio = rows["ray-backend"]["clip_s"] / rows["ray-actor-pool"]["clip_s"]
        assert summary["ray_backend_vs_actor_pool_clip"] == pytest.approx(ratio)
        assert isinstance(targets["ray_backend_met"], bool)
    else:
        assert targets["ray_backend_met"] is None and "ray_backend_vs_actor_pool_clip" not in summary
    stage = report["results"]["stage_pipeline"]["threads_1"]
    assert (
        stage["sequential_s"] > 0
        and stage["pipeline_s"] > 0
        and set(stage["stage_s"]) == {"policy", "generator", "reward"}
    )
    md = (tmp_path / f"{stem}.md").read_text()
    assert all(f"| {row['label']} |" in md for row in rows.values()) and "Stage pipeline" in md
    assert (tmp_path / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / f"{stem}.png").unlink()
    report_main([str(tmp_path / f"{stem}.json")])  # the page and the plot, rendered again from the JSON alone
    assert (tmp_path / f"{stem}.md").read_text() == md and (tmp_path / f"{stem}.png").exists()
    # the page also renders a run whose Ray rows were skipped
    for key in ("ray-actor-pool", "ray-backend"):
        rows[key] = {k: rows[key][k] for k in ("label", "workers", "threads_per_worker", "how")}
        rows[key]["skipped"] = "Ray is not installed (pip install -e '.[ray]')"
    targets["ray_backend_met"] = None
    assert "not measured (Ray is not installed" in markdown(report)


def test_contenders_that_cannot_run_say_why():
    specs = {s["key"]: s for s in contender_specs(["cpu", "cpu"], quick=True)}
    assert set(specs) == ROWS and specs["local-1"]["skip"] is None and specs["local-n"]["devices"] == ["cpu", "cpu"]
    assert specs["local-1-all-threads"]["skip"] is not None  # the quick run leaves the reference row out
    gpu = {s["key"]: s["skip"] for s in contender_specs(["cuda:0", "cuda:1"], quick=False)}
    assert "CPU reference" in gpu["local-1-all-threads"]
    cfg = {"clip_image_size": 64}
    with pytest.raises(Skip, match="CPU workers only"):
        ProcessPool(["cuda:0", "cuda:1"], 1, cfg)
    if importlib.util.find_spec("ray") is not None:
        with pytest.raises(Skip, match="CPU workers only"):
            RayActorPool(["cuda:0", "cuda:1"], 1, cfg)


def test_results_check_catches_reordered_or_changed_results():
    import torch

    jobs = {"echo": [("echo", i) for i in range(3)], "clip": [("clip", None)] * 2}
    reference = [torch.tensor([0.5, 0.25]), torch.tensor([0.125, 1.0])]
    assert same_results({"echo": [0, 1, 2], "clip": [r.clone() for r in reference]}, jobs, reference)
    assert not same_results({"echo": [0, 2, 1], "clip": reference}, jobs, reference)
    assert not same_results({"echo": [0, 1, 2], "clip": [reference[0], reference[0]]}, jobs, reference)
    assert not same_results({"echo": [0, 1, 2], "clip": reference[:1]}, jobs, reference)
    assert same_results({"echo": [0, 1, 2], "clip": [[0.5, 0.25], [0.125, 1.0]]}, jobs, reference)  # from JSON


def test_devices_naming_no_device_is_rejected(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.placement", "--quick", "--devices", ",", "--out-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--devices names no device" in proc.stderr and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "devices, match",
    [
        ("gpu,gpu", "--devices 'gpu,gpu': devices[0] 'gpu' is not a device string"),
        ("cpu,mps", "only 'cpu' and 'cuda' are supported"),
    ],
)
def test_devices_that_are_not_devices_are_rejected_before_any_work(tmp_path, devices, match):
    # used to print the inventory, then a ValueError traceback from the first pool, exit 1
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.placement", "--quick", "--devices", devices, "--out-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and match in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("placement.py: error:")
    assert proc.stdout == "" and not list(tmp_path.iterdir())  # no inventory printed, nothing written


def test_gpus_this_machine_does_not_have_are_rejected_before_any_work(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.placement",
            "--quick",
            "--devices",
            "cuda:0,cuda:1",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "ask for CUDA, but torch.cuda.is_available() is False" in proc.stderr, proc.stderr
    assert proc.stdout == "" and not list(tmp_path.iterdir())
