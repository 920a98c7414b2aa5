"""Data-parallel map: one worker process per device (or GPU set), items handed out dynamically.

``dp_map(make_worker, items, devices)`` (:mod:`.oneshot`) is the one-shot form; :class:`WorkerPool` keeps the
workers (and the models they built) alive across several ``map`` / ``imap`` calls, which is what a
trainer scoring a batch every iteration wants. Processes are started by :mod:`.dp_proc`, the
child side lives in :mod:`.dp_worker`, one map's bookkeeping in :mod:`.dp_run`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import torch

from .dp_args import MapArgs, check_map_args, check_pool_args
from .dp_output import start_pumps
from .dp_proc import Hub, check_python, start_process
from .dp_run import MapRun
from .dp_shapes import check_devices
from .dp_slot import Slot, shutdown
from .dp_types import DPMapError, ItemFailure, stream_failure
from .journal import Journal, job_key_for

__all__ = ["WorkerPool", "check_devices"]

Devices = Sequence[str | int | torch.device | Sequence[str | int | torch.device]]


def refuse_ray_args(runtime_env: dict | None, address: str | None) -> None:
    """The local backend has no use for Ray's arguments: a clear error rather than ignoring them."""
    if runtime_env is not None or address is not None:
        raise ValueError("runtime_env= and address= are the Ray backend's: pass backend='ray' with them")


def _close_hub_after(slots: list[Slot], hub: Hub, timeout: float) -> None:
    shutdown(slots, timeout)
    hub.close()


