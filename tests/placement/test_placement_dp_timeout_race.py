"""An item that finishes right as its item_timeout runs out is not blamed on the next one.

The race: the worker sends item A's result and starts item B between the parent's wait and its
timeout check, which still measures A's run. Played here on a `MapRun` with a stand-in worker
(a real pipe, a process that records a kill) so that the order of events is exact."""

from __future__ import annotations

import pickle
import time
import types
from multiprocessing import Pipe

import pytest

from agents.placement.dp_health import check_timeouts, on_death
from agents.placement.dp_run import MapRun
from agents.placement.dp_shapes import WorkerSpec
from agents.placement.dp_slot import Slot, Task


class FakeProc:
    def __init__(self):
        self.killed, self.returncode, self.pid = False, None, 12345

    def kill(self):
        self.killed, self.returncode = True, -9

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode


def run_with_busy_worker(item_timeout=1.0):
    parent_end, child_end = Pipe()
    slot = Slot(index=0, spec=WorkerSpec("cpu:0", ()), proc=FakeProc(), conn=parent_end, state="ready")
    pool = types.SimpleNamespace(
        _slots=[slot], prefetch=2, restarts=0, startup_timeout=None, _spawn=lambda s: None, hub=None
    )
    run = MapRun(
        pool,
        ["a", "b", "c"],
        batch_size=None,
        retries=0,
        item_timeout=item_timeout,
        journal=None,
        window=None,
        progress=False,
        desc="t",
    )
    while run.pull_one():
        pass
    run.pending.clear()
    # A = item 0 running for longer than the timeout, B = item 1 queued
    slot.inflight.extend([Task(0, (0,), run), Task(1, (1,), run)])
    slot.running_since = time.monotonic() - 2 * item_timeout
    return run, slot, child_end


def test_a_result_that_arrived_before_the_check_prevents_the_kill():
    run, slot, child = run_with_busy_worker()
    child.send(("ok", 0, pickle.dumps(["A done"])))  # A finished just in time; B has just started
    check_timeouts(run)
    assert not slot.proc.killed and list(run.out) == [(0, "A done")]
    assert [t.indices for t in slot.inflight] == [(1,)] and time.monotonic() - slot.running_since < 1.0


def test_a_result_that_lands_after_the_kill_requeues_the_next_item_without_an_attempt():
    run, slot, child = run_with_busy_worker()
    check_timeouts(run)
    assert slot.proc.killed and slot.timed_out_task == 0
    child.send(("ok", 0, pickle.dumps(["A done"])))  # it was sent before the kill took effect
    with pytest.warns(Warning, match="died"):
        on_death(run, slot)
    assert list(run.out) == [(0, "A done")]
    assert list(run.pending) == [1] and run.attempts[1] == 0 and [i for i, _ in run.out] == [0]


def test_an_item_that_did_run_over_is_still_failed():
    run, slot, _ = run_with_busy_worker()
    check_timeouts(run)
    with pytest.warns(Warning, match="item_timeout"):
        on_death(run, slot)
    [(index, failure)] = run.out
    assert index == 0 and failure.attempts == 1 and "exceeded item_timeout" in failure.error
    assert list(run.pending) == [1] and run.attempts[1] == 0
