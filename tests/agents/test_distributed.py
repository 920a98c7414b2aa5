"""torchrun on the CPU (gloo): two ranks train as one run, stay identical, and resume."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agents.algo.replicas import Replicas
from agents.run import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
SMOKE = [
    "--config",
    "configs/smoke.yaml",
    "run.device=cpu",
    "run.torch_threads=1",
    "run.progress=false",
    "run.eval_interval=0",
]


def torchrun(nproc: int, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "agents.train_mappo",
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def scalar_steps(run_dir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


@pytest.mark.slow
def test_two_ranks_train_identical_replicas_and_resume(tmp_path):
    run = tmp_path / "run"
    # smoke: 16 envs x 32 steps = 512 env steps per rank and iteration -> 1024 per iteration.
    first = torchrun(2, *SMOKE, f"run.dir={run}", "train.total_env_steps=4096", "run.checkpoint_interval=2048")
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("done: 4096 env steps") == 1  # rank 0 alone reports
    path = ckpt.list_checkpoints(run)[-1]
    payload = ckpt.load_checkpoint(path)
    assert payload["env_steps"] == 4096 and payload["iteration"] == 4  # steps of both ranks counted
    assert payload["world_size"] == 2
    checksums = payload["replica_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # identical parameters after 4 updates
    assert [r["env"]["first_env_index"] for r in payload["ranks"]] == [0, 16]  # disjoint environments
    assert scalar_steps(run, "charts/SPS") == [1024, 2048, 3072, 4096]  # x axis: env steps of all ranks
    assert not torch.equal(payload["ranks"][0]["env"]["state"]["cells"], payload["ranks"][1]["env"]["state"]["cells"])

    resumed = torchrun(2, "--resume", str(run), "run.progress=false", "train.total_env_steps=6144")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    payload = ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])
    assert payload["env_steps"] == 6144 and payload["replica_checksums"][0] == payload["replica_checksums"][1]

    wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.train_mappo",
            "--resume",
            str(run),
            "run.progress=false",
            "train.total_env_steps=8192",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1
    assert "written by 2 rank(s) but this run has 1" in wrong.stderr


@pytest.mark.slow
def test_two_recurrent_ranks_keep_their_own_hidden_states_and_resume(tmp_path):
    run = tmp_path / "run"
    first = torchrun(
        2,
        *SMOKE,
        "model.recurrent=true",
        f"run.dir={run}",
        "train.total_env_steps=2048",
        "run.checkpoint_interval=1024",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    payload = ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])
    assert payload["env_steps"] == 2048 and payload["replica_checksums"][0] == payload["replica_checksums"][1]
    hidden = [r["hidden"] for r in payload["ranks"]]  # each rank's environments' UAVs: [16, 3, 128]
    assert hidden[0].shape == hidden[1].shape == (16, 3, 128)
    assert hidden[0].abs().sum() > 0 and not torch.equal(hidden[0], hidden[1])

    resumed = torchrun(2, "--resume", str(run), "run.progress=false", "train.total_env_steps=3072")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    payload = ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])
    assert payload["env_steps"] == 3072 and payload["replica_checksums"][0] == payload["replica_checksums"][1]


@pytest.mark.slow
def test_two_ranks_clone_the_planner_into_identical_replicas(tmp_path):
    run = tmp_path / "run"
    done = torchrun(
        2,
        *SMOKE,
        "imitation.teacher=greedy",
        "imitation.env_steps=256",
        "imitation.epochs=2",
        "imitation.dagger_rounds=1",
        "imitation.dagger_env_steps=128",
        "imitation.dagger_epochs=1",
        "train.actor_warmup=0.5",
        f"run.dir={run}",
        "train.total_env_steps=1024",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("imitation of greedy: accuracy") == 1  # rank 0 alone reports
    payload = ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])
    assert payload["replica_checksums"][0] == payload["replica_checksums"][1]
    assert scalar_steps(run, "imitation/accuracy") == [0]


def test_single_process_replicas_are_no_ops():
    r = Replicas()
    assert r.is_main and not r.active
    x = torch.arange(3.0)
    assert r.mean(x) is x and r.sum(x) is x
    assert r.gather_objects({"a": 1}) == [{"a": 1}] and r.broadcast_object(5) == 5
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.full((2,), 3.0)
    r.average_gradients([p])
    assert torch.equal(p.grad, torch.full((2,), 3.0))
