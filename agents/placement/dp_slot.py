"""Parent-side handle of one :class:`WorkerPool` worker, and stopping workers."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .dp_shapes import WorkerSpec


@dataclass(eq=False)
class Task:
    """One call of a worker's callable: the input indices it covers and the run that sent it.

    ``run`` is None once that run has ended early (a stream closed by its reader): the task's
    answer is then dropped when it arrives.
    """

    id: int
    indices: tuple[int, ...]
    run: Any


@dataclass(eq=False)
class Slot:
    """Parent-side state of one worker: its devices, process, connection and the tasks it holds."""

    index: int
    spec: WorkerSpec
    proc: Any = None  # subprocess.Popen
    conn: Any = None  # the worker's connection, once it has connected back
    token: str = ""  # what the worker says when it connects (index and start count)
    starts: int = 0
    outputs: list[threading.Thread] = field(default_factory=list)
    state: str = "waiting"  # waiting (stagger) -> starting -> ready -> dead (a restart goes back to starting)
    started_at: float | None = None
    inflight: deque = field(default_factory=deque)  # Tasks, oldest (running) first
    running_since: float | None = None
    kill_reason: str | None = None
    timed_out_task: int | None = None  # the id of the task the parent killed this worker for
    restarts_used: int = 0
    init_error: str | None = None  # make_worker raised, or did not return within startup_timeout
    # how the worker last died before it was ready (a crash, not a make_worker exception); kept
    # across restarts until one gets ready, so a map with no worker left can say what went wrong
    died_starting: str | None = None

    @property
    def device(self) -> str:
        """How the parent names this worker's devices (``"cuda:2"``, ``"cpu:1"``, ``"cuda:2,3"``)."""
        return self.spec.label

    def exited(self) -> bool:
        """Whether the worker's process has ended."""
        return self.proc is not None and self.proc.poll() is not None


def release(slot: Slot) -> None:
    """Close the parent's end of a worker's connection (its process is gone or going)."""
    if slot.conn is not None:
        slot.conn.close()
        slot.conn = None


def kill(slot: Slot) -> None:
    """Kill the worker's process (TerminateProcess on Windows) and reap it."""
    if slot.proc is not None and slot.proc.poll() is None:
        slot.proc.kill()
        try:
            slot.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass


def shutdown(slots: list[Slot], timeout: float) -> None:
    """Stop every worker: ask politely, then kill; show their last output. Safe to call twice.

    While waiting, answers of abandoned tasks are read and dropped, so that a worker blocked
    sending one can reach the stop message.
    """
    for s in slots:
        if s.conn is not None and s.proc is not None and s.proc.poll() is None:
            try:
                s.conn.send(None)
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + timeout
    for s in slots:
        if s.proc is None:
            continue
        while s.proc.poll() is None and time.monotonic() < deadline:
            if s.conn is None or s.state != "ready":
                break  # not serving yet: it cannot read the stop message
            try:
                if s.conn.poll(0.05):
                    s.conn.recv_bytes()
            except (EOFError, OSError):
                time.sleep(0.05)
        kill(s)
        release(s)
        for t in s.outputs:
            t.join(2.0)  # its last lines reach the parent's output before we return
        s.outputs = []
        s.state = "dead"
