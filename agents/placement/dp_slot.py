"""Parent-side handle of one :class:`WorkerPool` worker, and stopping workers."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Slot:
    """Parent-side state of one worker: its device, process, channels and the items it holds."""

    index: int
    device: str  # as the parent names it, e.g. "cuda:3"
    proc: Any = None
    tasks: Any = None
    conn: Any = None
    state: str = "starting"  # starting -> ready -> dead (a restart goes back to starting)
    inflight: deque = field(default_factory=deque)
    running_since: float | None = None
    kill_reason: str | None = None
    timed_out_item: int | None = None  # the item the parent killed this worker for
    restarts_used: int = 0
    init_error: str | None = None
    # how the worker last died before it was ready (a crash, not a make_worker exception); kept
    # across restarts until one gets ready, so a map with no worker left can say what went wrong
    died_starting: str | None = None


def release(slot: Slot) -> None:
    """Close the parent's ends of a worker's channels (its process is gone or going)."""
    if slot.conn is not None:
        slot.conn.close()
        slot.conn = None
    if slot.tasks is not None:
        # a dead child never drains its queue; don't let the feeder thread block interpreter exit
        slot.tasks.cancel_join_thread()
        slot.tasks.close()
        slot.tasks = None


def shutdown(slots: list[Slot], timeout: float) -> None:
    """Stop every worker: ask politely, then terminate, then kill. Safe to call twice."""
    for s in slots:
        if s.proc is not None and s.proc.is_alive() and s.tasks is not None:
            try:
                s.tasks.put(None)
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + timeout
    for s in slots:
        if s.proc is None:
            continue
        if _started(s.proc):
            _stop(s.proc, deadline)
        release(s)
        s.state = "dead"


def _started(proc: Any) -> bool:
    """Whether ``proc.start()`` succeeded. A process whose start raised has no pid, and joining
    it raises an AssertionError that would hide the error that stopped it from starting."""
    return proc.pid is not None


def _stop(proc: Any, deadline: float) -> None:
    proc.join(max(0.0, deadline - time.monotonic()))
    if proc.is_alive():
        proc.terminate()
        proc.join(2.0)
    if proc.is_alive():
        proc.kill()
        proc.join(2.0)
