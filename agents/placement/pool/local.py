"""The local executor: one worker process per slot on this machine, and their output shown here.

Workers are started by :mod:`.process` and connect back to its :class:`~.process.Hub`; this module
feeds them tasks, turns what they send (and their exits) into the scheduler's reports, kills and
stops them. A worker's stdout and stderr are pipes that threads here read (portable: no signals,
no terminal tricks): each complete line, and each carriage-return refresh of a progress bar, is
written whole to this process's ``sys.stdout`` / ``sys.stderr``, prefixed with the worker's
device (``[cuda:0] loading...``), under one lock, so lines of different workers never cut into
each other; a crashing interpreter's last words (written by C code to the descriptor) included.
"""

from __future__ import annotations

import contextlib
import functools
import re
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, BinaryIO

from .arguments import WorkerSpec
from .errors import describe_exit
from .executor import Event, Slot, Task
from .process import Hub, start_process

_WRITE_LOCK = threading.Lock()  # one line at a time, whichever worker wrote it
_CHUNK = 65536
_ENDING = re.compile(rb"(\r\n|\n|\r)")  # captured: split() keeps each ending


@dataclass(eq=False)
class LocalSlot(Slot):
    """A worker process: its devices, process, connection and output threads."""

    spec: WorkerSpec | None = None
    proc: Any = None  # subprocess.Popen
    conn: Any = None  # the worker's connection, once it has connected back
    token: str = ""  # what the worker says when it connects (index and start count)
    starts: int = 0
    outputs: list[threading.Thread] = field(default_factory=list)


