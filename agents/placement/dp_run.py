"""One :meth:`WorkerPool.map` call: dispatch, results, retries, worker deaths, timeouts, progress.

Invariants: an item index is in at most one worker's ``inflight`` deque or in the pending/retry
queues, never two places; a result is accepted only from the worker holding the index, whose
channel is drained before its in-flight items are requeued, so no item is lost or returned twice.
"""

from __future__ import annotations

import pickle
import time
import traceback
import warnings
from collections import deque
from multiprocessing.connection import wait
from typing import Any, Protocol

from tqdm.auto import tqdm

from .dp_slot import Slot, release
from .dp_types import (
    ItemFailure,
    WorkerDiedWarning,
    WorkerInitError,
    describe_exit,
    last_line,
)
from .tensors import to_cpu

_MISSING = object()
_WAIT_S = 0.5  # longest sleep between liveness checks when no message arrives


class Pool(Protocol):
    """What a map run uses of its pool: :class:`~agents.placement.dp.WorkerPool`, which imports
    this module to run its maps, so it is named here by what it offers, not imported."""

    prefetch: int  # items queued per worker
    restarts: int  # restarts a worker may use
    _slots: list[Slot]  # one per worker

    def _spawn(self, slot: Slot) -> None:
        """(Re)start ``slot``'s worker process."""


