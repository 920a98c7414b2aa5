"""The actor side of the Ray executor: one Ray actor serving one worker.

The class is plain Python (this module does not import Ray); the executor wraps it with
``ray.remote`` and the resources of its worker. Tasks and answers are those of a local worker
process (:func:`..process.run_task`): pickled bytes, so that a result reaches the caller as its
own copy (a NumPy array in it is writable, not a read-only view into Ray's object store).
"""

from __future__ import annotations

import os
import socket
import traceback
from typing import Any

import torch

from ..process import build_worker, run_task


class RayWorker:
    """Builds ``make_worker(device)`` once, then runs tasks (pickled lists of items) through it.

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
