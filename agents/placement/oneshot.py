"""``dp_map``: a :class:`~agents.placement.dp.WorkerPool` used for one map, and the journal check
that skips starting any worker when a rerun's journal already holds every result."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch

from .dp import Devices, WorkerPool, refuse_ray_args
from .dp_args import check_map_args, check_pool_args
from .journal import Journal, job_key_for


def journaled_results(journal: str | os.PathLike | Journal, job_key: str, items: list) -> list | None:
    """Every item's result when ``journal`` holds them all (checking it is the right journal), else None."""
    j = journal if isinstance(journal, Journal) else Journal(journal, job_key)
    try:
        if len(j) < len(items):
            return None
        found = [j.get(i, x) for i, x in enumerate(items)]
    finally:
        if j is not journal:
            j.close()
    return [value for _, value in found] if all(hit for hit, _ in found) else None


def dp_map(
    make_worker: Callable[[torch.device], Callable[[Any], Any]],
    items: Iterable[Any],
    devices: Devices,
    *,
    threads_per_worker: int | None = None,
    prefetch: int = 2,
    restarts: int = 1,
    startup_timeout: float | None = None,
    stagger: bool = False,
    python: str | os.PathLike | None = None,
    backend: Literal["local", "ray"] = "local",
    runtime_env: dict | None = None,
    address: str | None = None,
    batch_size: int | None = None,
    retries: int = 1,
    on_error: Literal["raise", "collect"] = "raise",
    item_timeout: float | None = None,
    journal: str | os.PathLike | Journal | None = None,
    progress: bool = True,
    desc: str = "dp_map",
) -> list[Any]:
    """Map ``items`` over one worker process per ``devices`` entry; a :class:`WorkerPool` used for one ``map``.

    See :class:`WorkerPool` for the pool's arguments (``backend="ray"``: Ray actors) and
    :meth:`WorkerPool.map` for the rest.
    ``devices=["cpu", "cpu"]`` runs two CPU workers. With a ``journal`` that already holds every
    item, no worker is started.
    """
    # every argument is checked even when there is nothing to map: a bad call fails the first
    # time it runs, not on the first non-empty batch
    a = check_map_args(batch_size, retries, on_error, item_timeout, journal)
    if backend == "local":  # the Ray pool checks its own (a head node may have no GPU of its own)
        refuse_ray_args(runtime_env, address)
        check_pool_args(make_worker, devices, threads_per_worker, prefetch, restarts, startup_timeout, stagger)
    items = list(items)
    if journal is not None:
        done = journaled_results(journal, job_key_for(make_worker), items)
        if done is not None:
            return done
    if not items:
        return []
    with WorkerPool(
        make_worker,
        devices,
        threads_per_worker=threads_per_worker,
        prefetch=prefetch,
        restarts=restarts,
        startup_timeout=startup_timeout,
        stagger=stagger,
        python=python,
        backend=backend,
        **({"runtime_env": runtime_env, "address": address} if backend == "ray" else {}),
    ) as pool:
        return pool.map(
            items,
            batch_size=a.batch_size,
            retries=a.retries,
            on_error=a.on_error,
            item_timeout=a.item_timeout,
            journal=journal,
            progress=progress,
            desc=desc,
        )
