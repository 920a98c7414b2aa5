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
        s.proc.join(max(0.0, deadline - time.monotonic()))
        if s.proc.is_alive():
            s.proc.terminate()
            s.proc.join(2.0)
        if s.proc.is_alive():
            s.proc.kill()
            s.proc.join(2.0)
        release(s)
        s.state = "dead"
