"""One map over a :class:`WorkerPool`: items pulled lazily, tasks, results, retries, deaths, timeouts.

A *task* is one call of a worker's callable: one item, or with ``batch_size`` a list of up to k
items. A task that fails as a whole (raises, answers with another length, dies with its worker,
runs over ``item_timeout``) is split: its items run again one by one ("solo") without losing an
attempt, so one bad item does not fail its neighbours; a solo item's failures use up ``retries``.

Invariants: an item index is in at most one worker's in-flight tasks or in the pending/retry
queues, never two places; an answer is accepted only from the worker holding the task, whose
connection is drained before its in-flight tasks are requeued, so no item is lost or returned
twice. Finished items leave :attr:`MapRun.out` in finishing order, for the consumer
(``WorkerPool.map``, ``imap``, ``imap_unordered``) to take.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections import defaultdict, deque
from collections.abc import Iterable
from multiprocessing.connection import wait
from typing import Any, Protocol

from tqdm.auto import tqdm

from .dp_health import check_timeouts, no_workers_left, on_death
from .dp_slot import Slot, Task
from .dp_types import ItemFailure, last_line
from .tensors import to_cpu

_WAIT_S = 0.5  # longest sleep between liveness checks when no message arrives


class Pool(Protocol):
    """What a map run uses of its pool: :class:`~agents.placement.dp.WorkerPool`, which imports
    this module to run its maps, so it is named here by what it offers, not imported."""

    prefetch: int  # tasks queued per worker
    restarts: int  # restarts a worker may use
    startup_timeout: float | None
    hub: Any  # dp_proc.Hub: where workers connect back
    _slots: list[Slot]  # one per worker

    def _spawn(self, slot: Slot) -> None:
        """(Re)start ``slot``'s worker process."""

    def _start_waiting(self) -> None:
        """Start the next staggered worker when none is starting."""

    def _next_task_id(self) -> int:
        """A task id unique in the pool."""


