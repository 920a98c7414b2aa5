r"""Data-parallel training under ``torchrun``: one environment batch and one learner replica per rank.

    torchrun --standalone --nproc_per_node=2 -m agents.train_mappo env.num_envs=64
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
        --rdzv-id=run1 -m agents.train_mappo ...

What each rank does differently from a single process, and nothing more:
    * it owns ``cuda:{local_rank}`` (or the CPU) and environments ``rank * num_envs ...
      (rank + 1) * num_envs - 1`` of the run's seed, so ranks play disjoint episode streams;
    * after every backward pass the gradients are averaged across ranks with **one flat
      all-reduce** right after AMP's unscale and before clipping, inside the trainer's own
      optimizer step (``python -m benchmarks.distributed`` times it against DDP's bucketed hooks);
    * the value normalizer folds in the mean return statistics of all ranks, so every replica
      normalizes the same way and the parameters stay identical;
    * logged metrics are reduced across ranks (means of means, sums of episode counts) and only
      rank 0 writes TensorBoard and checkpoints; a checkpoint holds every rank's environment state.

gloo serves the CPU and nccl GPUs (`agents.placement.dist`). A rank that raises exits non-zero and
torchrun stops the others; every collective also has a timeout, so no rank waits forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
import torch.distributed as dist

from agents.placement.dist import DistEnv, init_distributed


@dataclass
class Replicas:
    """This process's place in the run: ``world_size == 1`` is a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    # -- collectives (all no-ops in a single process) ---------------------------------------------
    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Average ``.grad`` across ranks in one flat all-reduce (no host sync)."""
        if not self.active:
            return
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world_size)
        for g, averaged in zip(grads, torch.split(flat, [g.numel() for g in grads])):  # loop over tensors
            g.copy_(averaged.view_as(g))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of ``x`` over ranks (a new tensor; float)."""
        if not self.active:
            return x
        y = x.detach().clone().float()
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y / self.world_size

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return x
        y = x.detach().clone()
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` on every rank (pickled; for checkpoint payloads, not hot paths)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.active and dist.is_initialized():
            dist.destroy_process_group()


def setup(device_name: str = "auto", timeout_s: float = 600.0) -> Replicas:
    """Join the torchrun process group when launched by torchrun; otherwise a single process.

    Under torchrun ``device_name`` (the config's ``run.device``) ``cpu`` keeps every rank on the CPU
    (gloo); anything else gives ``cuda:{local_rank}`` when CUDA is available, else the CPU. A single
    process gets ``Replicas()`` and its caller picks (and checks) the device as usual.
    """
    from agents.placement.dist import read_dist_env

    env: DistEnv = read_dist_env()
    if not env.is_distributed:
        return Replicas()
    env, dev = init_distributed(env, torch.device("cpu") if device_name == "cpu" else None, timeout_s=timeout_s)
    return Replicas(rank=env.rank, world_size=env.world_size, device=dev)
