"""The in-process contenders of the placement benchmark, all timed by one protocol (:func:`measure`).

Each contender starts its workers (one :class:`~benchmarks.placement_worker.BenchWorker` per
process), maps item lists through them in input order and closes. :func:`measure` times, on one
fresh contender: start-up (from nothing until every worker has answered an item, so each has
built its model), one warm-up map (the first CLIP forward allocates), then each job on the warm
workers. accelerate's contender runs in processes of its own (:mod:`benchmarks.placement_accelerate`)
and returns the same record.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import importlib.util
import inspect
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents.placement import WorkerPool
from benchmarks.placement_worker import RayBenchActor, make_bench_worker, process_call, process_init

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 600.0  # a worker that has not built its model by then has failed


class Skip(Exception):
    """This contender cannot run here; the message says why (recorded in the results)."""


def wait_for_workers(map_items: Any, n: int) -> None:
    """Map ``("pid", _)`` items until ``n`` different worker processes have answered.

    A map can finish on the workers that are ready while another is still building its model, so
    one answered map is not enough: the start-up barrier is every worker's process id seen once.
    """
    seen: set[int] = set()
    deadline = time.perf_counter() + READY_TIMEOUT_S
    while len(seen) < n:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {len(seen)} of {n} workers answered within {READY_TIMEOUT_S:.0f} s")
        seen.update(map_items([("pid", k) for k in range(2 * n)]))
        if len(seen) < n:
            time.sleep(0.01)  # leave the cores to the worker still starting


class LocalPool:
    """``agents.placement.WorkerPool``: spawned processes, items dispatched one by one as workers free up."""

    batches = True  # map(items, batch_size=k)
    how = "WorkerPool(make_worker, devices, threads_per_worker=t).map(items): spawned processes, prefetch 2"

    def __init__(self, devices: list[str], threads: int, cfg: dict):
        self.devices, self.threads, self.cfg = devices, threads, cfg
        self.pool: WorkerPool | None = None

    def start(self) -> None:
        make = functools.partial(make_bench_worker, clip_image_size=self.cfg["clip_image_size"])
        self.pool = WorkerPool(make, self.devices, threads_per_worker=self.threads, prefetch=2)
        wait_for_workers(self.map, len(self.devices))

    def map(self, items: list, batch_size: int | None = None) -> list:
        return self.pool.map(items, batch_size=batch_size, progress=False)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


class ProcessPool:
    """``concurrent.futures.ProcessPoolExecutor`` with an initializer that builds the worker once per process."""

    how = (
        "ProcessPoolExecutor(n, mp_context=spawn, initializer=build the worker); executor.map(call, items), chunksize 1"
    )

    def __init__(self, devices: list[str], threads: int, cfg: dict):
        if any(d != "cpu" for d in devices):
            raise Skip("measured on CPU workers only (a process pool has no per-process device assignment)")
        self.n, self.threads, self.cfg = len(devices), threads, cfg
        self.executor: concurrent.futures.ProcessPoolExecutor | None = None

    def start(self) -> None:
        self.executor = concurrent.futures.ProcessPoolExecutor(
            self.n,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=process_init,
            initargs=(self.threads, self.cfg["clip_image_size"]),
        )
        wait_for_workers(self.map, self.n)

    def map(self, items: list) -> list:
        return list(self.executor.map(process_call, items))

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()


def ray_missing() -> str | None:
    """Why the Ray contenders cannot run here, or None."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install -e '.[ray]')"
    return None


@contextlib.contextmanager
def ray_session(cpus: int) -> Iterator[float]:
    """A local Ray instance for the Ray contenders of one round; yields ``ray.init``'s seconds.

    The Ray processes inherit this environment: the repository goes on their PYTHONPATH so that
    actors can import the benchmark's worker module, as spawned processes can.
    """
    import ray

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), saved) if p)
    try:
        start = time.perf_counter()
        # address="local": a new instance of our own, never a cluster another process on this machine started
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        init_s = time.perf_counter() - start
        try:
            yield init_s
        finally:
            ray.shutdown()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