class MapRun:
    """State of one map over ``items`` on ``pool``'s workers (see :meth:`WorkerPool.map`).

    ``journal`` (an open :class:`~agents.placement.journal.Journal` or None) answers items finished
    earlier and records each new result. ``window`` bounds how far past :attr:`floor` (the oldest
    index the consumer still waits for) items are pulled; None pulls as workers need them.
    """

    def __init__(
        self,
        pool: Pool,
        items: Iterable[Any],
        *,
        batch_size: int | None,
        retries: int,
        item_timeout: float | None,
        journal: Any,
        window: int | None,
        progress: bool,
        desc: str,
    ):
        self.pool, self.retries, self.item_timeout = pool, retries, item_timeout
        self.batched, self.size = batch_size is not None, batch_size or 1
        self.journal, self.window, self.floor = journal, window, 0
        self.source = iter(items)
        self.items: dict[int, Any] = {}  # pulled, not finished
        self.pulled, self.done, self.exhausted = 0, 0, False
        self.pending: deque[int] = deque()  # fresh items, batched as they leave
        self.retry: deque[int] = deque()  # solo items
        self.solo: set[int] = set()
        self.attempts: defaultdict[int, int] = defaultdict(int)
        self.avoid: dict[int, set[int]] = {}
        self.last_error: dict[int, tuple[str, str]] = {}  # (summary, text) of an item's last failure
        self.batch_error: dict[int, str] = {}  # how the batch an item was split from failed
        self.out: deque[tuple[int, Any]] = deque()
        self.clean_stop = False  # an exception left the bookkeeping whole (a bad item, a journal mismatch)
        total = len(items) if hasattr(items, "__len__") else None
        self.total_bar = tqdm(total=total, desc=desc, unit="item", disable=not progress, position=0)
        self.bars = [
            tqdm(desc=f"  [{s.device}]", unit="item", disable=not progress, position=i + 1, leave=False)
            for i, s in enumerate(pool._slots)
        ]

    def complete(self) -> bool:
        """Whether every item of the input has a result or a failure record."""
        return self.exhausted and self.done == self.pulled

    # ------------------------------------------------------------------ items in
    def pull_one(self) -> bool:
        """Take the next input item (answered at once when the journal has it); False when none can be taken."""
        if self.exhausted or (self.window is not None and self.pulled - self.floor >= self.window):
            return False
        try:
            item = next(self.source)
        except StopIteration:
            self.exhausted = True
            self.total_bar.total = self.pulled
            self.total_bar.refresh()
            return False
        except BaseException:
            self.clean_stop = True  # the input raised: nothing here is half done
            raise
        index = self.pulled
        self.pulled += 1
        if self.journal is not None:
            try:
                found, value = self.journal.get(index, item)
            except BaseException:
                self.clean_stop = True  # another job's journal, an item it cannot digest
                raise
            if found:
                self.finish(index, value, None, journaled=True)
                return True
        self.items[index] = item
        self.pending.append(index)
        return True

    def _next_task(self, slot: Slot) -> list[int]:
        live = {s.index for s in self.pool._slots if s.state != "dead"}
        for _ in range(len(self.retry)):
            index = self.retry.popleft()
            avoid = self.avoid.get(index, set())
            # "retried on another worker": unless every live worker has already failed it
            if slot.index not in avoid or live <= avoid:
                return [index]
            self.retry.append(index)
        take: list[int] = []
        while len(take) < self.size:
            if self.pending:
                take.append(self.pending.popleft())
            elif not self.pull_one():
                break
        return take

    def _dispatch(self, slot: Slot) -> None:
        while slot.conn is not None and slot.state in ("starting", "ready") and len(slot.inflight) < self.pool.prefetch:
            indices = self._next_task(slot)
            if not indices:
                return
            try:
                # CPU copies: a CUDA tensor would be rebuilt on the child's cuda:<same index>
                payload = pickle.dumps([to_cpu(self.items[i]) for i in indices], protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # pickling fails the same way every time: it never runs
                summary = f"item is not picklable: {type(exc).__name__}: {exc}"
                if len(indices) > 1:
                    self.split(indices, summary, traceback.format_exc())
                else:
                    self.give_up(indices[0], slot.device, summary, traceback.format_exc())
                continue
            task = Task(self.pool._next_task_id(), tuple(indices), self)
            slot.inflight.append(task)
            try:
                slot.conn.send((task.id, self.batched, payload))
            except (OSError, ValueError):  # the worker is gone; its death is handled in this step
                slot.inflight.pop()
                self.requeue(indices)
                return
            if slot.state == "ready" and slot.running_since is None:
                slot.running_since = time.monotonic()

    def requeue(self, indices: Iterable[int]) -> None:
        """Put items back at the front of their queue; they lose no attempt."""
        for index in reversed(list(indices)):
            (self.retry if index in self.solo else self.pending).appendleft(index)

    # ------------------------------------------------------------------ results out
    def finish(self, index: int, value: Any, slot: Slot | None, *, journaled: bool = False) -> None:
        """``index`` has its result (read from the journal, when ``journaled``) or failure record."""
        if not journaled:
            if index not in self.items:  # cannot happen by the invariants; guard them anyway
                raise RuntimeError(f"internal error: item {index} finished twice")
            stored = self.items.pop(index)
            if self.journal is not None and not isinstance(value, ItemFailure):
                self.journal.put(index, stored, value)
        for state in (self.attempts, self.avoid, self.last_error, self.batch_error):
            state.pop(index, None)  # a stream of millions keeps nothing per finished item
        self.solo.discard(index)
        self.done += 1
        self.total_bar.update(1)
        if slot is not None:
            self.bars[slot.index].update(1)
        self.out.append((index, value))

    def split(self, indices: Iterable[int], summary: str, text: str) -> None:
        """A task of several items failed as a whole: each item runs alone next, losing no attempt."""
        indices = list(indices)
        for index in indices:
            self.solo.add(index)
            self.last_error[index] = (f"batch {indices}: {summary}", text)
            self.batch_error[index] = f"before that, it ran in batch {indices}, which failed:\n{text}"
        self.retry.extendleft(reversed(indices))

    def fail(self, index: int, slot: Slot, summary: str, text: str) -> None:
        """One attempt of ``index`` failed on ``slot``: retry it elsewhere, or record the failure."""
        self.attempts[index] += 1
        self.last_error[index] = (summary, text)
        if self.attempts[index] <= self.retries:
            self.solo.add(index)
            self.avoid.setdefault(index, set()).add(slot.index)
            self.retry.append(index)
            return
        self.give_up(index, slot.device, summary, text)

    def give_up(self, index: int, device: str, summary: str, text: str) -> None:
        """Record ``index`` as failed after ``attempts[index]`` runs: a retry could not help."""
        if index in self.batch_error:
            text += "\n" + self.batch_error.pop(index)
        self.finish(index, ItemFailure(index, device, self.attempts[index], summary, text), None)

    # ------------------------------------------------------------------ messages and deaths
    def _handle(self, slot: Slot, msg: tuple) -> None:
        kind, task_id, payload = msg
        now = time.monotonic()
        if kind == "ready":
            slot.state = "ready"
            slot.died_starting = None
            slot.running_since = now if slot.inflight else None
            return
        if kind == "init_error":
            slot.init_error = payload
            slot.kill_reason = "make_worker raised:\n" + payload
            return  # the child exits next; its end brings it to on_death
        if not slot.inflight or slot.inflight[0].id != task_id:
            raise RuntimeError(f"internal error: worker {slot.index} answered task {task_id} it does not hold")
        task = slot.inflight.popleft()
        slot.running_since = now if slot.inflight else None
        if task.run is not self:
            return  # sent by a run that ended early: no one waits for it
        one = len(task.indices) == 1
        if kind == "ok":
            try:
                values = pickle.loads(payload)
            except Exception as exc:  # the parent cannot read it however often it runs
                summary = f"result cannot be unpickled here: {type(exc).__name__}: {exc}"
                if not one:
                    self.split(task.indices, summary, traceback.format_exc())
                    return
                self.attempts[task.indices[0]] += 1
                self.give_up(task.indices[0], slot.device, summary, traceback.format_exc())
                return
            for index, value in zip(task.indices, values):
                self.finish(index, value, slot)
        elif kind == "error":
            summary = last_line(payload) + (f" (batch {list(task.indices)})" if self.batched else "")
            if one:
                self.fail(task.indices[0], slot, summary, payload)
            else:
                self.split(task.indices, summary, payload)
        else:
            raise RuntimeError(f"internal error: unknown message kind {kind!r}")

    def drain(self, slot: Slot) -> bool:
        """Handle every complete message the worker managed to send; True at end of connection."""
        conn = slot.conn
        while conn is not None and not conn.closed:
            try:
                if not conn.poll():
                    return False
                msg = conn.recv()
            except (EOFError, OSError):  # the child died mid-message or the connection is closed
                return True
            self._handle(slot, msg)
        return True

    # ------------------------------------------------------------------ main loop
    def step(self) -> None:
        """Dispatch, wait for answers (at most half a second), handle them and any deaths."""
        slots = self.pool._slots
        if not any(s.state != "dead" for s in slots):
            no_workers_left(self)
            return
        self.pool._start_waiting()
        while not self.pending and not self.out and self.pull_one():
            pass  # journaled items come out before any worker is up
        for s in slots:
            if s.state == "starting" and s.conn is None:
                s.conn = self.pool.hub.take(s.token)
            self._dispatch(s)
        if self.out or self.complete():
            return
        by_conn = {s.conn: s for s in slots if s.conn is not None and s.state != "dead"}
        ready = wait([*by_conn, self.pool.hub.wake_conn], timeout=_WAIT_S)
        self.pool.hub.drain_wakes()
        ended = {by_conn[c] for c in ready if c in by_conn and self.drain(by_conn[c])}
        for s in slots:
            if s.state in ("starting", "ready") and (s in ended or s.exited()):
                on_death(self, s)
        check_timeouts(self)

    def detach(self) -> None:
        """End this run early: its tasks still in workers are dropped when they answer."""
        for s in self.pool._slots:
            for t in s.inflight:
                if t.run is self:
                    t.run = None
        self.close_bars()

    def close_bars(self) -> None:
        """Close the progress bars."""
        for bar in self.bars:
            bar.close()
        self.total_bar.close()
