"""One map on a :class:`~agents.placement.ray_pool.RayWorkerPool`: hand-out, batches, retries, deaths.

:meth:`RayMapRun.events` yields ``(index, result or ItemFailure)`` as items finish; the pool's
``map``, ``imap`` and ``imap_unordered`` are built on it. Items are pulled from the input only
as workers need them. Invariants, as in the local pool's run: an unfinished index is in exactly
one place (the pending or solo queue, or one call in one worker's in-flight deque), and it
finishes once. An actor runs its calls in order, so when it dies the oldest call it had not
answered is the one it was running; the calls queued behind it lose no attempt.
"""

from __future__ import annotations

import pickle
import time
import traceback
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from .dp_types import ItemFailure, WorkerDiedWarning, WorkerInitError, last_line
from .journal import Journal
from .tensors import to_cpu

_WAIT_S = 0.5  # longest wait for a result before the timeouts are checked again


@dataclass(eq=False)
class Call:
    """One ``run`` call on an actor: the item indices it carries and Ray's reference to its answer."""

    indices: tuple[int, ...]
    ref: Any
    solo: bool  # sent alone after a failure; requeued alone if its actor dies before running it


@dataclass(eq=False)
class RaySlot:
    """One worker of the pool: its actor (replaced on a restart) and its state."""

    index: int
    device: str  # as the caller wrote it: "cpu", "cuda", "cuda:3", "2 GPUs"
    gpus: int
    actor: Any = None
    ready_ref: Any = None
    state: str = "starting"  # "starting" -> "ready"; "dead" once out of restarts
    where: str = ""  # "host gpu 5", known once ready
    started_at: float = 0.0
    running_since: float | None = None
    restarts_used: int = 0
    init_error: str | None = None
    died_starting: str | None = None
    kill_reason: str | None = None
    inflight: deque[Call] = field(default_factory=deque)

    def name(self) -> str:
        return f"worker {self.index} on {self.device}" + (f" ({self.where})" if self.where else "")


class Pool(Protocol):
    """What a run uses of :class:`~agents.placement.ray_pool.RayWorkerPool`."""

    ray: Any  # the ray module
    prefetch: int
    restarts: int
    startup_timeout: float | None
    _slots: list[RaySlot]

    def _spawn(self, slot: RaySlot) -> None:
        """Start (or restart) ``slot``'s actor."""

    def _kill(self, slot: RaySlot) -> None:
        """Kill ``slot``'s actor at once."""


