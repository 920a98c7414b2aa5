"""What :func:`agents.placement.dp_map` reports: failed items, the error raised for them, worker deaths."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ItemFailure:
    """An item that failed on every attempt.

    ``index`` is its position in the input, ``device`` the worker device of the last attempt,
    ``attempts`` how many times it ran, ``error`` a one-line summary and ``traceback`` the worker's
    formatted traceback of the last attempt (or the description of the worker's death).
    """

    index: int
    device: str
    attempts: int
    error: str
    traceback: str


def _rebuilt(cls: type[BaseException], args: tuple, state: dict[str, Any]) -> BaseException:
    """An exception of class ``cls`` with ``args`` and attributes ``state``, not through its ``__init__``."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class PicklableError(RuntimeError):
    """A RuntimeError whose ``__init__`` takes other arguments than its message, yet pickles and copies.

    Python rebuilds an exception as ``cls(*self.args)``, which such an ``__init__`` refuses: the error
    would not cross a process boundary (a job run in a ``ProcessPoolExecutor`` or a Ray task that calls
    ``dp_map`` would get ``BrokenProcessPool`` instead of the failures).
    """

    def __reduce__(self):
        return _rebuilt, (type(self), self.args, self.__dict__)


class DPMapError(PicklableError):
    """Some items failed (``on_error="raise"``), raised after every other item has finished.

    ``failures`` lists the :class:`ItemFailure` records by index; ``results`` is the full result
    list in input order, with the ItemFailure records in the failed positions, so the work done
    is not lost.
    """

    def __init__(self, failures: list[ItemFailure], results: list[Any]):
        self.failures, self.results = failures, results
        first = failures[0]
        super().__init__(
            f"{len(failures)} of {len(results)} item(s) failed; first: item {first.index} on "
            f"{first.device} after {first.attempts} attempt(s): {first.error}\n{first.traceback}"
        )


def stream_failure(value: Any, on_error: str) -> None:
    """Raise :class:`DPMapError` for an :class:`ItemFailure` met in an ``imap`` stream (``on_error="raise"``).

    The error's ``failures`` and ``results`` hold that one record: the stream stops there.
    """
    if on_error == "raise" and isinstance(value, ItemFailure):
        err = DPMapError([value], [value])
        err.args = (
            f"item {value.index} failed on {value.device} after {value.attempts} attempt(s): {value.error}; "
            f"the iteration stops here (on_error='collect' goes on past failures)\n{value.traceback}",
        )
        raise err


class WorkerInitError(RuntimeError):
    """Every worker failed while building its model (``make_worker`` raised); nothing could run."""


class WorkerDiedWarning(RuntimeWarning):
    """A worker process died (killed, crashed, out of memory, or stopped for exceeding item_timeout)."""


class BatchShrunkWarning(RuntimeWarning):
    """A batch ran out of memory: its items run alone, and the rest of the map takes half as many a batch."""


def describe_exit(exitcode: int | None) -> str:
    """``"signal SIGKILL"`` / ``"exit code 3"`` / ``"unknown exit"`` for a process exit code."""
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def last_line(traceback_text: str) -> str:
    """The last non-empty line of a formatted traceback (``"ValueError: bad item"``)."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else traceback_text
