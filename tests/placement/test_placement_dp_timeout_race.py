"""An item that finishes right as its item_timeout runs out is not blamed on the next one.

The race: the worker sends item A's result and starts item B between the parent's wait and its
timeout check, which still measures A's run. Played here on a `Scheduler` with a stand-in worker
(a real pipe, a process that records a kill) so that the order of events is exact."""

from __future__ import annotations

import pickle
import time
from multiprocessing import Pipe

import pytest

from agents.placement.pool.arguments import WorkerSpec
from agents.placement.pool.executor import Task
from agents.placement.pool.local import LocalExecutor
from agents.placement.pool.scheduler import Scheduler


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
    executor = LocalExecutor(
        pickle.dumps(abs), [WorkerSpec("cpu:0", ())], 1, None, prefetch=2, restarts=0, startup_timeout=None
    )
    executor._finalizer.detach()
    executor.hub.close()  # no process connects: the stand-in worker is the slot's own pipe
    slot = executor.slots[0]
    slot.proc, slot.conn, slot.state = FakeProc(), parent_end, "ready"
    run = Scheduler(
        executor,
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
    run.check_timeouts()
    assert not slot.proc.killed and list(run.out) == [(0, "A done")]
    assert [t.indices for t in slot.inflight] == [(1,)] and time.monotonic() - slot.running_since < 1.0


def test_a_result_that_lands_after_the_kill_requeues_the_next_item_without_an_attempt():
    run, slot, child = run_with_busy_worker()
    run.check_timeouts()
    assert slot.proc.killed and slot.timed_out_task == 0
    child.send(("ok", 0, pickle.dumps(["A done"])))  # it was sent before the kill took effect
    with pytest.warns(Warning, match="died"):
        run.on_death(slot, "signal SIGKILL")
    assert list(run.out) == [(0, "A done")]
    assert list(run.pending) == [1] and run.attempts[1] == 0 and [i for i, _ in run.out] == [0]


def test_an_item_that_did_run_over_is_still_failed():
    run, slot, _ = run_with_busy_worker()
    run.check_timeouts()
    with pytest.warns(Warning, match="item_timeout"):
        run.on_death(slot, "signal SIGKILL")
    [(index, failure)] = run.out
    assert index == 0 and failure.attempts == 1 and "exceeded item_timeout" in failure.error
    assert list(run.pending) == [1] and run.attempts[1] == 0
