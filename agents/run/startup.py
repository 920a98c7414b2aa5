"""Ctrl-C while an entry point starts: its imports take seconds (torch alone ~2 s on a 2-core CPU).

A KeyboardInterrupt raised inside them is not a clean stop: some imports swallow it (the Ctrl-C is lost
and the run goes on), a half-imported module breaks the next import (numpy without `iinfo`), and one that
passes through `exec` (a dataclass being made) makes `python -m` end killed by SIGINT even where it is
caught. So the interrupt is held during the imports and obeyed after them: exit status 130, nothing written. A
second Ctrl-C ends the process at once (an import or a checkpoint's read that hangs: a stalled network drive).
Only this module's own imports run before the hold: it is light on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading


@contextlib.contextmanager
def interrupt_held(what: str = "starting"):
    """Hold a Ctrl-C (SIGINT) inside the block; after it, end the process with status 130 if one came.
    Only where Python's own handler is in place, in the main thread (elsewhere the block runs as is)."""
    held: list[int] = []
    outer = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    holding = outer is signal.default_int_handler

    def hold(signum, frame):
        held.append(signum)
        if len(held) > 1:  # asked twice: no waiting for the block to end
            print(f"interrupted while {what}: nothing written", file=sys.stderr, flush=True)
            os._exit(130)

    if holding:
        signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        if holding:
            signal.signal(signal.SIGINT, outer)
    if held:
        print(f"interrupted while {what}: nothing written", file=sys.stderr)
        raise SystemExit(130)
