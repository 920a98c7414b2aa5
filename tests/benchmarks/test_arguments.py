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
