"""Data-parallel map: one spawned worker process per device, items handed out dynamically.

``dp_map(make_worker, items, devices)`` is the one-shot form; :class:`WorkerPool` keeps the
workers (and the models they built) alive across several ``map`` calls, which is what a trainer
scoring a batch every iteration wants. The child side lives in :mod:`.dp_worker`.
"""

from __future__ import annotations

import os
import pickle
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import torch
import torch.multiprocessing as tmp

from .checks import check_int, is_real
from .devices import device_key, visible_device_token
from .dp_run import MapRun
from .dp_slot import Slot, shutdown
from .dp_types import DPMapError
from .dp_worker import worker_main

_ENV_LOCK = threading.Lock()  # os.environ is patched around Process.start(); one start at a time


def _check_map_args(retries: Any, on_error: Any, item_timeout: Any) -> tuple[int, float | None]:
    """``(retries, item_timeout)`` as Python numbers, or a ValueError naming the bad argument."""
    if on_error not in ("raise", "collect"):
        raise ValueError(f"on_error must be 'raise' or 'collect', got {on_error!r}")
    retries = check_int(retries, "retries", 0)
    if item_timeout is None:
        return retries, None
    if not is_real(item_timeout) or not item_timeout > 0:
        raise ValueError(f"item_timeout must be a positive number of seconds or None, got {item_timeout!r}")
    return retries, float(item_timeout)