class RayActorPool:
    """Ray's own ``ray.util.ActorPool``: one actor per worker, each holding one worker object."""

    how = (
        "ActorPool([actor] * n).map(lambda a, v: a.run.remote(v), items): ordered, one item in flight per actor; "
        "actors with num_cpus=t"
    )

    def __init__(self, devices: list[str], threads: int, cfg: dict):
        reason = ray_missing()
        if reason is None and any(d != "cpu" for d in devices):
            reason = "measured on CPU workers only (these actors ask for CPUs, not GPUs)"
        if reason:
            raise Skip(reason)
        self.n, self.threads, self.cfg = len(devices), threads, cfg
        self.actors: list = []

    def start(self) -> None:
        import ray
        from ray.util import ActorPool

        actor = ray.remote(num_cpus=self.threads)(RayBenchActor)
        self.actors = [actor.remote(self.threads, self.cfg["clip_image_size"]) for _ in range(self.n)]
        ray.get([a.run.remote(("pid", 0)) for a in self.actors])  # every actor has built its worker
        self.pool = ActorPool(self.actors)

    def map(self, items: list) -> list:
        return list(self.pool.map(lambda a, v: a.run.remote(v), items))

    def close(self) -> None:
        import ray

        for a in self.actors:
            ray.kill(a)


def ray_backend() -> tuple[Any, str]:
    """``(pool class, how it is called)`` for agents.placement's Ray backend; Skip when it is not here."""
    reason = ray_missing()
    if reason:
        raise Skip(reason)
    if "backend" in inspect.signature(WorkerPool).parameters:
        return functools.partial(WorkerPool, backend="ray"), "WorkerPool(..., backend='ray')"
    try:
        from agents.placement.ray_pool import RayWorkerPool
    except ImportError as exc:
        raise Skip(f"agents.placement has no Ray backend in this checkout ({exc})") from exc
    return RayWorkerPool, "agents.placement.ray_pool.RayWorkerPool(...)"


class RayBackend:
    """agents.placement's Ray backend: the local pool's interface, its workers as Ray actors."""

    batches = True  # map(items, batch_size=k)
    how = "the local pool's interface on Ray actors (num_cpus=t each), prefetch 2: pool.map(items)"

    def __init__(self, devices: list[str], threads: int, cfg: dict):
        self.pool_class, via = ray_backend()
        self.how = f"{via} with threads_per_worker=t (Ray actors, num_cpus=t each), prefetch 2; pool.map(items)"
        self.devices, self.threads, self.cfg = devices, threads, cfg
        self.pool: Any = None

    def start(self) -> None:
        make = functools.partial(make_bench_worker, clip_image_size=self.cfg["clip_image_size"])
        self.pool = self.pool_class(make, self.devices, threads_per_worker=self.threads, prefetch=2)
        wait_for_workers(self.map, len(self.devices))

    def map(self, items: list, batch_size: int | None = None) -> list:
        return self.pool.map(items, batch_size=batch_size, progress=False)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def measure(
    contender: Any, jobs: dict[str, list], warmup: list, batch_size: int
) -> tuple[dict[str, float], dict[str, list]]:
    """``({"startup_s", "<job>_s" ...}, {"<job>": results})`` for one fresh contender (closed after).

    A contender that takes ``batch_size`` (agents.placement's pools) also runs the no-op job in
    batches of ``batch_size`` items: job ``echo_batched``.
    """
    start = time.perf_counter()
    try:
        contender.start()
        record = {"startup_s": time.perf_counter() - start}
        contender.map(warmup)
        outputs = {}
        runs = [(job, items, {}) for job, items in jobs.items()]
        if getattr(contender, "batches", False):
            runs.append(("echo_batched", jobs["echo"], {"batch_size": batch_size}))
        for job, items, options in runs:
            start = time.perf_counter()
            outputs[job] = contender.map(items, **options)
            record[f"{job}_s"] = time.perf_counter() - start
    finally:
        contender.close()
    return record, outputs
