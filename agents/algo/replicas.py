"""This process's place among torchrun's replicas, and the collectives the update needs (all no-ops in a
single process). Joining the process group is the run's job: `agents.run.distributed.setup`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


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
