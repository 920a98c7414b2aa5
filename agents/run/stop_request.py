"""Ctrl-C (and SIGTERM, what Slurm, Docker and systemd send) during training: stop where the run can be saved.

The first signal asks the loop to stop after the iteration it is in (and its evaluation), where the
learner's state is whole: it writes a checkpoint there and ends as an interrupted run (exit 130, 143 for
SIGTERM), so the minutes since the last checkpoint are kept. A second signal interrupts at once, as
Python's own handler does. Only a single-process run in the main thread takes the handlers: under
torchrun the ranks would see the signal in different iterations and disagree on where to save.
"""

from __future__ import annotations

import signal
import sys
import threading


class StopRequest:
    """``with StopRequest(enabled) as stop:`` ... ``stop.signal``: the first signal received (None: none yet)."""

    def __init__(self, enabled: bool = True):
        self.signal: int | None = None
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self._outer: dict[int, object] = {}

    @property
    def exit_status(self) -> int:
        """The shell's status for the signal that stopped the run: 128 + its number (130 Ctrl-C, 143 SIGTERM)."""
        return 128 + (self.signal or signal.SIGINT)

    def __enter__(self) -> StopRequest:
        if not self.enabled:
            return self
        # SIGINT only where Python's own handler is in place (not under a caller's); SIGTERM only where its
        # default (ending the process) is, and not on Windows, where it is no signal a process is sent
        wanted = {signal.SIGINT: signal.default_int_handler}
        if sys.platform != "win32":
            wanted[signal.SIGTERM] = signal.SIG_DFL
        for signum, default in wanted.items():
            if signal.getsignal(signum) is default:
                self._outer[signum] = signal.signal(signum, self._ask)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._outer.items():
            signal.signal(signum, handler)
        self._outer.clear()

    def _ask(self, signum, frame) -> None:
        if self.signal is not None:  # asked twice: no waiting for the iteration
            raise KeyboardInterrupt
        self.signal = signum
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(
            f"\n{what}: stopping after this iteration to write a checkpoint (Ctrl-C again stops at once, "
            "losing what the run did since its last checkpoint)",
            file=sys.stderr,
            flush=True,
        )