class WorkerPool:
    """Worker processes, one per entry of ``devices``, each holding what ``make_worker`` built.

    Args:
        make_worker: ``device -> (item -> result)``, run once in each worker. It must be picklable
            (a module-level function, or a ``functools.partial`` of one); the callable it returns
            stays in the worker.
        devices: One entry per worker: ``"cpu"``, a GPU (``"cuda:k"``, ``k``), or a list of GPUs
            (``["cuda:0", "cuda:1"]``) that a ``device_map="auto"`` model inside spreads over. The
            worker's ``CUDA_VISIBLE_DEVICES`` lists its GPUs, so inside it they are ``cuda:0``,
            ``cuda:1``, ... and ``make_worker`` gets ``cuda:0`` (``cpu`` for a CPU worker, which
            sees no GPU).
        threads_per_worker: Torch (and OpenMP/MKL) threads per worker; default: the CPU cores
            divided among the workers.
        prefetch: Tasks (items, or batches with ``batch_size``) queued per worker, so that it
            never waits for the parent.
        restarts: How many times each worker is restarted after it dies.
        startup_timeout: Seconds a worker may take from its start to ``make_worker`` returning;
            past it, the worker is killed and reported with its device, as if make_worker had
            raised. None waits.
        stagger: Start the workers one after another, each once the previous one is ready (or
            has failed), so that they do not all load their weights at once; the ones that are
            ready work meanwhile.
        python: The interpreter the workers run under (a venv's or conda env's ``python``, which
            must import this package and torch); checked when the pool is built. None: this one.
        backend: ``"local"`` (worker processes on this machine) or ``"ray"``: the same pool as Ray
            actors (:class:`~agents.placement.ray_pool.RayWorkerPool`), on this machine or a cluster.
        runtime_env, address: Ray's, passed through (``backend="ray"`` only).

    A worker's output (print, logging, progress bars) is shown in this process's stdout and
    stderr, each line prefixed with the worker's device: ``[cuda:0] ...``, ``[cpu:1] ...``.
    """

    def __new__(cls, *args: Any, backend: Literal["local", "ray"] = "local", **kwargs: Any):
        # backend="ray": the same pool on Ray actors (agents.placement.ray_pool), built here so
        # that WorkerPool(..., backend="ray") is all a user changes
        if backend == "ray":
            if kwargs.pop("python", None) is not None:
                raise ValueError("python= is the local backend's; with backend='ray' give the actors runtime_env=")
            from .ray_pool import RayWorkerPool

            return RayWorkerPool(*args, **kwargs)
        if backend != "local":
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        return super().__new__(cls)

    def __init__(
        self,
        make_worker: Callable[[torch.device], Callable[[Any], Any]],
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
    ):
        refuse_ray_args(runtime_env, address)
        args = check_pool_args(make_worker, devices, threads_per_worker, prefetch, restarts, startup_timeout, stagger)
        self.python = check_python(python)
        self.devices = [s.canonical for s in args.specs]
        self.threads_per_worker = args.threads_per_worker
        self.prefetch = args.prefetch
        self.restarts = args.restarts
        self.startup_timeout = args.startup_timeout
        self.stagger = args.stagger
        self.job_key = job_key_for(make_worker)
        self._make_worker = pickle.dumps(make_worker)
        self._task_ids = itertools.count()
        self._active: MapRun | None = None
        self.hub = Hub()
        self._slots = [Slot(i, spec) for i, spec in enumerate(args.specs)]
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_hub_after, self._slots, self.hub, 5.0)
        try:
            for s in self._slots[: 1 if self.stagger else None]:
                self._spawn(s)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------- processes
    def _spawn(self, s: Slot) -> None:
        cuda = bool(s.spec.cuda)
        threads = str(self.threads_per_worker)
        env = {"CUDA_VISIBLE_DEVICES": s.spec.visible_devices(), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        s.starts += 1
        s.token = f"{s.index}:{s.starts}"
        # a start that raises (too many open files, a script that starts workers when imported)
        # propagates as it is; the slot keeps no process
        s.proc = None
        s.proc = start_process(
            self.hub,
            s.token,
            f"dp-worker-{s.index}-{s.device}",
            self._make_worker,
            "cuda:0" if cuda else "cpu",
            self.threads_per_worker,
            env,
            self.python,
        )
        s.outputs = start_pumps(s.proc, s.device, self.hub.wake)
        s.state, s.started_at, s.running_since = "starting", time.monotonic(), None
        s.kill_reason, s.init_error, s.timed_out_task = None, None, None

    def _start_waiting(self) -> None:
        if any(s.state == "starting" for s in self._slots):
            return
        for s in self._slots:
            if s.state == "waiting":
                self._spawn(s)
                return

    def _next_task_id(self) -> int:
        return next(self._task_ids)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers (waiting up to ``timeout`` s before killing them). Idempotent."""
        self._closed = True
        self._finalizer.detach()
        _close_hub_after(self._slots, self.hub, timeout)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------- mapping
    def map(
        self,
        items: Iterable[Any],
        *,
        batch_size: int | None = None,
        retries: int = 1,
        on_error: Literal["raise", "collect"] = "raise",
        item_timeout: float | None = None,
        journal: str | os.PathLike | Journal | None = None,
        progress: bool = True,
        desc: str = "dp_map",
    ) -> list[Any]:
        """Run every item through some worker's callable; results in input order.

        Args:
            items: Any iterable; pulled as the workers need items.
            batch_size: None: the callable gets one item and returns its result. k: it gets a
                list of up to k items and returns a list as long (results in order). A batch
                that raises, answers with another length, or dies with its worker runs again
                item by item, and only then do items use up their ``retries``.
            retries: How many times a failing item runs again, on another worker when there is one.
            on_error: ``"raise"``: :class:`DPMapError` once every other item is done (its
                ``results`` keeps their work); ``"collect"``: :class:`ItemFailure` records in place.
            item_timeout: Seconds one call (an item, or a batch) may run before its worker is
                killed (and restarted); the call then counts as failed.
            journal: A path (or an open :class:`Journal`): each result is recorded durably as it
                finishes, and a rerun of the same call with it skips the items it holds. A journal
                written for another ``make_worker`` or other items is a ValueError naming it.
            progress: Show tqdm bars (all items, and one per worker).
            desc: The main bar's label.

        A worker that dies takes one attempt from the item it was running (its queued items go
        back to the queue unharmed), and is reported as :class:`WorkerDiedWarning`. If every
        worker fails in ``make_worker``, :class:`WorkerInitError` is raised.
        """
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        results: list[Any] = []
        with contextlib.closing(self._events(items, a, None, progress, desc)) as events:
            for index, value in events:
                results.extend([None] * (index + 1 - len(results)))
                results[index] = value
        failures = [v for v in results if isinstance(v, ItemFailure)]
        if failures and on_error == "raise":
            raise DPMapError(failures, results)
        return results

    def imap(
        self,
        items: Iterable[Any],
        *,
        batch_size: int | None = None,
        retries: int = 1,
        on_error: Literal["raise", "collect"] = "raise",
        item_timeout: float | None = None,
        journal: str | os.PathLike | Journal | None = None,
        progress: bool = True,
        desc: str = "dp_map",
    ) -> Iterator[Any]:
        """Like :meth:`map`, but yields results in input order as they become ready.

        Items are pulled from ``items`` (a generator too, never listed) only as workers need them,
        and no further than a window past the oldest result not yet yielded. With
        ``on_error="raise"`` a failed item raises :class:`DPMapError` at its position, ending the
        iteration; ``"collect"`` yields its :class:`ItemFailure`. Leaving the loop early keeps the
        pool usable: the tasks still in the workers are dropped as they finish.
        """
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        window = max(64, 4 * len(self._slots) * self.prefetch * (a.batch_size or 1))
        return self._ordered(items, a, window, progress, desc)

    def imap_unordered(
        self,
        items: Iterable[Any],
        *,
        batch_size: int | None = None,
        retries: int = 1,
        on_error: Literal["raise", "collect"] = "raise",
        item_timeout: float | None = None,
        journal: str | os.PathLike | Journal | None = None,
        progress: bool = True,
        desc: str = "dp_map",
    ) -> Iterator[tuple[int, Any]]:
        """Like :meth:`imap`, but yields ``(index, result)`` as soon as each item finishes."""
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        return self._unordered(items, a, progress, desc)

    def _check(self, batch_size, retries, on_error, item_timeout, journal) -> MapArgs:
        if self._closed:
            raise RuntimeError("this WorkerPool is closed")
        if self._active is not None:
            raise RuntimeError("this WorkerPool is running another map; finish or close that iterator first")
        return check_map_args(batch_size, retries, on_error, item_timeout, journal)

    def _ordered(self, items, a: MapArgs, window: int, progress: bool, desc: str) -> Iterator[Any]:
        waiting: dict[int, Any] = {}
        with contextlib.closing(self._events(items, a, window, progress, desc)) as events:
            for index, value in events:
                waiting[index] = value
                run = self._active
                while run.floor in waiting:  # the run pulls no further than its window past floor
                    value = waiting.pop(run.floor)
                    run.floor += 1
                    stream_failure(value, a.on_error)
                    yield value

    def _unordered(self, items, a: MapArgs, progress: bool, desc: str) -> Iterator[tuple[int, Any]]:
        with contextlib.closing(self._events(items, a, None, progress, desc)) as events:
            for index, value in events:
                stream_failure(value, a.on_error)
                yield index, value

    def _events(self, items, a: MapArgs, window: int | None, progress: bool, desc: str) -> Iterator[tuple[int, Any]]:
        """``(index, result or ItemFailure)`` in finishing order, for one run over ``items``."""
        if self._closed:
            raise RuntimeError("this WorkerPool is closed")
        if self._active is not None:
            raise RuntimeError("this WorkerPool is running another map; finish or close that iterator first")
        own = a.journal is not None and not isinstance(a.journal, Journal)
        journal = Journal(a.journal, self.job_key) if own else a.journal
        try:
            run = MapRun(
                self,
                items,
                batch_size=a.batch_size,
                retries=a.retries,
                item_timeout=a.item_timeout,
                journal=journal,
                window=window,
                progress=progress,
                desc=desc,
            )
        except BaseException:
            if own:
                journal.close()
            raise
        self._active = run
        clean = True
        try:
            while True:
                while run.out:
                    yield run.out.popleft()
                if run.complete():
                    return
                run.step()
        except GeneratorExit:
            raise  # the consumer stopped at a yield: the bookkeeping is whole
        except BaseException:
            clean = run.clean_stop
            raise
        finally:
            self._active = None
            run.detach()
            if own:
                journal.close()
            if not clean:
                # cut short mid-step (Ctrl-C, an internal error): the workers' state is unknown
                self.close(timeout=2.0)
