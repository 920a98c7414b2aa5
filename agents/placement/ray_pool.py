"""The Ray backend of the data-parallel map: the workers of a pool as Ray actors, on one machine or a cluster.

:class:`RayWorkerPool` has the local :class:`~agents.placement.WorkerPool`'s interface (``map``,
``imap``, ``imap_unordered``, ``batch_size``, ``journal``, retries and restarts) and runs the same
``make_worker`` in one Ray actor per worker; :mod:`.ray_run` runs its maps. Ray is imported only
when a pool is built, so ``agents.placement`` works without it.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import torch

from .checks import check_int, is_int, is_real
from .dp_args import check_map_args
from .dp_types import DPMapError, ItemFailure, stream_failure
from .journal import Journal, job_key_for
from .ray_run import RayMapRun, RaySlot
from .ray_worker import RayWorker

RAY_EXTRA_HINT = 'the Ray backend needs Ray: pip install -e ".[ray]" (the "ray" extra of this project)'


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError saying which extra installs it."""
    try:
        import ray
    except ImportError as exc:
        raise type(exc)(f"{RAY_EXTRA_HINT}; importing ray failed: {exc}") from exc
    return ray


def ray_gpus(entry: Any) -> int:
    """GPUs one ``devices`` entry asks Ray for: ``"cpu"`` 0; ``"cuda"``, ``"cuda:k"``, ``k`` 1; a list its length.

    On Ray the GPU index is not a choice: Ray assigns each actor free GPUs on some node, so
    ``"cuda:3"`` means "one GPU", like ``"cuda"``. Anything else is a ValueError naming the entry.
    """
    if isinstance(entry, (list, tuple)):
        if not entry or any(ray_gpus(e) != 1 for e in entry):
            raise ValueError(f"a devices entry that is a list must name one or more GPUs, got {entry!r}")
        return len(entry)
    if is_int(entry) and entry >= 0:
        return 1
    try:
        dev = torch.device(entry) if isinstance(entry, (str, torch.device)) else None
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"devices entries must be 'cpu', 'cuda', 'cuda:k', k or a list of GPUs, got {entry!r}")
    return 0 if dev.type == "cpu" else 1


def _label(entry: Any, gpus: int) -> str:
    return f"{gpus} GPUs" if isinstance(entry, (list, tuple)) else str(entry)


