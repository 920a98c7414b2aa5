"""Worker health during a map: deaths, timeouts, and a pool with no live worker left.

Functions of a :class:`~.dp_run.MapRun` (they use its bookkeeping): a worker that died has its
connection drained first, then the task it was running is blamed (unless it died while starting,
or was killed for a task that had finished meanwhile) and its queued tasks go back unharmed.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

from .dp_slot import Slot, kill, release
from .dp_types import WorkerDiedWarning, WorkerInitError, describe_exit, last_line

# `run` below is a dp_run.MapRun, which calls these: typed Any, since importing it back would be a cycle
MapRun = Any


def on_death(run: MapRun, slot: Slot) -> None:
    """Handle ``slot``'s worker having died: its answers, its tasks (blame, requeue), a restart."""
    if slot.conn is None:  # it may have connected and said why it stopped just before
        slot.conn = run.pool.hub.take(slot.token, timeout=1.0)
    run.drain(slot)
    kill(slot)  # a worker that closed its connection may still be running
    reason = slot.kill_reason or describe_exit(slot.proc.returncode)
    pid = slot.proc.pid
    release(slot)
    held = [t for t in slot.inflight if t.run is run]
    running = slot.inflight[0] if slot.inflight else None
    slot.inflight.clear()
    slot.running_since = None
    if slot.init_error is not None:
        # make_worker raised or hung: no item ran, so the held ones lose no attempt; a restart
        # would most likely fail the same way, so the worker stays dead
        run.requeue(i for t in held for i in t.indices)
        slot.state = "dead"
        warnings.warn(
            WorkerDiedWarning(
                f"worker {slot.index} on {slot.device} (pid {pid}) failed in make_worker: {last_line(slot.init_error)}"
            ),
            stacklevel=4,
        )
        return
    timed_out, slot.timed_out_task = slot.timed_out_task, None
    if slot.state != "ready":
        slot.died_starting = reason.splitlines()[0]
    # blamed: the task it was running, unless it died while building its model (a crash, not
    # an exception), or was killed for a task that finished before the kill landed
    blamed = None
    if slot.state == "ready" and running is not None and running.run is run:
        if timed_out is None or timed_out == running.id:
            blamed = running
    queued = [i for t in held if t is not blamed for i in t.indices]
    run.requeue(queued)
    what = ""
    if blamed is not None:
        what = f"item {blamed.indices[0]}" if len(blamed.indices) == 1 else f"batch {list(blamed.indices)}"
        text = f"worker {slot.index} on {slot.device} (pid {pid}) died while running this item: {reason}"
        if len(blamed.indices) == 1:
            run.fail(blamed.indices[0], slot, text.splitlines()[0], text)
        else:
            run.split(blamed.indices, text.splitlines()[0], text)
    restart = slot.restarts_used < run.pool.restarts
    warnings.warn(
        WorkerDiedWarning(
            f"worker {slot.index} on {slot.device} (pid {pid}) died "
            + ("before it was ready " if slot.state != "ready" else "")
            + f"({reason.splitlines()[0]})"
            + (f" while running {what}" if what else "")
            + (f"; {len(queued)} queued item(s) requeued" if queued else "")
            + (f"; restarting ({slot.restarts_used + 1}/{run.pool.restarts})" if restart else "; not restarted")
        ),
        stacklevel=4,
    )
    if restart:
        slot.restarts_used += 1
        run.pool._spawn(slot)
    else:
        slot.state = "dead"


def check_timeouts(run: MapRun) -> None:
    """Kill a worker past ``startup_timeout`` while starting, or past ``item_timeout`` on one task."""
    now = time.monotonic()
    limit = run.pool.startup_timeout
    for s in run.pool._slots:
        if s.kill_reason is not None or s.proc is None:
            continue
        if s.state == "starting" and limit is not None and now - s.started_at > limit:
            s.init_error = s.kill_reason = (
                f"not ready within startup_timeout={limit:g}s (make_worker still running, or the "
                "process hung while starting)"
            )
            s.proc.kill()
        elif s.state == "ready" and s.running_since is not None and run.item_timeout is not None:
            if now - s.running_since > run.item_timeout:
                run.drain(s)  # an answer that came in since the wait: that task did finish in time
                if s.running_since is None or time.monotonic() - s.running_since <= run.item_timeout:
                    continue
                task = s.inflight[0]
                what = f"item {task.indices[0]}" if len(task.indices) == 1 else f"batch {list(task.indices)}"
                s.timed_out_task = task.id
                s.kill_reason = f"{what} exceeded item_timeout={run.item_timeout:g}s"
                s.proc.kill()


def no_workers_left(run: MapRun) -> None:
    """Every worker is dead: fail what is left (or raise :class:`WorkerInitError` when none ever started)."""
    slots = run.pool._slots
    if all(s.init_error is not None for s in slots):
        raise WorkerInitError(
            f"every worker failed in make_worker ({len(slots)} of {len(slots)}); first, worker 0 on "
            f"{slots[0].device}:\n{slots[0].init_error}"
        )
    why = ""
    if all(s.died_starting is not None for s in slots):
        # a crash before make_worker returned, or a child that never got to it: the workers' own
        # output (shown prefixed with their device) holds the reason
        why = (
            f"; every worker died before it was ready ({slots[0].died_starting}), their own output says "
            'why (a script that starts workers needs an `if __name__ == "__main__":` guard)'
        )
    while run.pull_one():
        pass
    for index in list(run.retry) + list(run.pending):
        summary = "no live worker left to run this item (all died and used up their restarts)" + why
        text = summary
        if index in run.last_error:
            summary += f"; last attempt: {run.last_error[index][0]}"
            text += "\nlast attempt:\n" + run.last_error[index][1]
        run.give_up(index, "-", summary, text)
    run.retry.clear()
    run.pending.clear()
