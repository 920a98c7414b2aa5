"""One map over a pool's workers: items pulled lazily, tasks, results, retries, deaths, timeouts.

Both backends run this scheduler: their executor (:mod:`.local`'s processes, :mod:`.ray`'s actors)
starts workers, carries tasks and reports what happened; everything else is decided here.
A *task* is one call of a worker's callable: one item, or with ``batch_size`` a list of up to k
items. A task that fails as a whole (raises, answers with another length, dies with its worker,
runs over ``item_timeout``) is split: its items run again one by one ("solo") without losing an
attempt, so one bad item does not fail its neighbours; a solo item's failures use up ``retries``.

Invariants: an item index is in at most one worker's in-flight tasks or in the pending/retry
queues; a worker's answers are all handled before its in-flight tasks are requeued, so no item is
lost or returned twice. A worker answers its tasks in order, so when it dies the oldest task it
had not answered is the one it was running.
"""

from __future__ import annotations

import itertools
import pickle
import time
import traceback
import warnings
from collections import defaultdict, deque
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

from ..oom import reads_as_oom
from ..tensors import to_cpu
from .errors import BatchShrunkWarning, ItemFailure, WorkerDiedWarning, WorkerInitError, last_line
from .executor import Executor, Slot, Task

WAIT_S = 0.5  # longest wait for an answer before deaths and timeouts are checked again
FAIL_PULL = 256  # input items a step fails once no worker is left
_TASK_IDS = itertools.count()