class MapRun:
    """State of one map over ``items`` on ``pool``'s workers (see :meth:`WorkerPool.map`)."""

    def __init__(self, pool: Pool, items: list, retries: int, item_timeout: float | None, progress: bool, desc: str):
        self.pool, self.items, self.retries, self.item_timeout = pool, items, retries, item_timeout
        n = len(items)
        self.results: list[Any] = [_MISSING] * n
        self.attempts = [0] * n
        self.avoid: dict[int, set[int]] = {}
        self.pending: deque[int] = deque(range(n))
        self.retry: deque[int] = deque()
        self.failures: dict[int, ItemFailure] = {}
        self.last_error: dict[int, tuple[str, str]] = {}  # (summary, text) of a retried item's last failure
        self.done = 0
        self.total_bar = tqdm(total=n, desc=desc, unit="item", disable=not progress, position=0)
        self.bars = [
            tqdm(desc=f"  [{s.device} #{s.index}]", unit="item", disable=not progress, position=i + 1, leave=False)
            for i, s in enumerate(pool._slots)
        ]

    # ------------------------------------------------------------------ bookkeeping
    def _finish(self, index: int, value: Any, slot: Slot | None) -> None:
        if self.results[index] is not _MISSING:  # cannot happen by the invariants; guard them anyway
            raise RuntimeError(f"internal error: item {index} finished twice")
        self.results[index] = value
        self.done += 1
        self.total_bar.update(1)
        if slot is not None:
            self.bars[slot.index].update(1)

    def _fail(self, index: int, slot: Slot, summary: str, text: str) -> None:
        """One attempt of ``index`` failed on ``slot``: retry it elsewhere, or record the failure."""
        self.attempts[index] += 1
        self.last_error[index] = (summary, text)
        if self.attempts[index] <= self.retries:
            self.avoid.setdefault(index, set()).add(slot.index)
            self.retry.append(index)
            return
        self._give_up(index, slot, summary, text)

    def _give_up(self, index: int, slot: Slot, summary: str, text: str) -> None:
        """Record ``index`` as failed after ``attempts[index]`` runs: a retry could not help."""
        failure = ItemFailure(index, slot.device, self.attempts[index], summary, text)
        self.failures[index] = failure
        self._finish(index, failure, None)

    def _next_for(self, slot: Slot) -> int | None:
        live = {s.index for s in self.pool._slots if s.state != "dead"}
        for _ in range(len(self.retry)):
            index = self.retry.popleft()
            # "retried on another worker": unless every live worker has already failed it
            if slot.index not in self.avoid[index] or live <= self.avoid[index]:
                return index
            self.retry.append(index)
        return self.pending.popleft() if self.pending else None

    def _dispatch(self, slot: Slot) -> None:
        while slot.state != "dead" and len(slot.inflight) < self.pool.prefetch:
            index = self._next_for(slot)
            if index is None:
                return
            try:
                # CPU copies: a CUDA tensor would be rebuilt on the child's cuda:<same index>
                payload = pickle.dumps(to_cpu(self.items[index]), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # pickling fails the same way every time: it never runs
                summary = f"item is not picklable: {type(exc).__name__}: {exc}"
                self._give_up(index, slot, summary, traceback.format_exc())
                continue
            slot.tasks.put((index, payload))
            slot.inflight.append(index)
            if slot.state == "ready" and slot.running_since is None:
                slot.running_since = time.monotonic()

    # ------------------------------------------------------------------ messages and deaths
    def _handle(self, slot: Slot, msg: tuple) -> None:
        kind, index, payload = msg
        now = time.monotonic()
        if kind == "ready":
            slot.state = "ready"
            slot.died_starting = None
            slot.running_since = now if slot.inflight else None
            return
        if kind == "init_error":
            slot.init_error = payload
            slot.kill_reason = "make_worker raised:\n" + payload
            return  # the child exits next; its sentinel brings it to _on_death
        if not slot.inflight or index not in slot.inflight:
            raise RuntimeError(f"internal error: worker {slot.index} answered item {index} it does not hold")
        slot.inflight.remove(index)
        slot.running_since = now if slot.inflight else None
        if kind == "ok":
            try:
                value = pickle.loads(payload)
            except Exception as exc:  # the parent cannot read it however often it runs
                self.attempts[index] += 1
                self._give_up(
                    index, slot, f"result cannot be unpickled here: {type(exc).__name__}: {exc}", traceback.format_exc()
                )
                return
            self._finish(index, value, slot)
        elif kind == "error":
            self._fail(index, slot, last_line(payload), payload)
        else:
            raise RuntimeError(f"internal error: unknown message kind {kind!r}")

    def _drain(self, slot: Slot) -> None:
        """Handle every complete message the worker managed to send."""
        conn = slot.conn
        while conn is not None and not conn.closed:
            try:
                if not conn.poll():
                    return
                msg = conn.recv()
            except (EOFError, OSError):  # the child died mid-message or the pipe is closed
                return
            self._handle(slot, msg)

    def _on_death(self, slot: Slot) -> None:
        self._drain(slot)
        slot.proc.join(1.0)
        reason = slot.kill_reason or describe_exit(slot.proc.exitcode)
        pid = slot.proc.pid
        release(slot)
        held = list(slot.inflight)
        slot.inflight.clear()
        slot.running_since = None
        if slot.init_error is not None:
            # make_worker raised: no item ran, so the held ones lose no attempt; a restart would
            # most likely raise the same way, so the worker stays dead
            self.pending.extendleft(reversed(held))
            slot.state = "dead"
            warnings.warn(
                WorkerDiedWarning(
                    f"worker {slot.index} on {slot.device} (pid {pid}) failed in make_worker: "
                    f"{last_line(slot.init_error)}"
                ),
                stacklevel=4,
            )
            return
        timed_out, slot.timed_out_item = slot.timed_out_item, None
        if slot.state != "ready":
            slot.died_starting = reason.splitlines()[0]
        if slot.state != "ready" or (timed_out is not None and timed_out not in held):
            # died while building its model (a crash, not an exception), or killed for an item that
            # finished before the kill landed: none of the held items ran over, none loses an attempt
            self.pending.extendleft(reversed(held))
            held = []
        if held:
            # results are sent in order, so the oldest held item is the one that was running
            self.pending.extendleft(reversed(held[1:]))
            text = f"worker {slot.index} on {slot.device} (pid {pid}) died while running this item: {reason}"
            self._fail(held[0], slot, text.splitlines()[0], text)
        restart = slot.restarts_used < self.pool.restarts
        warnings.warn(
            WorkerDiedWarning(
                f"worker {slot.index} on {slot.device} (pid {pid}) died "
                + ("before it was ready " if slot.state != "ready" else "")
                + f"({reason.splitlines()[0]})"
                + (f" while running item {held[0]}" if held else "")
                + (f"; {len(held) - 1} queued item(s) requeued" if len(held) > 1 else "")
                + (f"; restarting ({slot.restarts_used + 1}/{self.pool.restarts})" if restart else "; not restarted")
            ),
            stacklevel=4,
        )
        if restart:
            slot.restarts_used += 1
            self.pool._spawn(slot)
        else:
            slot.state = "dead"

    def _check_timeouts(self) -> None:
        if self.item_timeout is None:
            return
        now = time.monotonic()
        for s in self.pool._slots:
            if s.state == "ready" and s.running_since is not None and s.kill_reason is None:
                if now - s.running_since > self.item_timeout:
                    self._drain(s)  # a result that came in since the wait: that item did finish in time
                    if s.running_since is None or time.monotonic() - s.running_since <= self.item_timeout:
                        continue
                    s.timed_out_item = s.inflight[0]
                    s.kill_reason = f"item {s.inflight[0]} exceeded item_timeout={self.item_timeout}s"
                    s.proc.kill()

    # ------------------------------------------------------------------ main loop
    def execute(self) -> tuple[list[Any], list[ItemFailure]]:
        """Run until every item has a result or a failure record; returns both."""
        try:
            while self.done < len(self.items):
                live = [s for s in self.pool._slots if s.state != "dead"]
                if not live:
                    self._no_workers_left()
                    break
                for s in live:
                    self._dispatch(s)
                by_conn = {s.conn: s for s in live}
                by_sentinel = {s.proc.sentinel: s for s in live}
                ready = wait(list(by_conn) + list(by_sentinel), timeout=_WAIT_S)
                for obj in ready:
                    if obj in by_conn:
                        self._drain(by_conn[obj])
                for obj in ready:
                    if obj in by_sentinel:
                        self._on_death(by_sentinel[obj])
                self._check_timeouts()
        finally:
            for bar in self.bars:
                bar.close()
            self.total_bar.close()
        return self.results, [self.failures[i] for i in sorted(self.failures)]

    def _no_workers_left(self) -> None:
        slots = self.pool._slots
        if all(s.init_error is not None for s in slots):
            raise WorkerInitError(
                f"every worker failed in make_worker ({len(slots)} of {len(slots)}); "
                f"first traceback:\n{slots[0].init_error}"
            )
        why = ""
        if all(s.died_starting is not None for s in slots):
            # a crash before make_worker returned, or a child that never reached worker_main: the
            # workers' own output (stderr) holds the reason, which the parent never receives
            why = (
                f"; every worker died before it was ready ({slots[0].died_starting}), their own output says "
                'why (a script that starts workers needs an `if __name__ == "__main__":` guard)'
            )
        for index in list(self.retry) + list(self.pending):
            summary = "no live worker left to run this item (all died and used up their restarts)" + why
            text = summary
            if index in self.last_error:
                summary += f"; last attempt: {self.last_error[index][0]}"
                text += "\nlast attempt:\n" + self.last_error[index][1]
            failure = ItemFailure(index, "-", self.attempts[index], summary, text)
            self.failures[index] = failure
            self._finish(index, failure, None)
        self.retry.clear()
        self.pending.clear()
