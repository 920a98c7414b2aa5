"""The child side of :class:`agents.placement.WorkerPool`: one process serving one device (or GPU set).

Started by :func:`.dp_proc.start_process`, which passes the boot data on stdin. Protocol, over one
connection to the parent: the worker first says ``("hello", token, pid)``, then
``("ready", -1, pid)`` once ``make_worker`` has built its callable, or ``("init_error", -1,
traceback)``. The parent sends tasks ``(task_id, batched, pickled list of items)`` and ``None`` to
stop; per task the worker answers ``("ok", task_id, pickled list of results)`` or ``("error",
task_id, traceback)``, in the order the tasks arrived. A thread receives the tasks while the main
thread computes, so the parent's send never waits for a computation; results are sent by the
main thread before it takes the next task, so when a worker dies, the oldest task the parent has
not heard back about is the one it was running. The connection closing without ``None`` means
the parent is gone: the worker exits at once rather than holding a GPU's memory as an orphan.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import threading
import traceback
from multiprocessing import current_process, spawn
from multiprocessing.connection import Client
from typing import Any

import torch

from .tensors import to_cpu


def call_batch(fn: Any, items: list, batched: bool) -> list:
    """``fn`` over one task's items: ``fn(items)`` when ``batched`` (it must return one result per
    item, in a list or tuple), else ``[fn(items[0])]``."""
    if not batched:
        return [fn(items[0])]
    out = fn(items)
    if not isinstance(out, (list, tuple)):
        raise TypeError(
            f"with batch_size, the worker's callable must return a list with one result per item, "
            f"got {type(out).__name__} (for a tensor of results, return list(tensor) or tensor.tolist())"
        )
    if len(out) != len(items):
        raise ValueError(
            f"the worker's callable returned {len(out)} result(s) for a batch of {len(items)} item(s); "
            "with batch_size it must return one result per item, in order"
        )
    return list(out)


def _receive(conn: Any, tasks: queue.SimpleQueue) -> None:
    """Move the parent's messages to ``tasks``; exit the process if the parent goes away."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(1)  # the parent died (or dropped us): no one will read our results
        tasks.put(msg)
        if msg is None:
            return


def serve(boot: dict[str, Any]) -> None:
    """Prepare like a spawned child, connect back, build the callable, then serve tasks until ``None``."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    me = current_process()
    me._inheriting = True  # as in spawn: a script that starts workers when imported fails clearly
    try:
        spawn.prepare(boot["prep"])  # the parent's cwd, sys.argv and __main__ (for make_worker)
    finally:
        me._inheriting = False
    conn = Client(boot["address"], authkey=boot["authkey"])
    conn.send(("hello", boot["token"], os.getpid()))
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_receive, args=(conn, tasks), name="dp-receive", daemon=True).start()
    torch.set_num_threads(boot["threads"])
    dev = torch.device(boot["device"])
    try:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        fn = pickle.loads(boot["make_worker"])(dev)
        if not callable(fn):
            raise TypeError(f"make_worker must return a callable item -> result, got {type(fn).__name__}")
    except BaseException:
        conn.send(("init_error", -1, traceback.format_exc()))
        return
    conn.send(("ready", -1, os.getpid()))
    while True:
        msg = tasks.get()
        if msg is None:
            return
        task_id, batched, payload = msg
        try:
            # results travel as CPU tensors: a CUDA tensor pickled here would be rebuilt on the
            # parent's cuda:0, which is a different GPU than this child's cuda:0
            out = to_cpu(call_batch(fn, pickle.loads(payload), batched))
            reply = ("ok", task_id, pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:
            reply = ("error", task_id, traceback.format_exc())
        conn.send(reply)
