"""Data-parallel scaling under torchrun: 1 vs K ranks, each rank one thread (CPU) or one GPU.

    python -m benchmarks.distributed                 # ranks 1 and 2 on the CPU (gloo)
    python -m benchmarks.distributed --ranks 1 2 4 8 --device cuda

For each rank count it launches ``torchrun --standalone --nproc_per_node=K`` on this module's
worker, which measures, with every rank busy at once:
    env     env-steps/s of the batched env alone (random actions), summed over ranks;
    train   agent-steps/s of whole MAPPO iterations (collection + update + gradient all-reduce);
    sync    seconds per PPO minibatch update with our one flat gradient all-reduce vs PyTorch
            DDP (bucketed hooks) on the same networks and minibatch.
Scaling efficiency = rate(K) / (K x rate(1)).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    RESULTS_DIR,
    TRAINER_CONFIG,
    fmt_rate,
    hardware_label,
    machine_info,
    setup_host,
    sync,
    write_results,
)
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg

REPO = Path(__file__).resolve().parent.parent


def _timed(replicas, device: str, fn, seconds: float) -> tuple[int, float]:
    """Call ``fn`` about ``seconds`` long on every rank; return (calls, elapsed).

    ``fn`` may run collectives, so every rank must make the same number of calls: rank 0 sizes
    the loop from one timed call and tells the others.
    """
    replicas.barrier()
    start = time.perf_counter()
    fn()
    sync(device)
    calls = replicas.broadcast_object(int(min(10_000, max(2, seconds / max(time.perf_counter() - start, 1e-6)))))
    replicas.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return calls, time.perf_counter() - start


def worker(args) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from agents.algo.learner import build_learner, prepare_batch, read_metrics, train_iteration
    from agents.config import load_config
    from agents.run.distributed import setup
    from agents.train_mappo import resolve_for_machine
    from uavsim import EnvConfig, UAVSwarmEnv

    retained = setup_host(1, banner=os.environ.get("RANK", "0") == "0")
    replicas = setup(args.device)
    device = str(replicas.device)
    rank, world = replicas.rank, replicas.world_size
    result: dict[str, Any] = {"world_size": world, "device": device, "host_memory_retained": retained}

    env = UAVSwarmEnv(
        EnvConfig(),
        num_envs=args.num_envs,
        device=device,
        seed=0,
        first_env_index=rank * args.num_envs,
        check_action_range=False,
    )
    env.reset()
    gen = torch.Generator(device=device).manual_seed(rank)
    shape = (args.num_envs, env.num_uavs)
    step = lambda: env.step(torch.randint(0, env.num_actions, shape, generator=gen, device=device))  # noqa: E731
    step()
    calls, elapsed = _timed(replicas, device, step, args.seconds)
    # collectives take tensors on the group's device (NCCL has no CPU tensors)
    rate = torch.tensor(calls * args.num_envs / elapsed, dtype=torch.float64, device=replicas.device)
    result["env_steps_per_s"] = float(replicas.sum(rate))

    cfg = load_config(
        TRAINER_CONFIG,
        [
            f"env.num_envs={args.num_envs}",
            f"train.num_steps={args.num_steps}",
            "run.torch_threads=1",
            "train.total_env_steps=1000000000",
        ],
    )
    cfg, _ = resolve_for_machine(cfg, replicas.device, replicas)  # train.amp=auto: rank 0's choice for all
    learner = build_learner(cfg, replicas.device, replicas)
    read_metrics(train_iteration(learner), replicas)  # warm-up
    calls, elapsed = _timed(replicas, device, lambda: read_metrics(train_iteration(learner), replicas), args.seconds)
    agent_steps = calls * cfg.env_steps_per_iteration * env.num_uavs * world
    elapsed_t = torch.tensor(elapsed, dtype=torch.float64, device=replicas.device)
    result["agent_steps_per_s"] = agent_steps / float(replicas.mean(elapsed_t))

    if replicas.active:  # gradient synchronisation: one flat all-reduce vs DDP's bucketed hooks
        batch, _ = prepare_batch(learner)
        module = PPOLossModule(learner.actor, learner.critic, batch, cfg.train, learner.autocast)
        frames = torch.randperm(batch.state.shape[0], generator=gen, device=device)[
            : args.minibatch // batch.num_agents
        ]

        def flat():
            module.zero_grad(set_to_none=True)
            module(frames).backward()
            replicas.average_gradients(module.parameters())

        ddp = DDP(module, device_ids=None if replicas.device.type == "cpu" else [replicas.device])

        def bucketed():  # DDP syncs the gradients of a forward that went through the wrapper
            ddp.zero_grad(set_to_none=True)
            ddp(frames).backward()

        for fn, key in ((flat, "flat_allreduce_s"), (bucketed, "ddp_s")):
            fn()
            calls, elapsed = _timed(replicas, device, fn, min(args.seconds, 3.0))
            result[key] = elapsed / calls
        del ddp  # its reducer must go before the process group does
    if rank == 0:
        Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    replicas.barrier()
    replicas.close()


class PPOLossModule(torch.nn.Module):
    """The trainer's PPO minibatch loss as a module (DDP wraps modules, not functions)."""

    def __init__(self, actor, critic, batch, train_cfg, autocast):
        super().__init__()
        self.actor, self.critic, self.batch, self.cfg, self.autocast = actor, critic, batch, train_cfg, autocast

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        from agents.algo.ppo import minibatch_loss

        return minibatch_loss(self.actor, self.critic, self.batch, frames, self.cfg, self.autocast)[0]