class RayMapRun:
    """State of one map of ``items`` over ``pool``'s actors (see :meth:`RayWorkerPool.map`).

    ``window``, when set, bounds how far past ``self.floor`` (the lowest index the caller still
    waits for, kept up to date by an ordered ``imap``) items are pulled, so that one slow item does
    not make the others pile up in memory.
    """

    def __init__(
        self,
        pool: Pool,
        items: Iterable[Any],
        *,
        retries: int,
        item_timeout: float | None,
        batch_size: int | None,
        journal: Journal | None,
        window: int | None,
        progress: bool,
        desc: str,
    ):
        self.pool, self.ray, self.retries, self.item_timeout = pool, pool.ray, retries, item_timeout
        self.batch_size, self.journal, self.window = batch_size, journal, window
        self.source: Iterator[Any] = iter(items)
        self.exhausted = False
        self.pulled = 0  # the next index to pull
        self.floor = 0
        self.items: dict[int, Any] = {}  # pulled and not finished
        self.pending: deque[int] = deque()  # to send, batched with their neighbours
        self.solo: deque[int] = deque()  # to send alone: retries, and the items of a failed batch
        self.attempts: dict[int, int] = {}
        self.avoid: dict[int, set[int]] = {}
        self.last_error: dict[int, tuple[str, str]] = {}
        self.finished: deque[tuple[int, Any]] = deque()
        self.no_workers_why: str | None = None
        total = len(items) if hasattr(items, "__len__") else None
        self.bar = tqdm(total=total, desc=desc, unit="item", disable=not progress)
        for s in pool._slots:
            s.inflight.clear()  # calls of an abandoned earlier iterator: their answers are not awaited

    # ------------------------------------------------------------------ the loop
    def events(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, result)`` (an :class:`ItemFailure` for a failed item) as items finish."""
        try:
            while True:
                while self.finished:
                    yield self.finished.popleft()
                self._pull()
                if self.finished:
                    continue
                if self.exhausted and not self.items:
                    return
                live = [s for s in self.pool._slots if s.state != "dead"]
                if not live:
                    self._no_workers_left()
                    continue
                for s in live:
                    self._dispatch(s)
                self._wait(live)
                self._check_timeouts()
        finally:
            self.bar.close()

    def _pull(self) -> None:
        """Take items from the input while workers could use them (journal hits finish at once)."""
        want = sum(self.pool.prefetch for s in self.pool._slots if s.state != "dead") * (self.batch_size or 1)
        while not self.exhausted and len(self.pending) < max(want, 1) and len(self.finished) < max(want, 64):
            if self.window is not None and self.pulled - self.floor >= self.window:
                return
            try:
                item = next(self.source)
            except StopIteration:
                self.exhausted = True
                return
            index, self.pulled = self.pulled, self.pulled + 1
            self.items[index] = item
            found, result = self.journal.get(index, item) if self.journal is not None else (False, None)
            if found:
                self._finish(index, result, record=False)
            elif self.no_workers_why is not None:
                self._give_up(index, "-", self.no_workers_why)
            else:
                self.pending.append(index)

    # ------------------------------------------------------------------ bookkeeping
    def _finish(self, index: int, value: Any, *, record: bool = True) -> None:
        item = self.items.pop(index)
        if record and self.journal is not None and not isinstance(value, ItemFailure):
            self.journal.put(index, item, value)
        self.finished.append((index, value))
        self.bar.update(1)

    def _give_up(self, index: int, device: str, summary: str, text: str | None = None) -> None:
        self._finish(index, ItemFailure(index, device, self.attempts.get(index, 0), summary, text or summary))

    def _call_failed(self, slot: RaySlot, call: Call, summary: str, text: str) -> None:
        """A call raised, answered wrongly, or died running: split a batch, else count an attempt."""
        if len(call.indices) > 1:
            # a batch that failed: its items run again one by one, so that one bad item does not
            # fail its neighbours; none of them has used an attempt yet
            for index in reversed(call.indices):
                self.last_error[index] = (summary, text)
                self.solo.appendleft(index)
            return
        index = call.indices[0]
        self.attempts[index] = self.attempts.get(index, 0) + 1
        self.last_error[index] = (summary, text)
        if self.attempts[index] <= self.retries:
            self.avoid.setdefault(index, set()).add(slot.index)
            self.solo.append(index)
        else:
            self._give_up(index, slot.device, summary, text)

    def _requeue(self, calls: Iterable[Call]) -> None:
        """Put the items of calls that never ran back at the front of their queues, in order."""
        for call in reversed(list(calls)):
            (self.solo if call.solo else self.pending).extendleft(reversed(call.indices))

    # ------------------------------------------------------------------ sending
    def _next_call(self, slot: RaySlot) -> tuple[tuple[int, ...], bool] | None:
        live = {s.index for s in self.pool._slots if s.state != "dead"}
        for _ in range(len(self.solo)):
            index = self.solo.popleft()
            avoid = self.avoid.get(index, set())
            # retried on another worker, unless every live worker has already failed it
            if slot.index not in avoid or live <= avoid:
                return (index,), True
            self.solo.append(index)
        if not self.pending:
            return None
        n = min(self.batch_size or 1, len(self.pending))
        return tuple(self.pending.popleft() for _ in range(n)), False

    def _dispatch(self, slot: RaySlot) -> None:
        while slot.state == "ready" and len(slot.inflight) < self.pool.prefetch:
            self._pull()
            nxt = self._next_call(slot)
            if nxt is None:
                return
            indices, solo = nxt
            items = [self.items[i] for i in indices]
            try:
                # CPU copies: a CUDA tensor would be rebuilt on the actor's cuda:<same index>
                obj = items if self.batch_size is not None else items[0]
                payload = pickle.dumps(to_cpu(obj), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                if len(indices) > 1:  # find the item that does not pickle by sending them alone
                    self.solo.extendleft(reversed(indices))
                else:
                    summary = f"item is not picklable: {type(exc).__name__}: {exc}"
                    self._give_up(indices[0], slot.device, summary, traceback.format_exc())
                continue
            slot.inflight.append(Call(indices, slot.actor.run.remote(payload), solo))
            if slot.running_since is None:
                slot.running_since = time.monotonic()

    # ------------------------------------------------------------------ answers and deaths
    def _wait(self, live: list[RaySlot]) -> None:
        by_ref = {}
        for s in live:
            if s.state == "starting":
                by_ref[s.ready_ref] = s
            elif s.inflight:
                by_ref[s.inflight[0].ref] = s  # an actor answers in order: its oldest call is next
        if not by_ref:
            raise RuntimeError("internal error: items remain but no worker has work or is starting")
        refs = list(by_ref)
        done, _ = self.ray.wait(refs, num_returns=1, timeout=_WAIT_S)
        if done:
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            slot = by_ref[ref]
            if slot.state == "starting":
                self._on_ready(slot)
            else:
                self._drain(slot)

    def _on_ready(self, slot: RaySlot) -> None:
        try:
            init_error, pid, host, gpus = self.ray.get(slot.ready_ref)
        except Exception as exc:  # the actor died before its constructor returned
            self._on_death(slot, exc)
            return
        slot.where = f"{host} pid {pid}" + (f" gpu {gpus}" if slot.gpus else "")
        if init_error is not None:
            slot.init_error = init_error
            slot.state = "dead"
            self.pool._kill(slot)
            warnings.warn(
                WorkerDiedWarning(f"{slot.name()} failed in make_worker: {last_line(init_error)}"), stacklevel=5
            )
            return
        slot.state, slot.died_starting = "ready", None

    def _drain(self, slot: RaySlot) -> None:
        """Handle the slot's answered calls, oldest first."""
        while slot.state == "ready" and slot.inflight:
            call = slot.inflight[0]
            if not self.ray.wait([call.ref], num_returns=1, timeout=0)[0]:
                return
            try:
                ok, payload = self.ray.get(call.ref)
            except Exception as exc:  # the actor is gone (killed, crashed, out of memory)
                self._on_death(slot, exc)
                return
            slot.inflight.popleft()
            slot.running_since = time.monotonic() if slot.inflight else None
            if ok:
                self._on_result(slot, call, payload)
            else:
                self._call_failed(slot, call, last_line(payload), payload)

    def _on_result(self, slot: RaySlot, call: Call, payload: bytes) -> None:
        try:
            value = pickle.loads(payload)
        except Exception as exc:  # the caller cannot read it however often it runs
            for index in call.indices:
                self.attempts[index] = self.attempts.get(index, 0) + 1
                summary = f"result cannot be unpickled here: {type(exc).__name__}: {exc}"
                self._give_up(index, slot.device, summary, traceback.format_exc())
            return
        if self.batch_size is None:
            self._finish(call.indices[0], value)
            return
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != len(call.indices):
            got = f"{len(value)} results" if hasattr(value, "__len__") else f"a {type(value).__name__}"
            text = (
                f"the batch of items {list(call.indices)} returned {got} for {len(call.indices)} items; "
                "with batch_size the callable must return a list as long as its input"
            )
            self._call_failed(slot, call, text, text)
            return
        for index, v in zip(call.indices, value):
            self._finish(index, v)

    def _on_death(self, slot: RaySlot, exc: BaseException) -> None:
        reason = slot.kill_reason or f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        held = list(slot.inflight)
        slot.inflight.clear()
        slot.running_since = None
        self.pool._kill(slot)
        if slot.state != "ready":
            slot.died_starting = reason
        elif held:
            text = f"{slot.name()} died while running this call: {reason}"
            self._call_failed(slot, held.pop(0), text, text)
        self._requeue(held)
        restart = slot.restarts_used < self.pool.restarts
        warnings.warn(
            WorkerDiedWarning(
                f"{slot.name()} died " + ("before it was ready " if slot.state != "ready" else "") + f"({reason})"
                f"{'; restarting' if restart else '; not restarted'} "
                f"({slot.restarts_used + int(restart)}/{self.pool.restarts} restarts used)"
            ),
            stacklevel=5,
        )
        if restart:
            slot.restarts_used += 1
            self.pool._spawn(slot)
        else:
            slot.state = "dead"

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for s in self.pool._slots:
            if s.kill_reason is not None or s.state == "dead":
                continue
            if s.state == "starting" and self.pool.startup_timeout is not None:
                if now - s.started_at > self.pool.startup_timeout:
                    s.kill_reason = (
                        f"not ready after startup_timeout={self.pool.startup_timeout}s: make_worker hung, or "
                        f"no node has room for num_gpus={s.gpus}"
                    )
                    self.pool._kill(s)
            elif s.state == "ready" and self.item_timeout is not None and s.running_since is not None:
                if now - s.running_since > self.item_timeout:
                    self._drain(s)  # an answer that came in since the wait finished in time
                    if s.running_since is not None and time.monotonic() - s.running_since > self.item_timeout:
                        held = list(s.inflight[0].indices)
                        s.kill_reason = f"items {held} exceeded item_timeout={self.item_timeout}s"
                        self.pool._kill(s)

    def _no_workers_left(self) -> None:
        slots = self.pool._slots
        if all(s.init_error is not None for s in slots):
            raise WorkerInitError(
                f"every worker failed in make_worker ({len(slots)} of {len(slots)}); "
                f"first traceback:\n{slots[0].init_error}"
            )
        why = "no live worker left to run this item (all died and used up their restarts)"
        if all(s.died_starting is not None for s in slots):
            why += f"; every worker died before it was ready ({slots[0].died_starting})"
        self.no_workers_why = why
        for index in list(self.solo) + list(self.pending):
            summary, text = why, why
            if index in self.last_error:
                summary += f"; last attempt: {self.last_error[index][0]}"
                text += "\nlast attempt:\n" + self.last_error[index][1]
            self._give_up(index, "-", summary, text)
        self.solo.clear()
        self.pending.clear()
