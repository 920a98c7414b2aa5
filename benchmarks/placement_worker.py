"""The worker side of the placement benchmark: the jobs, the one worker object every contender
builds, and the small adapters that let each framework hold it.

Every contender (our local pool, the Ray backend, Ray's ``ActorPool``, ``ProcessPoolExecutor``,
accelerate's ``split_between_processes``) builds the same :class:`BenchWorker` once per worker
process and maps the same items through it, so they differ only in how items reach the workers
and results come back. This module imports torch only: it is what every worker process imports.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch


class BenchWorker:
    """Items are ``(kind, payload)``: ``("echo", x)`` returns x (the no-op item that measures
    overhead), ``("pid", _)`` returns the worker's process id (start-up barrier), ``("clip", batch)``
    CLIP-scores a batch of image-text pairs with a tiny random-weight CLIP. A list of items (what a
    pool's ``batch_size=k`` hands over) gets the list of their results."""

    def __init__(self, device: torch.device | str, clip_image_size: int):
        from examples import toy_models as toy  # imports transformers: only in the workers

        self.clip = toy.make_clip_scorer(torch.device(device), image_size=clip_image_size)

    def __call__(self, item: tuple[str, Any] | list[tuple[str, Any]]) -> Any:
        if isinstance(item, list):
            return [self(one) for one in item]
        kind, payload = item
        if kind == "echo":
            return payload
        if kind == "pid":
            return os.getpid()
        if kind == "clip":
            return self.clip(payload)
        raise ValueError(f"unknown benchmark item kind {kind!r}")


def make_bench_worker(device: torch.device, *, clip_image_size: int = 64) -> BenchWorker:
    """``make_worker`` for the local pool (module level, so spawned workers can import it)."""
    return BenchWorker(device, clip_image_size)


def build_worker(device: str, threads: int, clip_image_size: int) -> BenchWorker:
    """The worker for the other frameworks: their processes get ``threads`` torch threads first,
    as the local pool gives its workers (``threads_per_worker``)."""
    torch.set_num_threads(threads)
    return BenchWorker(device, clip_image_size)


def make_jobs(cfg: dict) -> dict[str, list[tuple[str, Any]]]:
    """The items of each timed job, the same in every process that builds them (fixed seeds)."""
    from examples import toy_models as toy  # imports transformers

    clip = toy.random_clip_items(cfg["clip_items"], cfg["clip_batch"], cfg["clip_image_size"], seed=0)
    return {"echo": [("echo", i) for i in range(cfg["echo_items"])], "clip": [("clip", b) for b in clip]}


# ---- concurrent.futures.ProcessPoolExecutor: the worker lives in a module global of each process
_PROCESS_WORKER: BenchWorker | None = None


def process_init(threads: int, clip_image_size: int) -> None:
    """``ProcessPoolExecutor(initializer=...)``: build the worker once per process."""
    global _PROCESS_WORKER
    _PROCESS_WORKER = build_worker("cpu", threads, clip_image_size)


def process_call(item: tuple[str, Any]) -> Any:
    """What ``ProcessPoolExecutor.map`` runs per item: the process's worker on the item."""
    if _PROCESS_WORKER is None:
        raise RuntimeError("process_init did not run in this process")
    return _PROCESS_WORKER(item)


# ---- Ray: wrapped with ray.remote(num_cpus=...) by the benchmark (Ray is imported only there)
class RayBenchActor:
    """One Ray actor holding one worker; ``ActorPool.map(lambda a, v: a.run.remote(v), items)``."""

    def __init__(self, threads: int, clip_image_size: int):
        self.worker = build_worker("cpu", threads, clip_image_size)

    def run(self, item: tuple[str, Any]) -> Any:
        return self.worker(item)


# ---- the machine's own parallel ceiling (plain processes, no framework)
def spin(iters: int) -> float:
    """Pure single-threaded compute (small matmuls) for ``iters`` rounds; returns its own seconds."""
    torch.set_num_threads(1)
    a = torch.randn(128, 128) / 12
    start = time.perf_counter()
    for _ in range(iters):
        a = torch.tanh(a @ a)
    return time.perf_counter() - start
