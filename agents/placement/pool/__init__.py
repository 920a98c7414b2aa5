"""Data-parallel map: one worker per device (or GPU set), items handed out dynamically.

``dp_map(make_worker, items, devices)`` is the one-shot form; :class:`WorkerPool` keeps the workers
(and the models they built) alive across several ``map`` / ``imap`` calls, which is what a trainer
scoring a batch every iteration wants. Two executors carry the work: worker processes on this
machine (:mod:`.local`, the default) and Ray actors (:mod:`.ray`, ``backend="ray"``); one
:class:`~.scheduler.Scheduler` runs every map on either.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import torch

from ..journal import Journal, checked_journal, job_key_for, journaled_results
from .arguments import (
    Devices,
    MapArgs,
    check_backend,
    check_devices,
    check_items,
    check_map_args,
    check_pool_args,
)
from .errors import DPMapError, ItemFailure, stream_failure
from .local import LocalExecutor
from .process import check_python, python_path
from .ray import ray_devices
from .scheduler import Scheduler

__all__ = ["WorkerPool", "RayWorkerPool", "dp_map", "check_devices"]


class WorkerPool:
    """Workers, one per entry of ``devices``, each holding what ``make_worker`` built.

    Args:
        make_worker: ``device -> (item -> result)``, run once in each worker. It must be picklable
            (a module-level function, or a ``functools.partial`` of one); the callable it returns
            stays in the worker.
        devices: One entry per worker: ``"cpu"``, a GPU (``"cuda:k"``, ``k``), or a list of GPUs
            (``["cuda:0", "cuda:1"]``) that a ``device_map="auto"`` model inside spreads over. The
            worker's ``CUDA_VISIBLE_DEVICES`` lists its GPUs, so inside it they are ``cuda:0``,
            ``cuda:1``, ... and ``make_worker`` gets ``cuda:0`` (``cpu`` for a CPU worker, which
            sees no GPU). On Ray the GPU index is not a choice (Ray assigns free GPUs), so
            ``"cuda:3"`` means one GPU, like ``"cuda"``.
        threads_per_worker: Torch (and OpenMP/MKL) threads per worker (on Ray, each actor's
            ``num_cpus``); default: the physical CPU cores this process may use (its affinity within its cgroup's
            quota; on Ray the cluster's) divided among the workers.
        prefetch: Tasks (items, or batches with ``batch_size``) queued per worker, so that it
            never waits for the parent. The local backend's: a Ray actor is sent one task at a time (an
            actor that dies loses the answers it had not sent, and a task queued behind a finished one would
            take the blame for its death).
        restarts: How many times in a row each worker is restarted after it dies without answering a
            task (a broken device, a crashing ``make_worker``); a worker that answered tasks and then
            died on an item is restarted whatever this says (the item's ``retries`` bound those deaths),
            unless it is 0: then no worker is restarted.
        startup_timeout: Seconds a worker may take from its start to ``make_worker`` returning;
            past it, the worker is killed and reported with its device (locally as if
            make_worker had raised; on Ray, where no node may have room yet, as a death). None waits.
        stagger: Start the workers one after another, each once the previous one is ready (or
            has failed), so that they do not all load their weights at once; the ones that are
            ready work meanwhile.
        python: The interpreter the workers run under (a venv's or conda env's ``python``, which
            must import this package and torch); checked when the pool is built. None: this one.
        backend: ``"local"`` (worker processes on this machine) or ``"ray"``: Ray actors, on this
            machine or a cluster (the pool is then a :class:`RayWorkerPool`).
        runtime_env: Ray's ``runtime_env`` for the actors (``{"pip": [...]}``, ``{"working_dir": ...}``).
        address: The Ray cluster to join (``"auto"``, ``"ray://head:10001"``) when Ray is not
            initialised in this process yet; None starts a local Ray (which stays up after the pool).

    A local worker's output (print, logging, progress bars) is shown in this process's stdout and
    stderr, each line prefixed with the worker's device: ``[cuda:0] ...``, ``[cpu:1] ...``.
    """

    def __new__(cls, *args: Any, backend: Literal["local", "ray"] = "local", **kwargs: Any):
        check_backend(backend)
        # WorkerPool(..., backend="ray") is all a user changes to get the Ray pool
        return super().__new__(RayWorkerPool if backend == "ray" else cls)

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
        local = backend != "ray"
        args = (make_worker, devices, threads_per_worker, prefetch, restarts, startup_timeout, stagger, python)
        a = check_pool_args(*args, runtime_env, address, local=local)
        counts = {"prefetch": a.prefetch, "restarts": a.restarts, "startup_timeout": a.startup_timeout}
        if local:
            self.python = check_python(python)
            executor = LocalExecutor(pickle.dumps(make_worker), a.specs, a.threads_per_worker, self.python, **counts)
        else:
            from .ray import RayExecutor

            executor = RayExecutor(
                make_worker, devices, a.threads_per_worker, **counts, runtime_env=runtime_env, address=address
            )
        self.executor, self.devices = executor, executor.devices
        self.threads_per_worker, self.prefetch, self.restarts = executor.threads, a.prefetch, a.restarts
        self.startup_timeout, self.stagger = a.startup_timeout, a.stagger
        self.job_key = job_key_for(make_worker)
        self._active: Scheduler | None = None
        self._closed = False
        try:
            for s in executor.slots[: 1 if self.stagger else None]:  # stagger: the maps start the others
                executor.start(s)
        except BaseException:
            self.close()
            raise

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers (waiting up to ``timeout`` s before killing them). Idempotent."""
        self._closed = True
        self.executor.close(timeout)

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
                item by item, and only then do items use up their ``retries``; out of memory, the rest
                of the map takes batches of half as many (:class:`BatchShrunkWarning`).
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
        check_items(items)
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        with contextlib.closing(self._events(items, a, None, progress, desc)) as events:
            found = dict(events)
        results = [found[i] for i in range(len(found))]
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
        check_items(items)
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        window = max(64, 4 * len(self.executor.slots) * self.prefetch * (a.batch_size or 1))
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
        check_items(items)
        a = self._check(batch_size, retries, on_error, item_timeout, journal)
        return self._unordered(items, a, progress, desc)

    def _check(self, batch_size=None, retries=1, on_error="raise", item_timeout=None, journal=None) -> MapArgs:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        if self._active is not None:
            # its tasks are tracked per worker: a second run would take them for its own
            raise RuntimeError(
                f"this {type(self).__name__} is running another map; finish or close that iterator first"
            )
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
        self._check()  # imap checks when called; its run starts at the first next()
        with contextlib.ExitStack() as stack:
            journal = a.journal
            if isinstance(journal, Journal):
                checked_journal(journal, self.job_key)
            elif journal is not None:
                journal = stack.enter_context(Journal(journal, self.job_key))
            run = Scheduler(
                self.executor,
                items,
                batch_size=a.batch_size,
                retries=a.retries,
                item_timeout=a.item_timeout,
                journal=journal,
                window=window,
                progress=progress,
                desc=desc,
            )
            self._active = run
            try:
                while True:
                    while run.out:
                        yield run.out.popleft()
                    if run.complete():
                        return
                    run.step()
            except BaseException as exc:
                # cut short mid-step (Ctrl-C, an internal error): the workers' state is unknown; a
                # consumer that stopped at a yield (GeneratorExit) leaves the bookkeeping whole
                if not (isinstance(exc, GeneratorExit) or run.clean_stop):
                    self.close(timeout=2.0)
                raise
            finally:
                self._active = None
                run.detach()


class RayWorkerPool(WorkerPool):
    """``WorkerPool(..., backend="ray")``: the workers as Ray actors (``make_worker`` must be
    importable where they run). Raises ImportError naming the ``ray`` extra without Ray."""

    def __init__(self, make_worker: Callable[[torch.device], Callable[[Any], Any]], devices: Devices, **kwargs: Any):
        if kwargs.pop("backend", "ray") != "ray":
            raise ValueError("a RayWorkerPool's backend is 'ray'")
        super().__init__(make_worker, devices, backend="ray", **kwargs)


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
    """Map ``items`` over one worker per ``devices`` entry: a :class:`WorkerPool` used for one ``map``.

    See :class:`WorkerPool` for the pool's arguments (``backend="ray"``: Ray actors) and
    :meth:`WorkerPool.map` for the rest. ``devices=["cpu", "cpu"]`` runs two CPU workers. With a
    ``journal`` that already holds every item, no worker is started.
    """
    given = dict(locals())  # the arguments, passed on to the pool and its map below
    # every argument is checked even when there is nothing to map: a bad call fails the first
    # time it runs, not on the first non-empty batch
    check_items(items)
    check_map_args(batch_size, retries, on_error, item_timeout, journal)
    check_backend(backend)
    args = (make_worker, devices, threads_per_worker, prefetch, restarts, startup_timeout, stagger, python)
    check_pool_args(*args, runtime_env, address, local=backend == "local")
    if backend == "local":
        python_path(python)  # the pool runs it (seconds: it imports torch); here only that it is a file
    else:  # the entries as Ray counts them (a head node may have no GPU of its own: not against this machine's)
        ray_devices(devices)
    items = list(items)
    if journal is not None:
        done = journaled_results(journal, job_key_for(make_worker), items)
        if done is not None:
            return done
    if not items:
        return []
    with WorkerPool(make_worker, devices, **{k: given[k] for k in _keywords(WorkerPool.__init__)}) as pool:
        return pool.map(items, **{k: given[k] for k in _keywords(WorkerPool.map)})


def _keywords(function: Callable) -> list[str]:
    """The keyword-only parameters of ``function``: what dp_map passes on to the pool and its map."""
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY]
