"""Worker factories for the WorkerPool feature tests: batches, journals, output, startup, interpreters.

Module-level, so that worker processes can import them (conftest.py puts this folder on the path
the workers inherit). Cross-process facts go through files named in the items or bound with
``functools.partial``, since the workers share no memory with the test.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch


def make_batch_square(device):
    """Batched: items ``x`` -> ``(x * x, size of the batch it came in)``; a negative ``x`` raises."""

    def run(batch):
        for x in batch:
            if x < 0:
                raise ValueError(f"bad item {x}")
        return [(x * x, len(batch)) for x in batch]

    return run


def make_out_of_memory_above_two(device):
    """Batched: items ``x`` -> ``(x, size of the batch)``; a batch of more than 2 runs out of memory, as a
    batch_size too big for a GPU."""
    import torch

    def run(batch):
        if len(batch) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a stand-in)")
        return [(x, len(batch)) for x in batch]

    return run


def make_short_answer(device):
    """Batched, broken: returns one result fewer than it got items (none for a batch of one)."""
    return lambda batch: [x * x for x in batch[1:]]


def make_logged_square(device):
    """Item ``(x, log, delay)``: appends ``x`` to the file ``log``, sleeps ``delay`` s, returns ``x * x``.

    Batched or not: a list of such items gives a list of results. The log counts computations
    across runs and processes (appends of one short line are whole).
    """

    def one(item):
        x, log, delay = item
        with open(log, "a") as f:
            f.write(f"{x}\n")
        time.sleep(delay)
        return x * x

    def run(item):
        return [one(i) for i in item] if isinstance(item, list) else one(item)

    return run


def make_pid_logged_square(pid_log, device):
    """:func:`make_logged_square`, the worker's pid appended to ``pid_log`` first (bind it with partial)."""
    with open(pid_log, "a") as f:
        f.write(f"{os.getpid()}\n")
    return make_logged_square(device)


CHATTY_LINES = 40


def make_chatty(device):
    """Prints while loading, then per item ``x`` prints :data:`CHATTY_LINES` lines to stdout and to
    stderr, and a progress-bar-like ``\\r`` refresh; returns ``(x, pid)``."""
    print(f"loading on {device}", flush=True)

    def run(x):
        for j in range(CHATTY_LINES):
            print(f"item {x} line {j} " + "x" * 50)
            print(f"item {x} err {j}", file=sys.stderr)
        sys.stderr.write(f"\r bar {x} 50%\r bar {x} 100%\n")
        return x, os.getpid()

    return run


def make_hang_once(marker_dir, device):
    """make_worker that hangs (sleeps an hour) in the first worker to claim ``marker_dir/hang``."""
    try:
        with open(Path(marker_dir, "hang"), "x"):
            pass
    except FileExistsError:
        return lambda x: x
    time.sleep(3600)


def make_hang(device):
    """make_worker that never returns (a model load stuck on a network file system)."""
    time.sleep(3600)


def make_loading_log(marker_dir, device):
    """make_worker that records whether another worker was loading at the same time as it.

    It creates ``marker_dir/loading-<pid>`` for half a second; if another such file exists meanwhile,
    it also creates ``marker_dir/overlap-<pid>``. Items ``x`` -> ``(x, pid)``.
    """
    me = Path(marker_dir, f"loading-{os.getpid()}")
    me.touch()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        if any(p != me for p in Path(marker_dir).glob("loading-*")):
            Path(marker_dir, f"overlap-{os.getpid()}").touch()
        time.sleep(0.02)
    me.unlink()
    return lambda x: (x, os.getpid())


def make_environment(device):
    """Item (ignored) -> the worker's interpreter, prefix, CUDA_VISIBLE_DEVICES and GPU count."""

    def run(_):
        return {
            "executable": sys.executable,
            "prefix": sys.prefix,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpus": torch.cuda.device_count(),
            "device": str(device),
        }

    return run
