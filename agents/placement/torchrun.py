"""torchrun helpers for the trainer: read the launcher's environment, pick device and backend."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import torch

from .checks import as_device, check_visible_gpu, device_key, is_int, is_real

_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a (possibly one-process) job.

    ``is_distributed`` is True when a launcher such as ``torchrun`` started the process (its
    variables are set), even with ``world_size == 1``, so the process-group code path can be run
    with a single process.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    is_distributed: bool = False

    def __post_init__(self):
        for name in ("rank", "local_rank", "world_size"):
            value = getattr(self, name)
            if not is_int(value):
                raise TypeError(f"DistEnv.{name} must be an int, got {type(value).__name__} {value!r}")
            object.__setattr__(self, name, int(value))  # frozen; a NumPy int is stored as a Python int
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")
        if not 0 <= self.local_rank < self.world_size:
            raise ValueError(f"local_rank must be in [0, world_size={self.world_size}), got {self.local_rank}")
        if not self.is_distributed and self.world_size != 1:
            raise ValueError(f"a non-distributed DistEnv has world_size 1, got {self.world_size}")

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the process that logs and saves checkpoints)."""
        return self.rank == 0


def _parse(name: str, text: str) -> int:
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):
        raise ValueError(f"{name}={text!r} is not a non-negative integer (as torchrun sets it)")
    return int(stripped)


def read_dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """The torchrun variables ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` of ``environ`` (default: os.environ).

    None set: a single process (``DistEnv()``). Some but not all set, or malformed: ValueError
    naming the variable.
    """
    env = os.environ if environ is None else environ
    present = [v for v in _VARS if v in env]
    if not present:
        return DistEnv()
    missing = [v for v in _VARS if v not in env]
    if missing:
        raise ValueError(
            f"{', '.join(present)} set but {', '.join(missing)} not: torchrun sets RANK, LOCAL_RANK "
            "and WORLD_SIZE together; launch with torchrun or set all three"
        )
    rank, local_rank, world_size = (_parse(v, env[v]) for v in _VARS)
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE={env['WORLD_SIZE']!r} must be >= 1")
    if rank >= world_size or local_rank >= world_size:
        raise ValueError(f"RANK={rank} and LOCAL_RANK={local_rank} must both be < WORLD_SIZE={world_size}")
    return DistEnv(rank=rank, local_rank=local_rank, world_size=world_size, is_distributed=True)


def pick_device(env: DistEnv | None = None, prefer: Literal["auto", "cuda", "cpu"] = "auto") -> torch.device:
    """``cuda:{local_rank}`` when CUDA is available (or ``prefer="cuda"``), else the CPU.

    When the launcher gave each process a single GPU (``CUDA_VISIBLE_DEVICES`` set per rank, so one
    device is visible), that device is ``cuda:0`` whatever the local rank. ``prefer="cuda"``
    without CUDA, or a local rank beyond the visible GPUs, is a ValueError.
    """
    env = DistEnv() if env is None else env
    if not isinstance(env, DistEnv):
        raise TypeError(f"env must be a DistEnv or None, got {type(env).__name__}")
    if prefer not in ("auto", "cuda", "cpu"):
        raise ValueError(f"prefer must be 'auto', 'cuda' or 'cpu', got {prefer!r}")
    if prefer == "cpu" or (prefer == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(
            f"a CUDA device was asked for, but this torch ({torch.__version__}) sees none: use the CPU "
            "(run.device=cpu) or install a CUDA build of torch (docs/install.md)"
        )
    count = torch.cuda.device_count()
    if env.local_rank < count:
        return torch.device("cuda", env.local_rank)
    if count == 1 and os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        # the launcher narrowed each rank to one GPU (a rank of a plain torchrun on a one-GPU host
        # would share cuda:0 with rank 0, which NCCL refuses: "duplicate GPU")
        return torch.device("cuda", 0)
    raise ValueError(
        f"local rank {env.local_rank} has no GPU: {count} visible; start at most {count} processes per node"
    )


def pick_backend(device: str | torch.device) -> str:
    """The collective backend for ``device``: ``"nccl"`` for CUDA, ``"gloo"`` for the CPU, and for CUDA
    where torch has no NCCL (Windows builds: gloo is their only backend)."""
    return "nccl" if as_device(device).type == "cuda" and torch.distributed.is_nccl_available() else "gloo"


def init_distributed(
    env: DistEnv | None = None,
    device: str | torch.device | None = None,
    *,
    timeout_s: float = 600.0,
) -> tuple[DistEnv, torch.device]:
    """Read the environment, pick the device, and join the process group when launched by torchrun.

    Sets the CUDA device first (NCCL needs it). Does nothing to the process group for a single
    un-launched process or when one is already initialised. Returns ``(env, device)``.
    """
    if not is_real(timeout_s) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    timeout_s = float(timeout_s)  # timedelta refuses NumPy floats
    env = read_dist_env() if env is None else env
    if not isinstance(env, DistEnv):
        raise TypeError(f"env must be a DistEnv or None, got {type(env).__name__}")
    if device is not None:  # a GPU this process cannot see is named here, not by torch.cuda.set_device's own error
        check_visible_gpu(device, "init_distributed")
    dev = pick_device(env) if device is None else torch.device(device_key(device))  # "cuda" is cuda:0
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if env.is_distributed and torch.distributed.is_available() and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend=pick_backend(dev),
            rank=env.rank,
            world_size=env.world_size,
            timeout=timedelta(seconds=timeout_s),
            **({"device_id": dev} if dev.type == "cuda" else {}),
        )
    return env, dev
