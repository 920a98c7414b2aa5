"""The child side of :class:`agents.placement.WorkerPool`: one spawned process serving one device.

Protocol. The parent sends ``(index, pickled item)`` on the worker's task queue and ``None`` to
stop. The worker answers on its own pipe with ``(kind, index, payload)`` tuples:
``("ready", -1, pid)`` once ``make_worker`` has built its callable, ``("init_error", -1,
traceback)`` if that failed, then per item ``("ok", index, pickled result)`` or ``("error", index,
traceback)``, in the order the items arrived. Sending results synchronously (no feeder thread)
means that once the worker takes its next item, the previous result is wholly in the pipe: when
a worker dies, the oldest item the parent has not heard back about is the one it was running.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .tensors import to_cpu

# How often an idle worker checks that its parent is still alive, in seconds; an orphan exits
# instead of holding a GPU's memory forever.
PARENT_CHECK_S = 1.0


def worker_main(
    device: str,
    make_worker: Callable[[torch.device], Callable[[Any], Any]],
    tasks: Any,
    results: Any,
    threads: int,
) -> None:
    """Build the worker's callable on ``device`` (as this child sees it), then serve items until ``None``."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    dev = torch.device(device)
    try:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        fn = make_worker(dev)
        if not callable(fn):
            raise TypeError(f"make_worker must return a callable item -> result, got {type(fn).__name__}")
    except BaseException:
        results.send(("init_error", -1, traceback.format_exc()))
        return
    results.send(("ready", -1, os.getpid()))
    parent = multiprocessing.parent_process()
    while True:
        try:
            msg = tasks.get(timeout=PARENT_CHECK_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if msg is None:
            # a normal exit, not os._exit: multiprocessing's finalisers must unlink the named
            # semaphores that libraries create in the worker (tqdm's lock, for one)
            return
        index, payload = msg
        try:
            # results travel as CPU tensors: a CUDA tensor pickled here would be rebuilt on the
            # parent's cuda:0, which is a different GPU than this child's cuda:0
            out = pickle.dumps(to_cpu(fn(pickle.loads(payload))), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            results.send(("error", index, traceback.format_exc()))
            continue
        results.send(("ok", index, out))
