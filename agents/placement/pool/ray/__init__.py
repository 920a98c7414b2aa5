"""The Ray executor: a pool's workers as Ray actors, on this machine or a cluster.

``WorkerPool(..., backend="ray")`` runs the same ``make_worker`` in one actor per ``devices``
entry (:class:`RayWorker`) and the same scheduler as the local pool over them. Ray is imported
only when such a pool is built, so ``agents.placement`` works without it. Tasks and answers are
those of a local worker process (:func:`..process.run_task`): pickled bytes, so that a result
reaches the caller as its own copy (a NumPy array in it is writable, not a read-only view into
Ray's object store).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...checks import is_int
from ..executor import Event, Slot, Task
from ..process import build_worker, run_task


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


def ray_devices(devices: Any) -> list[int]:
    """The GPUs each entry of a Ray pool's ``devices`` asks for (`ray_gpus`), or a ValueError naming what is wrong."""
    if isinstance(devices, (str, int, torch.device)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(f"devices must be a non-empty list such as ['cuda', 'cuda'] or ['cpu'], got {devices!r}")
    return [ray_gpus(d) for d in devices]


class RayWorker:
    """Builds ``make_worker(device)`` once, then runs tasks (pickled lists of items) through it.

    ``make_worker`` comes pickled by cloudpickle and is unpickled here, so that a module the actor
    cannot import is reported as make_worker's failure, with its traceback, not as a dead actor.
    """

    def __init__(self, make_worker: bytes, gpus: int, threads: int):
        if gpus == 0:
            # as in the local pool, a CPU worker sees no GPU (read when CUDA first initialises)
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        torch.set_num_threads(threads)
        self.fn: Any = None
        self.init_error: str | None = None
        try:
            self.fn = build_worker(make_worker, torch.device("cuda:0" if gpus else "cpu"))
        except BaseException:
            # reported through ready(), not raised: Ray would turn a raising constructor into an
            # actor death, which the pool could not tell apart from a crash
            self.init_error = traceback.format_exc()

    def ready(self) -> tuple[str | None, int, str, str]:
        """``(make_worker's traceback or None, pid, host name, CUDA_VISIBLE_DEVICES)``."""
        return self.init_error, os.getpid(), socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def run(self, batched: bool, payload: bytes) -> tuple[str, bytes | str]:
        """``("ok", pickled list of results)`` for the pickled list of items, or ``("error", traceback)``."""
        return run_task(self.fn, batched, payload)

    def watch(self) -> None:
        """Never returns (called in its own concurrency group): its reference fails when the actor dies, which
        tells the pool of an idle actor's death before it is sent an item it would then be blamed for."""
        threading.Event().wait()


@dataclass(eq=False)
class RaySlot(Slot):
    """A worker's actor (replaced on a restart) and the GPUs it asks for."""

    gpus: int = 0
    actor: Any = None
    ready_ref: Any = None
    watch_ref: Any = None  # RayWorker.watch's: fails when the actor dies


class RayExecutor:
    """One Ray actor per entry of ``devices`` (see ``WorkerPool``; ``runtime_env`` and ``address`` are Ray's).

    Raises ImportError when Ray is not installed (naming the ``ray`` extra), ValueError for a bad
    entry of ``devices`` or a cluster with fewer GPUs or CPUs than the workers ask for.
    """

    died_starting_hint = ""

    def __init__(
        self,
        make_worker: Any,
        devices: Sequence[Any],
        threads: int | None,
        *,
        prefetch: int,
        restarts: int,
        startup_timeout: float | None,
        runtime_env: dict | None,
        address: str | None,
    ):
        gpus = ray_devices(devices)
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError(f"runtime_env must be a dict or None, got {type(runtime_env).__name__}")
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a str or None, got {type(address).__name__}")
        self.prefetch, self.restarts, self.startup_timeout = prefetch, restarts, startup_timeout
        try:
            import ray
        except ImportError as exc:
            hint = 'the Ray backend needs Ray: pip install -e ".[ray]" (the "ray" extra of this project)'
            raise type(exc)(f"{hint}; importing ray failed: {exc}") from exc
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address)
        elif address not in (None, "auto"):
            raise ValueError(
                f"address={address!r}, but Ray is already initialised in this process; pass address=None "
                "to use that connection, or call ray.shutdown() first"
            )
        cluster = ray.cluster_resources()
        # by default the workers share the cluster's CPUs, a fraction each where there are more workers than
        # CPUs (Ray schedules fractions; torch's threads are whole), as the local backend runs them
        share = cluster.get("CPU", 1) / len(devices)
        self.threads = threads if threads is not None else max(1, int(share))
        # rounded down to Ray's resource unit (1e-4), so that the shares add up to no more than the cluster has
        self.actor_cpus = threads if threads is not None else min(math.floor(share * 1e4) / 1e4, self.threads)
        for what, need in (("GPU", sum(gpus)), ("CPU", self.actor_cpus * len(devices))):
            if need > cluster.get(what, 0) + 1e-9:  # the actors would wait for resources forever (1e-9: float sums)
                raise ValueError(
                    f"the workers ask for {need} {what}(s) in all (devices, threads_per_worker) but the Ray "
                    f"cluster has {cluster.get(what, 0):g} (ray.cluster_resources())"
                )
        # cloudpickle: by reference for an importable function, by value for one defined in a script
        try:
            self.make_worker = ray.cloudpickle.dumps(make_worker)
        except Exception as exc:
            raise TypeError(f"make_worker cannot be pickled to reach the Ray actors: {exc}") from exc
        self.runtime_env = runtime_env
        self.actor_class = ray.remote(concurrency_groups={"watch": 1})(RayWorker)  # `watch` beside the calls
        self.devices = [f"{g} GPUs" if isinstance(d, (list, tuple)) else str(d) for d, g in zip(devices, gpus)]
        self.slots = [RaySlot(i, label, gpus=g) for i, (label, g) in enumerate(zip(self.devices, gpus))]
        self._finalizer = weakref.finalize(self, _kill_all, ray, self.slots)

    def start(self, s: RaySlot) -> None:
        options = {"num_cpus": self.actor_cpus, "num_gpus": s.gpus, "max_restarts": 0, "runtime_env": self.runtime_env}
        s.actor = self.actor_class.options(**options).remote(self.make_worker, s.gpus, self.threads)
        s.ready_ref = s.actor.ready.remote()
        s.watch_ref = s.actor.watch.options(concurrency_group="watch").remote()
        s.starting()

    def accepts(self, s: RaySlot) -> bool:
        # One call at a time: an actor that dies loses the replies it had not sent, so with a call queued
        # behind a finished one, the finished one's reply could vanish with it and the blame (an attempt) fall on
        # it instead of on the call that was running. Prefetch is the local pool's (its workers send each
        # answer before they take the next task).
        # An actor that died idle is not sent an item (it would be blamed for it): `wait` reports its death.
        return s.state == "ready" and not s.inflight and not self._died_idle(s)

    def _died_idle(self, s: RaySlot) -> bool:
        return bool(self.ray.wait([s.watch_ref], num_returns=1, timeout=0)[0])

    def submit(self, s: RaySlot, task: Task, batched: bool, payload: bytes) -> bool:
        task.ref = s.actor.run.remote(batched, payload)
        return True

    def wait(self, timeout: float) -> list[Event]:
        by_ref = {}
        for s in self.slots:
            if s.state == "starting":
                by_ref[s.ready_ref] = s
            elif s.state == "ready":  # its call's answer, or, idle, its death (`watch`)
                by_ref[s.inflight[0].ref if s.inflight else s.watch_ref] = s
        if not by_ref:
            time.sleep(min(timeout, 0.05))
            return []
        refs = list(by_ref)
        done, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if done:
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        return [event for ref in done for event in self.poll(by_ref[ref])]

    def poll(self, s: RaySlot) -> list[Event]:
        if s.state == "starting":
            if not self.ray.wait([s.ready_ref], num_returns=1, timeout=0)[0]:
                return []
            try:
                init_error, pid, host, visible = self.ray.get(s.ready_ref)
            except Exception as exc:  # the actor died before its constructor returned
                return [(s, "died", None, _how(exc))]
            s.where = f"{host} pid {pid}" + (f" gpu {visible}" if s.gpus else "")
            return [(s, "ready" if init_error is None else "init_error", None, init_error)]
        events: list[Event] = []
        for task in s.inflight if s.state == "ready" else ():
            if not self.ray.wait([task.ref], num_returns=1, timeout=0)[0]:
                break
            try:
                kind, payload = self.ray.get(task.ref)
            except Exception as exc:  # the actor is gone (killed, crashed, out of memory)
                events.append((s, "died", None, _how(exc)))
                break
            events.append((s, kind, task.id, payload))
        if s.state == "ready" and not s.inflight and self._died_idle(s):
            try:
                self.ray.get(s.watch_ref)
            except Exception as exc:  # it died idle: no item was running, none is blamed
                return [(s, "died", None, f"{type(exc).__name__} while idle")]
        return events

    def kill(self, s: RaySlot) -> None:
        if s.actor is not None:
            self.ray.kill(s.actor, no_restart=True)

    release = kill

    def hung_start(self, s: RaySlot, limit: float) -> tuple[str, bool]:
        why = f"make_worker hung, or no node has room for num_gpus={s.gpus}"
        return f"not ready after startup_timeout={limit}s: {why}", False  # a restart may find room: not its fault

    def close(self, timeout: float) -> None:
        self._finalizer()


def _how(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _kill_all(ray: Any, slots: list[RaySlot]) -> None:
    for s in slots:
        if s.actor is not None and ray.is_initialized():
            with contextlib.suppress(Exception):  # Ray going down with the interpreter: its actors go too
                ray.kill(s.actor, no_restart=True)
        s.actor, s.state = None, "dead"