class RayWorkerPool:
    """One Ray actor per entry of ``devices``, each holding what ``make_worker`` built.

    Args:
        make_worker: ``device -> (item -> result)``, run once in each actor; the device it gets is
            ``cuda:0`` for a GPU worker (Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to its
            GPUs) and ``cpu`` otherwise. It must be importable where the actors run.
        devices: One entry per worker: ``"cpu"``, ``"cuda"`` (one GPU; ``"cuda:k"`` and ``k``
            mean the same, since Ray picks the GPU), or a list of GPUs for a worker that spreads
            one model over several (``["cuda", "cuda"]``: ``num_gpus=2``).
        threads_per_worker: Each actor's ``num_cpus`` and torch threads; default: the cluster's
            CPUs divided among the workers.
        prefetch: Calls queued per actor, so it never waits for the caller.
        restarts: How many times each worker's actor is replaced after it dies.
        startup_timeout: Seconds an actor may take to be scheduled and build its model before it
            is killed and reported (a hung ``make_worker``, or no node with a free GPU); None waits.
        stagger: Start the actors one after another, each once the previous is ready (or
            ``startup_timeout`` passed), so that they do not all load their weights at once.
        runtime_env: Ray's ``runtime_env`` for the actors (``{"pip": [...]}``, ``{"conda": ...}``,
            ``{"working_dir": ...}``), passed through.
        address: The cluster to join (``"auto"``, ``"ray://head:10001"``, ``"head:6379"``) when
            Ray is not initialised in this process yet; None starts a local Ray instance. Ray
            stays up after the pool closes (``ray.shutdown()`` ends it).

    Raises:
        ImportError: Ray is not installed (the message names the ``ray`` extra).
        ValueError: an argument is wrong, or the cluster has fewer GPUs or CPUs than asked for.
    """

    def __init__(
        self,
        make_worker: Callable[[torch.device], Callable[[Any], Any]],
        devices: Sequence[str | int | torch.device | Sequence[str | int | torch.device]],
        *,
        threads_per_worker: int | None = None,
        prefetch: int = 2,
        restarts: int = 1,
        startup_timeout: float | None = None,
        stagger: bool = False,
        runtime_env: dict | None = None,
        address: str | None = None,
    ):
        if not callable(make_worker):
            raise TypeError(f"make_worker must be callable, got {type(make_worker).__name__}")
        if isinstance(devices, (str, int, torch.device)) or not isinstance(devices, Sequence) or not devices:
            raise ValueError(f"devices must be a non-empty list such as ['cuda', 'cuda'] or ['cpu'], got {devices!r}")
        gpus = [ray_gpus(d) for d in devices]
        self.prefetch = check_int(prefetch, "prefetch", 1)
        self.restarts = check_int(restarts, "restarts", 0)
        if startup_timeout is not None and (not is_real(startup_timeout) or not startup_timeout > 0):
            raise ValueError(f"startup_timeout must be a positive number of seconds or None, got {startup_timeout!r}")
        self.startup_timeout = None if startup_timeout is None else float(startup_timeout)
        if not isinstance(stagger, bool):
            raise TypeError(f"stagger must be a bool, got {type(stagger).__name__}")
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError(f"runtime_env must be a dict or None, got {type(runtime_env).__name__}")
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a str or None, got {type(address).__name__}")
        threads_per_worker = check_int(threads_per_worker, "threads_per_worker", 1, allow_none=True)

        self.ray = ray = import_ray()
        self._connect(address)
        cluster = ray.cluster_resources()
        if threads_per_worker is None:
            threads_per_worker = max(1, int(cluster.get("CPU", 1)) // len(devices))
        self.threads_per_worker = threads_per_worker
        _check_room(cluster, sum(gpus), threads_per_worker * len(devices))
        self.devices = [_label(d, g) for d, g in zip(devices, gpus)]
        self.job_key = job_key_for(make_worker)
        # cloudpickle: by reference for an importable function, by value for one defined in a script
        try:
            self._make_worker = ray.cloudpickle.dumps(make_worker)
        except Exception as exc:
            raise TypeError(f"make_worker cannot be pickled to reach the Ray actors: {exc}") from exc
        self._runtime_env = runtime_env
        self._actor_class = ray.remote(RayWorker)
        self._slots = [RaySlot(i, label, g) for i, (label, g) in enumerate(zip(self.devices, gpus))]
        self._closed = False
        self._active = False
        self._finalizer = weakref.finalize(self, _kill_all, ray, self._slots)
        try:
            for s in self._slots:
                self._spawn(s)
                if stagger:
                    ray.wait([s.ready_ref], num_returns=1, timeout=self.startup_timeout)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------- actors
    def _connect(self, address: str | None) -> None:
        if self.ray.is_initialized():
            if address not in (None, "auto"):
                raise ValueError(
                    f"address={address!r}, but Ray is already initialised in this process; pass address=None "
                    "to use that connection, or call ray.shutdown() first"
                )
            return
        self.ray.init(address=address)

    def _spawn(self, s: RaySlot) -> None:
        options: dict[str, Any] = {"num_cpus": self.threads_per_worker, "num_gpus": s.gpus, "max_restarts": 0}
        if self._runtime_env is not None:
            options["runtime_env"] = self._runtime_env
        s.actor = self._actor_class.options(**options).remote(self._make_worker, s.gpus, self.threads_per_worker)
        s.ready_ref = s.actor.ready.remote()
        s.state, s.where, s.started_at = "starting", "", time.monotonic()
        s.running_since, s.init_error, s.kill_reason = None, None, None

    def _kill(self, s: RaySlot) -> None:
        if s.actor is not None:
            self.ray.kill(s.actor, no_restart=True)

    def close(self) -> None:
        """Kill the actors (their GPUs are free once Ray has reaped them). Idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> RayWorkerPool:
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
        """Run every item through some actor's callable; results in input order.

        With ``batch_size=k`` the callable gets lists of up to k items and must return lists as
        long; a batch that raises, answers with another length, or dies with its actor is run
        again item by item, and only then do items use up their ``retries``. ``journal`` (a path
        or a :class:`Journal`) records each result as it finishes; the same call rerun with it
        skips the items already recorded. ``item_timeout`` bounds one call (a whole batch).
        ``on_error="raise"`` raises :class:`DPMapError` once every other item is done;
        ``"collect"`` returns :class:`ItemFailure` records in the failed positions.
        """
        a = check_map_args(batch_size, retries, on_error, item_timeout, journal)
        results: dict[int, Any] = {}
        with self._run(items, a.retries, a.item_timeout, a.batch_size, journal, None, progress, desc) as run:
            for index, value in run.events():
                results[index] = value
        out = [results[i] for i in range(len(results))]
        failures = [v for v in out if isinstance(v, ItemFailure)]
        if failures and on_error == "raise":
            raise DPMapError(failures, out)
        return out

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

        Items are pulled from ``items`` (any iterable, a generator too) only as the actors need
        them, and no further than a window past the oldest result not yet yielded. With
        ``on_error="raise"`` a failed item raises :class:`DPMapError` at its position, ending the
        iteration; ``"collect"`` yields its :class:`ItemFailure` and goes on.
        """
        a = check_map_args(batch_size, retries, on_error, item_timeout, journal)
        args = (a.retries, a.item_timeout, a.batch_size)
        self._check_idle()
        window = max(64, 4 * len(self._slots) * self.prefetch * (a.batch_size or 1))
        return self._ordered(items, args, on_error, journal, window, progress, desc)

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
        a = check_map_args(batch_size, retries, on_error, item_timeout, journal)
        args = (a.retries, a.item_timeout, a.batch_size)
        self._check_idle()
        return self._unordered(items, args, on_error, journal, progress, desc)

    def _ordered(self, items, args, on_error, journal, window, progress, desc) -> Iterator[Any]:
        waiting: dict[int, Any] = {}
        with self._run(items, *args, journal, window, progress, desc) as run:
            for index, value in run.events():
                waiting[index] = value
                while run.floor in waiting:
                    value = waiting.pop(run.floor)
                    run.floor += 1
                    stream_failure(value, on_error)
                    yield value

    def _unordered(self, items, args, on_error, journal, progress, desc) -> Iterator[tuple[int, Any]]:
        with self._run(items, *args, journal, None, progress, desc) as run:
            for index, value in run.events():
                stream_failure(value, on_error)
                yield index, value

    def _run(self, items, retries, item_timeout, batch_size, journal, window, progress, desc) -> _RunContext:
        self._check_idle()
        if journal is not None and not isinstance(journal, (str, os.PathLike, Journal)):
            raise TypeError(f"journal must be a path, a Journal or None, got {type(journal).__name__}")
        return _RunContext(self, items, retries, item_timeout, batch_size, journal, window, progress, desc)

    def _check_idle(self) -> None:
        if self._closed:
            raise RuntimeError("this RayWorkerPool is closed")
        if self._active:
            # its calls are tracked per actor: a second run would take them for its own
            raise RuntimeError("this RayWorkerPool is running another map; finish or close that iterator first")


class _RunContext:
    """One run on the pool, which runs nothing else meanwhile; opens the journal (when given as a
    path) for it, and closes it after."""

    def __init__(self, pool, items, retries, item_timeout, batch_size, journal, window, progress, desc):
        self._pool = pool
        self._own = not isinstance(journal, Journal) and journal is not None
        self._journal = Journal(journal, pool.job_key) if self._own else journal
        try:
            self._run = RayMapRun(
                pool,
                items,
                retries=retries,
                item_timeout=item_timeout,
                batch_size=batch_size,
                journal=self._journal,
                window=window,
                progress=progress,
                desc=desc,
            )
        except BaseException:
            if self._own:
                self._journal.close()
            raise

    def __enter__(self) -> RayMapRun:
        self._pool._check_idle()  # imap checks when called; its run starts at the first next()
        self._pool._active = True
        return self._run

    def __exit__(self, *exc) -> None:
        self._pool._active = False
        if self._own:
            self._journal.close()


def _check_room(cluster: dict, gpus: int, cpus: int) -> None:
    """A ValueError when the whole cluster has fewer GPUs or CPUs than the workers ask for: their
    actors would wait for resources forever."""
    for what, need in (("GPU", gpus), ("CPU", cpus)):
        have = cluster.get(what, 0)
        if need > have:
            raise ValueError(
                f"the workers ask for {need} {what}(s) in all (devices, threads_per_worker) but the Ray cluster "
                f"has {have:g} (ray.cluster_resources())"
            )


def _kill_all(ray: Any, slots: list[RaySlot]) -> None:
    for s in slots:
        if s.actor is not None and ray.is_initialized():
            try:
                ray.kill(s.actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- Ray going down with the interpreter: its actors go too
                pass
        s.actor, s.state = None, "dead"
