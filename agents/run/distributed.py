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

gloo serves the CPU and nccl GPUs (`agents.placement.torchrun`). A rank that raises exits non-zero and
torchrun stops the others; every collective also has a timeout, so no rank waits forever.
"""

from __future__ import annotations

import torch

from agents.algo.replicas import Replicas
from agents.placement.torchrun import DistEnv, init_distributed, read_dist_env


def setup(device_name: str = "auto", timeout_s: float = 600.0) -> Replicas:
    """Join the torchrun process group when launched by torchrun; otherwise a single process.

    Args:
        device_name: the config's `run.device`; under torchrun `cpu` keeps every rank on the CPU
            (gloo), anything else gives `cuda:{local_rank}` when CUDA is available, else the CPU.
        timeout_s: every collective's timeout.

    Returns:
        This process's `Replicas`; a single process gets `Replicas()`, and its caller picks (and
        checks) the device as usual.
    """
    env: DistEnv = read_dist_env()
    if not env.is_distributed:
        return Replicas()
    env, dev = init_distributed(env, torch.device("cpu") if device_name == "cpu" else None, timeout_s=timeout_s)
    return Replicas(rank=env.rank, world_size=env.world_size, device=dev)
