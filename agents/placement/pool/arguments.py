"""The pool's arguments, checked before any worker starts: a bad call fails at once (even with no
items) with a TypeError or ValueError naming the argument; and the local workers' devices.

An entry of ``devices`` is one worker: ``"cpu"``, one GPU (``"cuda:2"``, ``2``, a ``torch.device``)
or a list of GPUs (``["cuda:2", "cuda:3"]``) that become the worker's ``CUDA_VISIBLE_DEVICES``, so
``device_map="auto"`` inside it spreads a model over them. Several single-GPU workers may share a
GPU (small models); a GPU of a several-GPU worker belongs to that worker alone.
"""

from __future__ import annotations

import collections
import os
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from uavsim.machine.hardware import usable_cores

from ..checks import check_int, device_key, is_real
from ..journal import Journal

Devices = Sequence[str | int | torch.device | Sequence[str | int | torch.device]]


@dataclass(frozen=True)
class MapArgs:
    """The checked per-map arguments (see :meth:`WorkerPool.map`)."""

    batch_size: int | None
    retries: int
    on_error: str
    item_timeout: float | None
    journal: str | os.PathLike | Journal | None


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


@dataclass(frozen=True)
class PoolArgs:
    """The checked pool arguments (see ``WorkerPool``); ``specs`` only for the local backend."""

    specs: list[WorkerSpec] | None
    threads_per_worker: int | None
    prefetch: int
    restarts: int
    startup_timeout: float | None
    stagger: bool


def check_items(items: Any) -> None:
    """A TypeError naming ``items`` unless it is an iterable (rather than Python's bare "'NoneType' object is
    not iterable" from deep inside a run)."""
    if not isinstance(items, Iterable):
        raise TypeError(f"items must be an iterable of inputs (a list, a generator), got {type(items).__name__}")


def check_backend(backend: Any) -> None:
    """A ValueError unless ``backend`` names one of the pool's two backends."""
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")


