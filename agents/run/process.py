"""A training process's setup: which device (`run.device`) and the process-wide settings only an
entry point may change (seed, determinism, threads, the allocator)."""

from __future__ import annotations

import os

import torch

from agents.config import DEVICE_PATTERN, Config
from agents.placement.torchrun import pick_device as placement_pick_device
from agents.placement.torchrun import read_dist_env
from uavsim.machine.host_memory import retain_freed_memory


def pick_device(name: str, what: str = "run.device") -> torch.device:
    """`auto`, `cuda`, `cpu` through the placement helpers (cuda:LOCAL_RANK under torchrun), or an
    explicit `cuda:N`; anything else, or a GPU that is not there, is a `ValueError` naming `what`."""
    if name in ("auto", "cuda", "cpu"):
        try:
            return placement_pick_device(read_dist_env(), prefer=name)
        except ValueError as err:
            raise ValueError(f"{what}={name!r}: {err}") from None
    if DEVICE_PATTERN.fullmatch(name) is None:
        raise ValueError(f"{what} must be auto, cpu, cuda or cuda:N, got {name!r}")
    if not torch.cuda.is_available() or int(name[5:]) >= torch.cuda.device_count():
        raise ValueError(
            f"{what}={name!r} but CUDA is not available"
            + (f" ({torch.cuda.device_count()} GPU(s) visible)" if torch.cuda.is_available() else "")
        )
    return torch.device(name)


def setup_process(cfg: Config) -> None:
    """The entry point's process-wide settings: explicit seeding (library code draws from
    `torch.Generator`s instead), determinism, torch's thread count, and glibc keeping freed host
    memory for the next large tensor (`uavsim.machine.host_memory`; `run.retain_host_memory`)."""
    torch.manual_seed(cfg.seed)
    if cfg.run.retain_host_memory:
        retain_freed_memory()
    if cfg.run.deterministic:  # cuBLAS needs this before its first use to be deterministic
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if cfg.run.torch_threads > 0:
        torch.set_num_threads(cfg.run.torch_threads)
    torch.use_deterministic_algorithms(cfg.run.deterministic)