class Scheduler:
    """State of one map over ``items`` on ``executor``'s workers (see ``WorkerPool.map``).

    ``journal`` (an open :class:`~agents.placement.journal.Journal` or None) answers items finished
    earlier and records each new result. ``window`` bounds how far past :attr:`floor` (the oldest
    index the consumer still waits for) items are pulled; None pulls as workers need them.
    """

    def __init__(
        self,
        executor: Executor,
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
        self.executor, self.slots, self.retries, self.item_timeout = executor, executor.slots, retries, item_timeout
        self.batched, self.size = batch_size is not None, batch_size or 1
        self.journal, self.window, self.floor = journal, window, 0
        self.source = iter(items)
        self.items: dict[int, Any] = {}  # pulled, not finished
        self.pulled, self.exhausted = 0, False
        self.pending: deque[int] = deque()  # fresh items, batched as they leave
        self.retry: deque[int] = deque()  # solo items
        self.attempts: defaultdict[int, int] = defaultdict(int)
        self.avoid: dict[int, set[int]] = {}
        # (summary, text) of an item's last failure; an item that has failed (alone or in a batch) runs solo
        self.last_error: dict[int, tuple[str, str]] = {}
        self.batch_error: dict[int, str] = {}  # how the batch an item was split from failed
        self.out: deque[tuple[int, Any]] = deque()
        self.clean_stop = False  # an exception left the bookkeeping whole (a bad item, a journal mismatch)
        total = len(items) if hasattr(items, "__len__") else None
        self.total_bar = tqdm(total=total, desc=desc, unit="item", disable=not progress, position=0)
        self.bars = [
            tqdm(desc=f"  [{s.device}]", unit="item", disable=not progress, position=i + 1, leave=False)
            for i, s in enumerate(self.slots)
        ]

    def complete(self) -> bool:
        """Whether every item of the input has a result or a failure record."""
        return self.exhausted and not self.items

    # ------------------------------------------------------------------ items in
    def pull_one(self) -> bool:
        """Take the next input item (answered at once when the journal has it); False when none can be taken."""
        if self.exhausted or (self.window is not None and self.pulled - self.floor >= self.window):
            return False
        index = self.pulled
        try:
            item = next(self.source)
            found, value = (False, None) if self.journal is None else self.journal.get(index, item)
        except StopIteration:
            self.exhausted = True
            self.total_bar.total = self.pulled
            self.total_bar.refresh()
            return False
        except BaseException:
            # the input raised, or the journal refused an item (another job's journal, an item it
            # cannot digest): nothing here is half done
            self.clean_stop = True
            raise
        self.pulled += 1
        if found:
            self.finish(index, value, None, journaled=True)
            return True
        self.items[index] = item
        self.pending.append(index)
        return True

    def _next_task(self, slot: Slot) -> list[int]:
        live = {s.index for s in self.slots if s.state != "dead"}
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
        while self.executor.accepts(slot) and len(slot.inflight) < self.executor.prefetch:
            indices = self._next_task(slot)
            if not indices:
                return
            try:
                # CPU copies: a CUDA tensor would be rebuilt on the worker's cuda:<same index>
                payload = pickle.dumps([to_cpu(self.items[i]) for i in indices], protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # pickling fails the same way every time: it never runs
                self.unrunnable(indices, slot, f"item is not picklable: {type(exc).__name__}: {exc}", ran=False)
                continue
            task = Task(next(_TASK_IDS), tuple(indices), self)
            if not self.executor.submit(slot, task, self.batched, payload):
                self.requeue(indices)  # the worker is gone; its death is handled in this step
                return
            slot.inflight.append(task)
            if slot.state == "ready" and slot.running_since is None:
                slot.running_since = time.monotonic()

    def requeue(self, indices: Iterable[int]) -> None:
        """Put items back at the front of their queue; they lose no attempt."""
        for index in reversed(list(indices)):
            (self.retry if index in self.last_error else self.pending).appendleft(index)

    # ------------------------------------------------------------------ results out
    def finish(self, index: int, value: Any, slot: Slot | None, *, journaled: bool = False) -> None:
        """``index`` has its result (in the journal already: `handle` writes a task's results there first) or
        failure record; ``journaled``: read from the journal, not run."""
        if not journaled:
            if index not in self.items:  # cannot happen by the invariants; guard them anyway
                raise RuntimeError(f"internal error: item {index} finished twice")
            self.items.pop(index)
        for state in (self.attempts, self.avoid, self.last_error, self.batch_error):
            state.pop(index, None)  # a stream of millions keeps nothing per finished item
        self.total_bar.update(1)
        if slot is not None:
            self.bars[slot.index].update(1)
        self.out.append((index, value))

    def split(self, indices: Iterable[int], summary: str, text: str) -> None:
        """A task of several items failed as a whole: each item runs alone next, losing no attempt. Out of
        memory, the later batches take half as many items (each such batch failed and ran again item by
        item, without a word)."""
        indices = list(indices)
        smaller = max(1, min(self.size, len(indices) // 2))  # half the failed batch (one sent earlier may be larger)
        if reads_as_oom(last_line(text)) and smaller < self.size:  # the exception's line, not the code shown above it
            self.size = smaller
            warnings.warn(
                f"a batch of {len(indices)} items ran out of memory ({summary}): its items run alone, and the "
                f"rest of this map takes batches of {self.size}",
                BatchShrunkWarning,
                stacklevel=2,
            )
        for index in indices:
            self.last_error[index] = (f"batch {indices}: {summary}", text)
            self.batch_error[index] = f"before that, it ran in batch {indices}, which failed:\n{text}"
        self.retry.extendleft(reversed(indices))

    def fail(self, indices: tuple[int, ...], slot: Slot, summary: str, text: str) -> None:
        """A task failed on ``slot``: a batch is split; a lone item is retried elsewhere, or recorded as failed."""
        if len(indices) > 1:
            self.split(indices, summary, text)
            return
        [index] = indices
        self.attempts[index] += 1
        self.last_error[index] = (summary, text)
        if self.attempts[index] <= self.retries:
            self.avoid.setdefault(index, set()).add(slot.index)
            self.retry.append(index)
            return
        self.give_up(index, slot.device, summary, text)

    def unrunnable(self, indices: list[int] | tuple[int, ...], slot: Slot, summary: str, *, ran: bool) -> None:
        """A task fails the same way however often it runs: a batch is split; a lone item is failed."""
        if len(indices) > 1:
            self.split(indices, summary, traceback.format_exc())
            return
        self.attempts[indices[0]] += ran
        self.give_up(indices[0], slot.device, summary, traceback.format_exc())

    def give_up(self, index: int, device: str, summary: str, text: str) -> None:
        """Record ``index`` as failed after ``attempts[index]`` runs: a retry could not help."""
        if index in self.batch_error:
            text += "\n" + self.batch_error.pop(index)
        self.finish(index, ItemFailure(index, device, self.attempts[index], summary, text), None)

    # ------------------------------------------------------------------ what the workers report
    def handle(self, slot: Slot, kind: str, task_id: int | None, payload: Any) -> None:
        """Act on one report of ``slot``'s worker (see :data:`.executor.Event`)."""
        if slot.state == "dead":
            return  # reported after its worker was given up (make_worker failed)
        now = time.monotonic()
        if kind == "ready":
            slot.state = "ready"
            slot.died_starting = None
            slot.running_since = now if slot.inflight else None
            return
        if kind == "init_error":
            slot.init_error = payload
            slot.kill_reason = "make_worker raised:\n" + payload
            self.on_death(slot, slot.kill_reason)
            return
        if kind == "died":
            self.on_death(slot, payload)
            return
        if not slot.inflight or slot.inflight[0].id != task_id:
            raise RuntimeError(f"internal error: worker {slot.index} answered task {task_id} it does not hold")
        task = slot.inflight.popleft()
        slot.running_since = now if slot.inflight else None
        slot.answered, slot.restarts_used = True, 0  # a working worker: its next death starts a new count
        if task.run is not self:
            return  # sent by a run that ended early: no one waits for it
        if kind == "ok":
            try:
                values = pickle.loads(payload)
            except Exception as exc:  # the caller cannot read it however often it runs
                summary = f"result cannot be unpickled here: {type(exc).__name__}: {exc}"
                self.unrunnable(task.indices, slot, summary, ran=True)
                return
            if self.journal is not None:  # a batch's results: one write and one fsync for all of them
                done = [(i, self.items[i], v) for i, v in zip(task.indices, values) if i in self.items]
                self.journal.put_many([d for d in done if not isinstance(d[2], ItemFailure)])
            for index, value in zip(task.indices, values):
                self.finish(index, value, slot)
        elif kind == "error":
            summary = last_line(payload) + (f" (batch {list(task.indices)})" if self.batched else "")
            self.fail(task.indices, slot, summary, payload)
        else:
            raise RuntimeError(f"internal error: unknown report {kind!r}")

    def on_death(self, slot: Slot, how: str) -> None:
        """``slot``'s worker is gone: blame the task it was running, requeue the rest, restart it.

        Blamed is its oldest task, unless it died while starting (a crash, not an exception), or
        was killed for a task that finished before the kill landed; make_worker failing blames
        nothing and the slot stays dead, since a restart would most likely fail the same way.
        """
        for event in self.executor.poll(slot):  # its answers first: what finished is not run again
            if event[1] in ("ok", "error"):
                self.handle(*event)
        self.executor.release(slot)
        reason = slot.kill_reason or how
        held = [t for t in slot.inflight if t.run is self]
        running = slot.inflight[0] if slot.inflight else None
        slot.inflight.clear()
        slot.running_since = None
        if slot.init_error is not None:
            self.requeue(i for t in held for i in t.indices)
            slot.state = "dead"
            warnings.warn(
                WorkerDiedWarning(f"{slot.name()} failed in make_worker: {last_line(slot.init_error)}"), stacklevel=2
            )
            return
        timed_out, slot.timed_out_task = slot.timed_out_task, None
        first = reason.splitlines()[0]
        if slot.state != "ready":
            slot.died_starting = first
        blamed = None
        if slot.state == "ready" and running is not None and running.run is self:
            if timed_out is None or timed_out == running.id:
                blamed = running
        queued = [i for t in held if t is not blamed for i in t.indices]
        self.requeue(queued)
        note = f"{slot.name()} died " + ("before it was ready " if slot.state != "ready" else "")
        note += f"({first})"
        if blamed is not None:
            note += f" while running {_what(blamed)}"
            text = f"{slot.name()} died while running this item: {reason}"
            self.fail(blamed.indices, slot, text.splitlines()[0], text)
        restart, words = slot.claim_restart(blamed is not None, self.executor.restarts)
        note += f"; {len(queued)} queued item(s) requeued" if queued else ""
        warnings.warn(WorkerDiedWarning(f"{note}; {words}"), stacklevel=2)
        if restart:
            self.executor.start(slot)
        else:
            slot.state = "dead"

    def check_timeouts(self) -> None:
        """Kill a worker past ``startup_timeout`` while starting, or past ``item_timeout`` on one task."""
        limit = self.executor.startup_timeout
        for s in self.slots:
            if s.kill_reason is not None:
                continue
            if s.state == "starting" and limit is not None and time.monotonic() - s.started_at > limit:
                s.kill_reason, make_worker_failed = self.executor.hung_start(s, limit)
                if make_worker_failed:
                    s.init_error = s.kill_reason
                self.executor.kill(s)
            elif self._running_over(s):
                for event in self.executor.poll(s):  # an answer since the wait: that task finished in time
                    self.handle(*event)
                if self._running_over(s):
                    s.timed_out_task = s.inflight[0].id
                    s.kill_reason = f"{_what(s.inflight[0])} exceeded item_timeout={self.item_timeout}s"
                    self.executor.kill(s)

    def _running_over(self, s: Slot) -> bool:
        """Whether ``s``'s worker has been running its current task for longer than ``item_timeout``."""
        if s.state != "ready" or s.running_since is None or self.item_timeout is None:
            return False
        return time.monotonic() - s.running_since > self.item_timeout

    def no_workers_left(self) -> None:
        """Every worker is dead: fail what is pulled and up to `FAIL_PULL` items more (each step; or raise
        :class:`WorkerInitError` when none ever started)."""
        slots = self.slots
        if all(s.init_error is not None for s in slots):
            raise WorkerInitError(
                f"every worker failed in make_worker ({len(slots)} of {len(slots)}); first, worker 0 on "
                f"{slots[0].device}:\n{slots[0].init_error}"
            )
        why = ""
        if all(s.died_starting is not None for s in slots):
            why = f"; every worker died before it was ready ({slots[0].died_starting})"
            why += self.executor.died_starting_hint
        # a bounded share of the input a step, not all of it: a stream may never end (imap_unordered over a
        # sensor feed), and its consumer meets the failures as it reads, as it would meet results
        for _ in range(FAIL_PULL):
            if not self.pull_one():
                break
        for index in list(self.retry) + list(self.pending):
            summary = "no live worker left to run this item (all died and used up their restarts)" + why
            text = summary
            if index in self.last_error:
                summary += f"; last attempt: {self.last_error[index][0]}"
                text += "\nlast attempt:\n" + self.last_error[index][1]
            self.give_up(index, "-", summary, text)
        self.retry.clear()
        self.pending.clear()

    # ------------------------------------------------------------------ main loop
    def step(self) -> None:
        """Dispatch, wait for reports (at most :data:`WAIT_S`), act on them and on timeouts."""
        if not any(s.state != "dead" for s in self.slots):
            self.no_workers_left()
            return
        waiting = next((s for s in self.slots if s.state == "waiting"), None)
        if waiting is not None and not any(s.state == "starting" for s in self.slots):  # stagger: the next one
            self.executor.start(waiting)
        while not self.pending and not self.out and self.pull_one():
            pass  # journaled items come out before any worker is up
        for s in self.slots:
            self._dispatch(s)
        if self.out or self.complete():
            return
        for event in self.executor.wait(WAIT_S):
            self.handle(*event)
        self.check_timeouts()

    def detach(self) -> None:
        """End this run early: its tasks still in workers are dropped when they answer."""
        for s in self.slots:
            for t in s.inflight:
                if t.run is self:
                    t.run = None
        for bar in self.bars:
            bar.close()
        self.total_bar.close()


def _what(task: Task) -> str:
    return f"item {task.indices[0]}" if len(task.indices) == 1 else f"batch {list(task.indices)}"
