"""Argument checks of :class:`~agents.placement.WorkerPool` and :func:`~agents.placement.dp_map`.

Everything is checked before any worker starts, so a bad call fails at once (even with no items)
with a TypeError or ValueError naming the argument.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

from .checks import check_int, is_real
from .dp_shapes import WorkerSpec, worker_specs
from .journal import Journal


@dataclass(frozen=True)
class MapArgs:
    """The checked per-map arguments (see :meth:`WorkerPool.map`)."""

    batch_size: int | None
    retries: int
    on_error: str
    item_timeout: float | None
    journal: str | os.PathLike | Journal | None


@dataclass(frozen=True)
class PoolArgs:
    """The checked pool arguments (see :class:`WorkerPool`)."""

    specs: list[WorkerSpec]
    threads_per_worker: int
    prefetch: int
    restarts: int
    startup_timeout: float | None
    stagger: bool


def check_seconds(value: Any, what: str) -> float | None:
    """A positive number of seconds as a float, or None; else a ValueError naming ``what``."""
    if value is None:
        return None
    if not is_real(value) or not value > 0:
        raise ValueError(f"{what} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def check_map_args(batch_size: Any, retries: Any, on_error: Any, item_timeout: Any, journal: Any) -> MapArgs:
    """The per-map arguments as Python values, or a TypeError/ValueError naming the bad one."""
    if on_error not in ("raise", "collect"):
        raise ValueError(f"on_error must be 'raise' or 'collect', got {on_error!r}")
    if journal is not None and not isinstance(journal, (str, os.PathLike, Journal)):
        raise TypeError(f"journal must be a path, a Journal or None, got {type(journal).__name__}")
    return MapArgs(
        batch_size=check_int(batch_size, "batch_size", 1, allow_none=True),
        retries=check_int(retries, "retries", 0),
        on_error=on_error,
        item_timeout=check_seconds(item_timeout, "item_timeout"),
        journal=journal,
    )


def check_pool_args(
    make_worker: Any,
    devices: Any,
    threads_per_worker: Any,
    prefetch: Any,
    restarts: Any,
    startup_timeout: Any,
    stagger: Any,
) -> PoolArgs:
    """The pool arguments as Python values, or a TypeError/ValueError naming the bad one."""
    if not callable(make_worker):
        raise TypeError(f"make_worker must be callable, got {type(make_worker).__name__}")
    try:
        pickle.dumps(make_worker)
    except Exception as exc:
        raise TypeError(
            "make_worker must be picklable to reach the worker processes (a module-level function "
            f"or a functools.partial of one, not a lambda or closure); pickling failed: {exc}"
        ) from exc
    specs = worker_specs(devices)
    if not isinstance(stagger, bool):
        raise TypeError(f"stagger must be a bool, got {type(stagger).__name__}")
    if threads_per_worker is None:
        threads_per_worker = max(1, (os.cpu_count() or 1) // len(specs))
    return PoolArgs(
        specs=specs,
        threads_per_worker=check_int(threads_per_worker, "threads_per_worker", 1),
        prefetch=check_int(prefetch, "prefetch", 1),
        restarts=check_int(restarts, "restarts", 0),
        startup_timeout=check_seconds(startup_timeout, "startup_timeout"),
        stagger=stagger,
    )
