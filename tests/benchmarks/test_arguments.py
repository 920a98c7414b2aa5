"""Every benchmark checks its output folder and its arguments before measuring anything."""

from __future__ import annotations

import importlib

import pytest
import torch


@pytest.mark.parametrize("name", ["env_throughput", "train_throughput", "distributed", "update_matmuls"])
def test_an_out_dir_that_cannot_be_created_is_rejected_first(tmp_path, capsys, name):
    (tmp_path / "file").write_text("x")
    bench = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--quick", "--out-dir", str(tmp_path / "file" / "results")])
    assert exit_info.value.code == 2
    assert f"--out-dir: {tmp_path / 'file' / 'results'} cannot be created: {tmp_path / 'file'} is not a directory" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seconds", "inf"], "--seconds must be a finite number > 0, got inf"),
        pytest.param(
            ["--backends", "batched-cuda"],
            "--backends ['batched-cuda'] need a CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device"),
        ),
    ],
)
def test_env_benchmark_refuses_what_it_cannot_measure(tmp_path, capsys, argv, message):
    from benchmarks import env_throughput

    with pytest.raises(SystemExit) as exit_info:
        env_throughput.main(["--quick", "--out-dir", str(tmp_path), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_second_run_on_a_day_never_overwrites_the_first(tmp_path):
    from benchmarks.common import write_results

    payload = {"machine": {"cpu": "CPU X", "cpu_class": "AVX2", "cpu_count": 64, "usable_cores": 2, "date": "d"}}
    first = write_results("bench", payload, "first\n", None, tmp_path)
    second = write_results("bench", payload, "second\n", None, tmp_path)
    assert first["md"].name == "bench-cpu-x-avx2-2cores-d.md"  # the cores this process could use, as the report says
    assert second["md"].name == "bench-cpu-x-avx2-2cores-d-2.md"
    assert first["md"].read_text() == "first\n" and second["md"].read_text() == "second\n"


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("placement", ["--quick", "--out-dir", "{file}"]),
        ("env_ab", ["HEAD", "--out", "{dir}"]),
        ("gpu_counts", ["--what", "env", "--out", "{dir}"]),
        ("check_wheels", ["--out-dir", "{file}"]),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_measuring(tmp_path, capsys, module, argv):
    (tmp_path / "file").write_text("x")
    bench = importlib.import_module(f"benchmarks.{module}")
    argv = [a.format(file=tmp_path / "file", dir=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and ("directory" in err or "folder" in err or "not a dir" in err), err


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        ("gpu_counts", ["--what", "env", "--config", "c.yaml", "--out", "{tmp}/x.json"], "--config is for"),
        ("step_cost", ["--quick", "--env-only", "--episode-length", "1000"], "--episode-length must be <= max_steps"),
        pytest.param(
            "planner_cost",
            ["--device", "cuda"],
            "--device cuda: expected cpu, or cuda[:N] where torch",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device"),
        ),
    ],
)
def test_settings_a_benchmark_would_ignore_or_misreport_are_refused(tmp_path, capsys, module, argv, message):
    bench = importlib.import_module(f"benchmarks.{module}")
    argv = [a.format(tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*argv, *(["--out-dir", str(tmp_path)] if module != "gpu_counts" else [])])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_library_modules_and_a_bad_merge_folder_say_so(tmp_path, capsys):
    import subprocess
    import sys

    for module in ("trainer_cost", "graph_audit"):  # `--help` printed nothing and exited 0
        done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--help"], capture_output=True, text=True)
        assert done.returncode == 1 and "run python -m benchmarks.step_cost" in done.stderr
    few = [sys.executable, "-m", "benchmarks.mixed_sizes", "--num-envs", "5"]  # a traceback after 5 s of building
    done = subprocess.run(few, capture_output=True, text=True)
    assert done.returncode == 2 and "--num-envs must be >= 9 (one per size group" in done.stderr
    from benchmarks import gpu_model

    with pytest.raises(SystemExit) as exit_info:  # it merged nothing and rewrote the committed counts
        gpu_model.main(["--merge", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2 and "not a folder of benchmarks.gpu_counts outputs" in capsys.readouterr().err


def test_the_planner_benchmark_finds_the_preset_from_any_folder(tmp_path, monkeypatch):
    from benchmarks import planner_cost

    monkeypatch.chdir(tmp_path)
    assert planner_cost.tasks()["configs/default.yaml"].window_paths  # the preset's env, not EnvConfig()'s