def check_pool_args(
    make_worker: Any,
    devices: Any,
    threads_per_worker: Any,
    prefetch: Any,
    restarts: Any,
    startup_timeout: Any,
    stagger: Any,
    python: Any,
    runtime_env: Any,
    address: Any,
    *,
    local: bool,
) -> PoolArgs:
    """The pool arguments as Python values, or a TypeError/ValueError naming the bad one. The Ray
    executor checks its ``devices`` itself; a local worker's ``make_worker`` must pickle. Each
    backend refuses the other's arguments rather than ignoring them."""
    if local and (runtime_env is not None or address is not None):
        raise ValueError("runtime_env= and address= are the Ray backend's: pass backend='ray' with them")
    if not local and python is not None:
        raise ValueError("python= is the local backend's; with backend='ray' give the actors runtime_env=")
    if not callable(make_worker):
        raise TypeError(f"make_worker must be callable, got {type(make_worker).__name__}")
    specs = None
    if local:
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
    if threads_per_worker is None and specs is not None:  # the cores this process may use, not the host's
        threads_per_worker = max(1, usable_cores()[0] // len(specs))  # (a Slurm job, a container, taskset)
    return PoolArgs(
        specs=specs,
        threads_per_worker=check_int(threads_per_worker, "threads_per_worker", 1, allow_none=True),
        prefetch=check_int(prefetch, "prefetch", 1),
        restarts=check_int(restarts, "restarts", 0),
        startup_timeout=check_seconds(startup_timeout, "startup_timeout"),
        stagger=stagger,
    )


def visible_device_token(index: int, environ: dict[str, str] | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry that makes *this process's* ``cuda:index`` a child's only GPU.

    If this process already runs under a ``CUDA_VISIBLE_DEVICES`` list, its ``cuda:k`` is the k-th
    entry of that list (an ordinal, UUID or MIG id), not physical GPU ``k``; passing ``str(k)`` to the
    child would pick the wrong GPU.
    """
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    tokens = [t.strip() for t in visible.split(",") if t.strip()]
    if index >= len(tokens):
        raise ValueError(f"cuda:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} lists {len(tokens)} device(s)")
    return tokens[index]


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's devices: ``cuda`` lists this process's GPU indices it gets (empty: a CPU worker).

    ``label`` is how the parent names the worker in its output prefix and reports: ``"cpu:1"``
    (CPU workers are numbered by their position), ``"cuda:2"``, or ``"cuda:2,3"`` for several GPUs;
    a GPU shared by several workers gets ``"#<position>"`` after its second use.
    """

    label: str
    cuda: tuple[int, ...]

    @property
    def canonical(self) -> str | list[str]:
        """The entry as :func:`check_devices` returns it: ``"cpu"``, ``"cuda:k"`` or a list of those."""
        if not self.cuda:
            return "cpu"
        keys = [f"cuda:{k}" for k in self.cuda]
        return keys[0] if len(keys) == 1 else keys

    def visible_devices(self, environ: dict[str, str] | None = None) -> str:
        """The worker's ``CUDA_VISIBLE_DEVICES``: its GPUs as this process names them (``""``: none)."""
        return ",".join(visible_device_token(k, environ) for k in self.cuda)


def _entry_keys(entry: Any, position: int) -> list[str]:
    """The device keys of ``devices[position]``, checked on its own."""
    if not isinstance(entry, Sequence) or isinstance(entry, (str, bytes)):
        return [device_key(entry, what=f"devices[{position}]")]
    if not entry:
        raise ValueError(f"devices[{position}] is an empty list; a worker needs at least one device")
    keys = [device_key(d, what=f"devices[{position}][{j}]") for j, d in enumerate(entry)]
    if len(keys) > 1 and "cpu" in keys:
        raise ValueError(
            f"devices[{position}] = {keys} mixes 'cpu' with other devices; a worker runs on the CPU "
            "or on one or more GPUs (give a CPU worker as 'cpu')"
        )
    twice = [k for k, n in collections.Counter(keys).items() if n > 1]
    if twice:
        raise ValueError(f"devices[{position}] = {keys} names {twice[0]} more than once")
    return keys


def worker_specs(devices: Any) -> list[WorkerSpec]:
    """One :class:`WorkerSpec` per entry of ``devices``, or a ValueError/TypeError saying what is wrong.

    Refused: an empty or non-list ``devices``, an unparsable device, an empty or mixed CPU/GPU
    worker, a GPU named twice in one worker or shared by a several-GPU worker, and GPUs that this
    process cannot see.
    """
    if isinstance(devices, (str, int, torch.device)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(
            "devices must be a non-empty list such as ['cuda:0', 'cuda:1'], ['cpu', 'cpu'] or "
            f"[['cuda:0', 'cuda:1'], ['cuda:2', 'cuda:3']] (one entry per worker), got {devices!r}"
        )
    groups = [_entry_keys(entry, i) for i, entry in enumerate(devices)]
    owners: dict[str, list[int]] = collections.defaultdict(list)
    for i, keys in enumerate(groups):
        for k in keys:
            if k != "cpu":
                owners[k].append(i)
    for key, workers in owners.items():
        if len(workers) > 1 and any(len(groups[w]) > 1 for w in workers):
            raise ValueError(
                f"{key} is in workers {workers} ({[groups[w] for w in workers]}); a worker with several "
                "GPUs must have them to itself (only single-GPU workers may share a GPU)"
            )
    cuda = sorted({int(k.split(":")[1]) for k in owners})
    if cuda and not torch.cuda.is_available():
        raise ValueError(f"devices {groups} ask for CUDA, but torch.cuda.is_available() is False here")
    if cuda and cuda[-1] >= torch.cuda.device_count():
        raise ValueError(f"cuda:{cuda[-1]} requested but only {torch.cuda.device_count()} CUDA device(s) are visible")
    specs, seen = [], collections.Counter()
    for i, keys in enumerate(groups):
        indices = tuple(int(k.split(":")[1]) for k in keys if k != "cpu")
        label = f"cpu:{i}" if not indices else "cuda:" + ",".join(str(k) for k in indices)
        seen[label] += 1
        specs.append(WorkerSpec(label if seen[label] == 1 else f"{label}#{i}", indices))
    return specs


def check_devices(devices: Any) -> list[str | list[str]]:
    """The canonical form of a worker device list: ``"cpu"`` / ``"cuda:k"`` per single-device worker,
    a list of those per several-GPU worker (``[["cuda:0", "cuda:1"], "cuda:2"]``); or the
    ValueError/TypeError :func:`worker_specs` raises."""
    return [s.canonical for s in worker_specs(devices)]