def check_devices(devices: Any) -> list[str]:
    """The canonical keys of a worker device list (``["cuda:0", "cpu"]``), or a ValueError/TypeError
    saying what is wrong with it: not a list, a device string torch cannot parse, a GPU not here."""
    if isinstance(devices, (str, int, torch.device)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(
            f"devices must be a non-empty list such as ['cuda:0', 'cuda:1'] or ['cpu', 'cpu'], got {devices!r}"
        )
    keys = [device_key(d) for d in devices]
    cuda = sorted({int(k.split(":")[1]) for k in keys if k != "cpu"})
    if cuda and not torch.cuda.is_available():
        raise ValueError(f"devices {keys} ask for CUDA, but torch.cuda.is_available() is False here")
    if cuda and cuda[-1] >= torch.cuda.device_count():
        raise ValueError(f"cuda:{cuda[-1]} requested but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return keys


def _check_pool_args(
    make_worker: Any, devices: Any, threads_per_worker: Any, prefetch: Any, restarts: Any
) -> tuple[list[str], int, int, int]:
    """``(device keys, threads_per_worker, prefetch, restarts)``, checked before any worker starts."""
    if not callable(make_worker):
        raise TypeError(f"make_worker must be callable, got {type(make_worker).__name__}")
    try:
        pickle.dumps(make_worker)
    except Exception as exc:
        raise TypeError(
            "make_worker must be picklable to reach the spawned workers (a module-level function "
            f"or a functools.partial of one, not a lambda or closure); pickling failed: {exc}"
        ) from exc
    keys = check_devices(devices)
    prefetch = check_int(prefetch, "prefetch", 1)
    restarts = check_int(restarts, "restarts", 0)
    if threads_per_worker is None:
        threads_per_worker = max(1, (os.cpu_count() or 1) // len(keys))
    threads_per_worker = check_int(threads_per_worker, "threads_per_worker", 1, allow_none=True)
    return keys, threads_per_worker, prefetch, restarts


class WorkerPool:
    """Worker processes, one per entry of ``devices``, each holding what ``make_worker`` built.

    ``make_worker(device)`` runs once in each worker and returns a callable ``item -> result``;
    it must be picklable (a module-level function, or a ``functools.partial`` of one) because it
    is sent to the spawned child; the callable it returns stays in the child. Workers start with
    the spawn method and, for ``"cuda:k"``, ``CUDA_VISIBLE_DEVICES`` set to that one GPU before the
    child starts, so inside the worker the device is ``cuda:0`` (that is what ``make_worker``
    receives); CPU workers get no visible GPU. Each worker uses ``threads_per_worker`` torch threads
    (default: the CPU cores divided among the workers). ``prefetch`` items are queued per worker
    so it never waits for the parent; a dead worker is restarted up to ``restarts`` times.
    """

    def __init__(
        self,
        make_worker: Callable[[torch.device], Callable[[Any], Any]],
        devices: Sequence[str | int | torch.device],
        *,
        threads_per_worker: int | None = None,
        prefetch: int = 2,
        restarts: int = 1,
    ):
        keys, threads_per_worker, prefetch, restarts = _check_pool_args(
            make_worker, devices, threads_per_worker, prefetch, restarts
        )
        self.devices = keys
        self.threads_per_worker = threads_per_worker
        self.prefetch = prefetch
        self.restarts = restarts
        self._make_worker = make_worker
        self._ctx = tmp.get_context("spawn")
        self._slots = [Slot(i, k) for i, k in enumerate(keys)]
        self._closed = False
        self._finalizer = weakref.finalize(self, shutdown, self._slots, 5.0)
        try:
            for s in self._slots:
                self._spawn(s)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------- processes
    def _spawn(self, s: Slot) -> None:
        cuda = s.device != "cpu"
        env = {
            "CUDA_VISIBLE_DEVICES": visible_device_token(int(s.device.split(":")[1])) if cuda else "",
            "OMP_NUM_THREADS": str(self.threads_per_worker),
            "MKL_NUM_THREADS": str(self.threads_per_worker),
        }
        s.tasks = self._ctx.Queue()
        s.conn, child_end = self._ctx.Pipe(duplex=False)
        s.proc = self._ctx.Process(
            target=worker_main,
            args=("cuda:0" if cuda else "cpu", self._make_worker, s.tasks, child_end, self.threads_per_worker),
            name=f"dp-worker-{s.index}-{s.device}",
        )
        with _ENV_LOCK:  # the spawned child copies os.environ when it starts
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                # a start that raises (too many open files, a script that starts workers when
                # imported) propagates as it is: shutdown() skips a process that never started
                s.proc.start()
            finally:
                # drop the parent's copy of the write end, so the pipe reports EOF once the child
                # is gone (or at once, when it never started)
                child_end.close()
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        s.state, s.running_since, s.kill_reason, s.init_error, s.timed_out_item = "starting", None, None, None, None

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers (waiting up to ``timeout`` s before terminating them). Idempotent."""
        self._closed = True
        self._finalizer.detach()
        shutdown(self._slots, timeout)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------- mapping
    def map(
        self,
        items: Iterable[Any],
        *,
        retries: int = 1,
        on_error: Literal["raise", "collect"] = "raise",
        item_timeout: float | None = None,
        progress: bool = True,
        desc: str = "dp_map",
    ) -> list[Any]:
        """Run every item through some worker's callable; results in input order.

        An item that raises is retried up to ``retries`` times, on another worker when there is
        one; a worker that dies takes one attempt from the item it was running (its queued items
        go back to the queue unharmed) and is restarted if its restart budget allows. An item
        still running after ``item_timeout`` seconds has its worker killed (same path).
        ``on_error="raise"`` raises :class:`DPMapError` once all other items are done;
        ``"collect"`` returns :class:`ItemFailure` records in the failed positions. Deaths are
        reported as :class:`WorkerDiedWarning`. If every worker fails in ``make_worker``,
        :class:`WorkerInitError` is raised.
        """
        if self._closed:
            raise RuntimeError("this WorkerPool is closed")
        retries, item_timeout = _check_map_args(retries, on_error, item_timeout)
        run = MapRun(self, list(items), retries, item_timeout, progress, desc)
        try:
            results, failures = run.execute()
        except BaseException:
            # a map cut short leaves items in the workers' queues: the pool cannot be reused
            self.close(timeout=2.0)
            raise
        if failures and on_error == "raise":
            raise DPMapError(failures, results)
        return results


def dp_map(
    make_worker: Callable[[torch.device], Callable[[Any], Any]],
    items: Iterable[Any],
    devices: Sequence[str | int | torch.device],
    *,
    threads_per_worker: int | None = None,
    prefetch: int = 2,
    restarts: int = 1,
    retries: int = 1,
    on_error: Literal["raise", "collect"] = "raise",
    item_timeout: float | None = None,
    progress: bool = True,
    desc: str = "dp_map",
) -> list[Any]:
    """Map ``items`` over one worker process per device; a :class:`WorkerPool` used for one ``map``.

    See :class:`WorkerPool` for ``make_worker``, ``devices``, ``threads_per_worker``, ``prefetch``
    and ``restarts``, and :meth:`WorkerPool.map` for the rest. ``devices=["cpu", "cpu"]`` runs two
    CPU workers.
    """
    # every argument is checked even when there is nothing to map: a bad call fails the first
    # time it runs, not on the first non-empty batch
    _check_map_args(retries, on_error, item_timeout)
    _check_pool_args(make_worker, devices, threads_per_worker, prefetch, restarts)
    items = list(items)
    if not items:
        return []
    with WorkerPool(
        make_worker, devices, threads_per_worker=threads_per_worker, prefetch=prefetch, restarts=restarts
    ) as pool:
        return pool.map(
            items, retries=retries, on_error=on_error, item_timeout=item_timeout, progress=progress, desc=desc
        )