def run_ranks(args, nproc: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "benchmarks.distributed",
            "--worker",
            "--out",
            str(out),
            "--device",
            args.device,
            "--num-envs",
            str(args.num_envs),
            "--num-steps",
            str(args.num_steps),
            "--seconds",
            str(args.seconds),
            "--minibatch",
            str(args.minibatch),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun with {nproc} rank(s) failed:\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda", "auto"),
        help="cpu; cuda or auto: cuda:{local_rank} when CUDA is available, else the CPU",
    )
    p.add_argument("--num-envs", type=int, default=None, help="environments per rank (512; quick: 32)")
    p.add_argument("--num-steps", type=int, default=None, help="rollout length per iteration (32; quick: 8)")
    p.add_argument("--seconds", type=float, default=None, help="length of each timed phase (8; quick: 0.5)")
    p.add_argument(
        "--minibatch",
        type=int,
        default=None,
        help="agent-steps of the gradient-sync comparison's minibatch, whole environment steps (4000; quick: 250)",
    )
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--quick", action="store_true", help="short phases, few envs (CI smoke)")
    p.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        # The result is written and the process group destroyed. Skip the interpreter's teardown:
        # gloo's worker threads can still hold work objects whose destruction during finalization
        # aborts the process ("terminate called without an active exception"; pytorch#179291),
        # which seen once in CI turned a finished benchmark into a failed torchrun.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    minibatch_given = args.minibatch is not None
    for name, quick, full in (
        ("num_envs", 32, 512),
        ("num_steps", 8, 32),
        ("seconds", 0.5, 8.0),
        ("minibatch", 250, 4000),
    ):
        if getattr(args, name) is None:  # what the user gave is kept, --quick or not
            setattr(args, name, quick if args.quick else full)
    if args.quick:
        args.timeout = min(args.timeout, 180)
    if 1 not in args.ranks or min(args.ranks) < 1:
        p.error(f"--ranks must be >= 1 and include 1 (the baseline of the scaling), got {args.ranks}")
    for name in ("num_envs", "num_steps", "minibatch", "timeout"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.seconds > 0:
        p.error(f"--seconds must be > 0, got {args.seconds}")
    from agents.config import load_config

    uavs = load_config(TRAINER_CONFIG).env.num_uavs  # a minibatch of whole environment steps, within the rollout
    rollout = args.num_envs * args.num_steps * uavs
    if not minibatch_given:
        args.minibatch = min(args.minibatch, rollout)
    if args.minibatch % uavs or args.minibatch > rollout:
        p.error(
            f"--minibatch {args.minibatch}: agent-steps of whole environment steps (a multiple of the {uavs} UAVs) "
            f"within one rank's rollout ({args.num_envs} x {args.num_steps} x {uavs})"
        )
    args.ranks = sorted(set(args.ranks))
    rows = [run_ranks(args, k) for k in args.ranks]
    base = rows[0]  # the 1-rank run: the ranks are sorted and include 1
    for r in rows:
        k = r["world_size"] / base["world_size"]
        r["env_scaling"] = r["env_steps_per_s"] / base["env_steps_per_s"]
        r["env_efficiency"] = r["env_scaling"] / k
        r["train_scaling"] = r["agent_steps_per_s"] / base["agent_steps_per_s"]
        r["train_efficiency"] = r["train_scaling"] / k
    payload = {
        "benchmark": "distributed",
        "machine": machine_info(),
        "quick": args.quick,
        "settings": {
            "num_envs_per_rank": args.num_envs,
            "num_steps": args.num_steps,
            "seconds": args.seconds,
            "threads_per_rank": 1,
            "device": args.device,
            "ranks": args.ranks,
            "minibatch": args.minibatch,
            "host_memory_retained_in_ranks": all(r.get("host_memory_retained") for r in rows),
        },
        "results": rows,
    }
    return write_results("distributed", payload, table(payload), None, args.out_dir, subset=args.ranks != [1, 2])


def table(payload: dict[str, Any]) -> str:
    m, s = payload["machine"], payload["settings"]
    lines = [
        f"# Data-parallel scaling ({'quick' if payload['quick'] else 'full'})",
        "",
        f"{hardware_label(m)}; device {s['device']}, 1 thread per rank; "
        f"{s['num_envs_per_rank']} envs per rank, rollout {s['num_steps']}; torch {m['torch']}; {m['date']}",
        "",
        "| ranks | env-steps/s | x 1 rank | efficiency | agent-steps/s (train) | x 1 rank | efficiency "
        "| flat all-reduce update s | DDP update s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in payload["results"]:
        f = lambda key, r=r: f"{r[key] * 1e3:.2f} ms" if key in r else "-"  # noqa: E731
        lines.append(
            f"| {r['world_size']} | {fmt_rate(r['env_steps_per_s'])} | {r['env_scaling']:.2f} | "
            f"{r['env_efficiency']:.0%} | {fmt_rate(r['agent_steps_per_s'])} | {r['train_scaling']:.2f} | "
            f"{r['train_efficiency']:.0%} | {f('flat_allreduce_s')} | {f('ddp_s')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
