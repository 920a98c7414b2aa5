"""torchrun helpers: environment parsing, device and backend choice, and a real 2-process gloo run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.placement import DistEnv, init_distributed, pick_backend, pick_device, read_dist_env

REPO = Path(__file__).resolve().parents[2]


def test_no_launcher_means_one_process():
    assert read_dist_env({}) == DistEnv(rank=0, local_rank=0, world_size=1, is_distributed=False)
    assert read_dist_env({"PATH": "/bin"}).is_main


def test_torchrun_variables_are_read():
    env = read_dist_env({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    assert env == DistEnv(rank=5, local_rank=1, world_size=8, is_distributed=True) and not env.is_main
    assert read_dist_env({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}).is_distributed


@pytest.mark.parametrize(
    "environ, match",
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK not"),
        ({"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "RANK='x' is not a non-negative integer"),
        ({"RANK": "-1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "RANK='-1'"),
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1.5"}, "WORLD_SIZE='1.5'"),
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
        ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "must both be < WORLD_SIZE=2"),
    ],
)
def test_malformed_variables_are_named(environ, match):
    with pytest.raises(ValueError, match=match):
        read_dist_env(environ)


def test_dist_env_checks_itself():
    with pytest.raises(ValueError, match="rank"):
        DistEnv(rank=3, world_size=2, is_distributed=True)
    with pytest.raises(ValueError, match="non-distributed"):
        DistEnv(world_size=2)
    with pytest.raises(TypeError, match="int"):
        DistEnv(rank="0")


def test_device_and_backend_choice(monkeypatch):
    assert pick_device(DistEnv(), prefer="cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert pick_backend("cpu") == "gloo" and pick_backend(torch.device("cuda", 1)) == "nccl"
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)  # Windows builds
    assert pick_backend(torch.device("cuda", 1)) == "gloo"
    with pytest.raises(ValueError, match="prefer"):
        pick_device(DistEnv(), prefer="tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(DistEnv(rank=1, local_rank=1, world_size=2, is_distributed=True)) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"a CUDA device was asked for, but this torch .* sees none: use the CPU"):
        pick_device(prefer="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    env = DistEnv(rank=6, local_rank=2, world_size=8, is_distributed=True)
    assert pick_device(env) == torch.device("cuda", 2)
    with pytest.raises(ValueError, match="local rank 5 has no GPU"):
        pick_device(DistEnv(rank=5, local_rank=5, world_size=8, is_distributed=True))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # the launcher gave each rank its own GPU
    assert pick_device(env) == torch.device("cuda", 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # a plain torchrun of 8 ranks on a one-GPU host
    with pytest.raises(ValueError, match="local rank 2 has no GPU: 1 visible"):
        pick_device(env)


def test_single_unlaunched_process_needs_no_process_group():
    env, dev = init_distributed(DistEnv(), "cpu")
    assert env == DistEnv() and dev == torch.device("cpu")
    assert not torch.distributed.is_initialized()


SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from agents.placement import init_distributed, pick_backend
    env, device = init_distributed()
    assert env.is_distributed and env.world_size == 2 and device.type == "cpu"
    assert dist.get_backend() == pick_backend(device) == "gloo"
    t = torch.tensor([env.rank + 1.0])
    dist.all_reduce(t)
    print(f"rank {env.rank} local {env.local_rank} sum {t.item():.0f}", flush=True)
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(90)
def test_two_process_torchrun_job_joins_a_gloo_group(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        str(script),
    ]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Two processes share the pipe: a line's text and its newline may land apart, so match, don't split.
    assert sorted(re.findall(r"rank \d local \d sum \d+", proc.stdout)) == [
        "rank 0 local 0 sum 3",
        "rank 1 local 1 sum 3",
    ]


def test_a_bare_cuda_device_is_cuda_0(monkeypatch):
    selected = []
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)  # no GPU here: record what would be set
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as a one-GPU machine answers
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    env, dev = init_distributed(DistEnv(), "cuda")
    assert dev == torch.device("cuda", 0) and selected == [torch.device("cuda", 0)]


def test_numpy_numbers_are_accepted_and_bools_are_not():
    env = DistEnv(rank=np.int64(1), local_rank=np.int32(1), world_size=np.int64(2), is_distributed=True)
    assert env == DistEnv(rank=1, local_rank=1, world_size=2, is_distributed=True) and type(env.rank) is int
    with pytest.raises(TypeError, match="DistEnv.rank must be an int, got bool"):
        DistEnv(rank=False)
    assert init_distributed(DistEnv(), "cpu", timeout_s=np.float32(30.0)) == (DistEnv(), torch.device("cpu"))
    with pytest.raises(ValueError, match="timeout_s"):
        init_distributed(DistEnv(), "cpu", timeout_s=0)


def test_a_numpy_timeout_reaches_the_process_group_as_seconds(monkeypatch):
    from datetime import timedelta

    joined = {}
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kwargs: joined.update(kwargs))
    env = DistEnv(rank=0, local_rank=0, world_size=2, is_distributed=True)
    init_distributed(env, "cpu", timeout_s=np.float32(30.0))  # timedelta itself refuses a NumPy float
    assert joined["timeout"] == timedelta(seconds=30) and joined["backend"] == "gloo"


@pytest.mark.parametrize("env", ["x", {"rank": 0}])
def test_an_env_that_is_not_a_dist_env_is_a_type_error_with_a_device_given_too(env):
    # with a device given, pick_device (which checks env) was skipped: AttributeError on env.is_distributed
    with pytest.raises(TypeError, match=f"env must be a DistEnv or None, got {type(env).__name__}"):
        init_distributed(env, "cpu")
