"""What an executor is to the scheduler: the slots and tasks it keeps, what it reports, what it is asked.

An executor (:mod:`.local`'s worker processes, :mod:`.ray`'s actors) starts workers, carries tasks
to them and reports what happened; the :class:`~.scheduler.Scheduler` decides everything else.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(eq=False)
class Task:
    """One call of a worker's callable: the item indices it covers, the run that sent it (None once
    that run ended early: the answer is dropped) and the executor's handle on the call."""

    id: int
    indices: tuple[int, ...]
    run: Any
    ref: Any = None


@dataclass(eq=False)
class Slot:
    """One worker of a pool as the scheduler sees it; an executor adds its own fields."""

    index: int
    device: str  # how reports name the worker's devices: "cuda:2", "cpu:1", "cuda:2,3", "2 GPUs"
    state: str = "waiting"  # waiting (stagger) -> starting -> ready -> dead (a restart: starting)
    where: str = ""  # "pid 4242", "host pid 4242 gpu 3": set by the executor
    started_at: float = 0.0
    running_since: float | None = None
    inflight: deque[Task] = field(default_factory=deque)  # oldest (running) first
    restarts_used: int = 0  # deaths in a row without an answered task (the `restarts` budget)
    answered: bool = False  # this worker (since its last start) answered a task: it can run items
    init_error: str | None = None  # make_worker raised, or (local) did not return within startup_timeout
    kill_reason: str | None = None
    timed_out_task: int | None = None  # the id of the task the worker was killed for
    # how the worker last died before it was ready; kept across restarts until one gets ready,
    # so a map with no worker left can say what went wrong
    died_starting: str | None = None

    def starting(self) -> None:
        """A new worker process or actor is starting in this slot."""
        self.state, self.started_at, self.running_since = "starting", time.monotonic(), None
        self.kill_reason, self.init_error, self.timed_out_task, self.where = None, None, None, ""
        self.answered = False

    def claim_restart(self, blamed: bool, budget: int) -> tuple[bool, str]:
        """Whether this worker, just dead (``blamed``: on a task it was running), is restarted, and the words
        saying so. `budget` (the pool's ``restarts``; 0: never) counts deaths in a row without an answered task
        (a broken device, a make_worker that crashes); a worker that answered tasks and then died on one is
        restarted regardless, since the item's ``retries`` bound those deaths (a bad item would otherwise use up
        the budget and leave the pool without workers)."""
        charged = not (blamed and self.answered)
        if budget == 0 or (charged and self.restarts_used >= budget):
            return False, "not restarted"
        self.restarts_used += charged
        if charged:
            return True, f"restarting ({self.restarts_used}/{budget} in a row)"
        return True, "restarting (blamed on the item, whose retries count it)"

    def name(self) -> str:
        return f"worker {self.index} on {self.device}" + (f" ({self.where})" if self.where else "")


# What an executor reports: (slot, kind, task id or None, payload). Kinds: "ready",
# "init_error" (payload: make_worker's traceback), "ok" (pickled list of results), "error"
# (traceback), "died" (payload: how; the worker is gone, its answers before that reported).
Event = tuple[Slot, str, "int | None", Any]


class Executor(Protocol):
    """What the scheduler needs of a backend: workers it can start, feed, hear from and stop."""

    slots: list[Slot]
    prefetch: int  # tasks queued per worker
    restarts: int  # restarts a worker may use
    startup_timeout: float | None
    died_starting_hint: str  # added when every worker died before it was ready

    def start(self, slot: Slot) -> None: ...  # (re)start the worker (slot.starting()); raises what that raises
    def accepts(self, slot: Slot) -> bool: ...  # whether tasks may be sent to it now
    def submit(self, slot: Slot, task: Task, batched: bool, payload: bytes) -> bool: ...  # False: it is gone
    def wait(self, timeout: float) -> list[Event]: ...  # what the workers reported, waiting for a first report
    def poll(self, slot: Slot) -> list[Event]: ...  # what one worker has reported, without waiting
    def kill(self, slot: Slot) -> None: ...  # stop it at once; wait() reports its death
    def release(self, slot: Slot) -> None: ...  # it died (or failed): make sure it is gone, free what it held
    def hung_start(self, slot: Slot, limit: float) -> tuple[str, bool]: ...  # why killed; make_worker's fault?
