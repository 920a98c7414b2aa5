"""The actor side of :class:`agents.placement.ray_pool.RayWorkerPool`: one Ray actor serving one worker.

The class is plain Python (this module does not import Ray); the pool wraps it with
``ray.remote`` and the resources of its worker. Items and results travel as pickled bytes, as
in the local pool: a result reaches the caller as its own copy (a NumPy array in it is writable,
not a read-only view into Ray's object store), and an item that cannot be pickled is caught
before it is sent.
"""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .tensors import to_cpu


class RayWorker:
    """Builds ``make_worker(device)`` once, then runs pickled items (or batches) through it.

    Args:
        make_worker: The factory (``device -> (item -> result)``), pickled by the caller with
            cloudpickle; unpickled here, so that a module the actor cannot import is reported
            as ``make_worker``'s failure, with its traceback, rather than as a dead actor.
        gpus: How many GPUs Ray gave this actor; ``0`` hides every GPU from it.
        threads: Torch threads for this actor (its ``num_cpus``).
    """

    def __init__(self, make_worker: bytes, gpus: int, threads: int):
        if gpus == 0:
            # as in the local pool, a CPU worker sees no GPU (read when CUDA first initialises)
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        torch.set_num_threads(threads)
        self.device = torch.device("cuda:0" if gpus else "cpu")
        self.fn: Callable[[Any], Any] | None = None
        self.init_error: str | None = None
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            fn = pickle.loads(make_worker)(self.device)
            if not callable(fn):
                raise TypeError(f"make_worker must return a callable item -> result, got {type(fn).__name__}")
            self.fn = fn
        except BaseException:
            # reported through ready(), not raised: Ray would turn a raising constructor into an
            # actor death, which the pool could not tell apart from a crash
            self.init_error = traceback.format_exc()

    def ready(self) -> tuple[str | None, int, str, str]:
        """``(make_worker's traceback or None, pid, host name, CUDA_VISIBLE_DEVICES)``."""
        return self.init_error, os.getpid(), socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def run(self, payload: bytes) -> tuple[bool, bytes | str]:
        """``(True, pickled result)`` for the pickled item (or list of items), or ``(False, traceback)``."""
        try:
            # tensors come back on the CPU: the caller's cuda:0 is not this actor's cuda:0
            out = to_cpu(self.fn(pickle.loads(payload)))
            return True, pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return False, traceback.format_exc()