class LocalExecutor:
    """Worker processes on this machine, one per :class:`~.arguments.WorkerSpec` (see ``WorkerPool``)."""

    died_starting_hint = (
        ', their own output says why (a script that starts workers needs an `if __name__ == "__main__":` guard)'
    )

    def __init__(
        self,
        make_worker: bytes,
        specs: list[WorkerSpec],
        threads: int,
        python: str | None,
        *,
        prefetch: int,
        restarts: int,
        startup_timeout: float | None,
    ):
        self.make_worker, self.threads, self.python = make_worker, threads, python
        self.prefetch, self.restarts, self.startup_timeout = prefetch, restarts, startup_timeout
        self.hub = Hub()
        self.slots = [LocalSlot(i, spec.label, spec=spec) for i, spec in enumerate(specs)]
        self.devices = [spec.canonical for spec in specs]  # as check_devices gives them
        self._finalizer = weakref.finalize(self, _close, self.slots, self.hub, 5.0)

    def start(self, s: LocalSlot) -> None:
        threads = str(self.threads)
        env = {"CUDA_VISIBLE_DEVICES": s.spec.visible_devices(), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        s.starts += 1
        s.token = f"{s.index}:{s.starts}"
        # a start that raises (too many open files, a script that starts workers when imported)
        # propagates as it is; the slot keeps no process
        s.proc = None
        device = "cuda:0" if s.spec.cuda else "cpu"
        name = f"dp-worker-{s.index}-{s.device}"
        s.proc = start_process(self.hub, s.token, name, self.make_worker, device, self.threads, env, self.python)
        s.outputs = start_pumps(s.proc, s.device, self.hub.wake)
        s.starting()
        s.where = f"pid {s.proc.pid}"

    def accepts(self, s: LocalSlot) -> bool:
        if s.state == "starting" and s.conn is None:
            s.conn = self.hub.take(s.token)
        return s.conn is not None and s.state in ("starting", "ready")

    def submit(self, s: LocalSlot, task: Task, batched: bool, payload: bytes) -> bool:
        try:
            s.conn.send((task.id, batched, payload))
        except (OSError, ValueError):
            return False
        return True

    def wait(self, timeout: float) -> list[Event]:
        live = [s for s in self.slots if s.state in ("starting", "ready")]
        by_conn = {s.conn: s for s in live if s.conn is not None and not s.conn.closed}
        ready = wait([*by_conn, self.hub.wake_conn], timeout=timeout)
        self.hub.drain_wakes()
        events = [event for c in ready if c in by_conn for event in self.poll(by_conn[c])]
        for s in live:
            if (s.conn is not None and s.conn.closed) or (s.proc is not None and s.proc.poll() is not None):
                if s.conn is None:  # it may have connected and said why it stopped just before
                    s.conn = self.hub.take(s.token, timeout=1.0)
                events += self.poll(s)
                self.release(s)  # a worker that closed its connection may still be running
                events.append((s, "died", None, describe_exit(s.proc.returncode)))
        return events

    def poll(self, s: LocalSlot) -> list[Event]:
        """Every complete message the worker managed to send; at the end of its connection, closes it."""
        events: list[Event] = []
        while s.conn is not None and not s.conn.closed:
            try:
                if not s.conn.poll():
                    break
                kind, task_id, payload = s.conn.recv()
            except (EOFError, OSError):  # the worker died mid-message or the connection broke
                s.conn.close()
                break
            events.append((s, kind, None if task_id < 0 else task_id, payload))
        return events

    def kill(self, s: LocalSlot) -> None:
        if s.proc is not None:
            s.proc.kill()

    def release(self, s: LocalSlot) -> None:
        _reap(s)

    def hung_start(self, s: LocalSlot, limit: float) -> tuple[str, bool]:
        why = "make_worker still running, or the process hung while starting"
        return f"not ready within startup_timeout={limit:g}s ({why})", True

    def close(self, timeout: float) -> None:
        self._finalizer.detach()
        _close(self.slots, self.hub, timeout)


def _reap(s: LocalSlot) -> None:
    """Kill the worker's process (TerminateProcess on Windows), reap it, close its connection."""
    if s.proc is not None and s.proc.poll() is None:
        s.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            s.proc.wait(5.0)
    if s.conn is not None:
        s.conn.close()
        s.conn = None


def _close(slots: list[LocalSlot], hub: Hub, timeout: float) -> None:
    """Stop every worker: ask politely, then kill; show their last output. Safe to call twice.

    While waiting, answers of abandoned tasks are read and dropped, so that a worker blocked
    sending one can reach the stop message.
    """
    for s in slots:
        if s.conn is not None and s.proc is not None and s.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                s.conn.send(None)
    deadline = time.monotonic() + timeout
    for s in slots:
        if s.proc is None:
            continue
        # a worker not serving yet cannot read the stop message
        while s.conn is not None and s.state == "ready" and s.proc.poll() is None and time.monotonic() < deadline:
            try:
                if s.conn.poll(0.05):
                    s.conn.recv_bytes()
            except (EOFError, OSError):
                time.sleep(0.05)
        _reap(s)
        for t in s.outputs:
            t.join(2.0)  # its last lines reach the parent's output before we return
        s.outputs = []
        s.state = "dead"
    hub.close()


# ---------------------------------------------------------------------------------- output
def split_segments(buffer: bytes) -> tuple[list[tuple[bytes, str]], bytes]:
    """``([(text, ending), ...], rest)``: the complete segments of ``buffer`` and its unfinished tail.

    A segment ends at ``\\n``, ``\\r\\n`` (both given back as ``"\\n"``) or a lone ``\\r`` (a progress
    bar's refresh, given back as ``"\\r"``). A ``\\r`` at the very end stays in ``rest``: the
    ``\\n`` of a ``\\r\\n`` may be in the next chunk.
    """
    held = buffer.endswith(b"\r")
    parts = _ENDING.split(buffer[:-1] if held else buffer)
    segments = [(text, "\r" if end == b"\r" else "\n") for text, end in zip(parts[:-1:2], parts[1::2])]
    return segments, parts[-1] + (b"\r" if held else b"")


def _write(stream_name: str, text: str) -> None:
    target = getattr(sys, stream_name)  # looked up at each write: pytest and notebooks swap it
    if target is None:  # pythonw: no console
        return
    with _WRITE_LOCK, contextlib.suppress(OSError, ValueError):  # a closed or broken stream must not kill the pump
        try:
            target.write(text)
        except UnicodeEncodeError:  # workers write UTF-8; a narrow parent stream (cp1252 redirected) gets `\u2713`
            encoding = target.encoding or "ascii"
            target.write(text.encode(encoding, "backslashreplace").decode(encoding))
        target.flush()


def pump(source: BinaryIO, prefix: str, stream_name: str, on_eof: Callable[[], Any] | None = None) -> None:
    """Copy ``source`` (a worker's pipe) to this process's ``sys.<stream_name>``, each segment prefixed.

    Returns at end of file (the worker exited), writing an unfinished last line with a newline;
    calls ``on_eof`` then, so that a loop waiting for the worker wakes up.
    """
    rest = b""
    try:
        with contextlib.suppress(OSError, ValueError):  # the pipe broke or closed: as at its end
            for chunk in iter(functools.partial(source.read, _CHUNK), b""):
                segments, rest = split_segments(rest + chunk)
                # an empty \r segment is a bar's leading carriage return
                lines = [prefix + t.decode("utf-8", "replace") + end for t, end in segments if t or end == "\n"]
                if lines:
                    _write(stream_name, "".join(lines))
        rest = rest.rstrip(b"\r")
        if rest:
            _write(stream_name, prefix + rest.decode("utf-8", "replace") + "\n")
    finally:
        with contextlib.suppress(OSError):
            source.close()
        if on_eof is not None:
            on_eof()


def start_pumps(proc: Any, label: str, on_eof: Callable[[], Any] | None = None) -> list[threading.Thread]:
    """Start the threads that show ``proc``'s stdout and stderr prefixed with ``[label] ``."""
    threads = [
        threading.Thread(
            target=pump, args=(getattr(proc, n), f"[{label}] ", n, on_eof), name=f"dp-output-{label}-{n}", daemon=True
        )
        for n in ("stdout", "stderr")
    ]
    for t in threads:
        t.start()
    return threads
