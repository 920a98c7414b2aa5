"""Worker factories for the Ray backend's tests (module-level, so Ray actors can import them).

One pool serves most tests, since each actor takes seconds to start: its callable, built by
:func:`make_toolbox`, reads what to do from the item, ``(kind, x, *args)``. Facts that cross
processes (which attempt already failed, which process ran what) go through files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch


def weights() -> torch.Tensor:
    """The fixed matrix the ``"matmul"`` items are multiplied by (the same in every process)."""
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


def make_toolbox(device):
    """Item ``(kind, x, *args)`` -> result, by kind; a list of items (``batch_size``) -> a list.

    Kinds: ``"id"`` x; ``"matmul"`` x @ weights(); ``"pid"`` (x, pid), after ``args[0]`` s if
    given; ``"sleep"`` x after ``args[0]`` s; ``"fail"`` ValueError; ``"fail_first"`` ValueError
    until the file ``args[0]`` exists (the first attempt creates it); ``"fail_log"`` ValueError
    after creating ``args[0]/x-pid``; ``"log"`` 10 * x after creating a file ``args[0]/x-...``;
    ``"die_once"`` the process exits at once unless the file ``args[0]`` exists (created first);
    ``"batch_len"`` the length of the batch it came in (None alone); ``"short"`` in a batch of
    several, and ``"short_always"`` in any batch: the batch's answer is one result short.
    """
    w = weights().to(device)

    def one(item):
        kind, x, *args = item
        if kind == "id":
            return x
        if kind == "matmul":
            return x.to(device) @ w
        if kind == "pid":
            time.sleep(args[0] if args else 0)
            return x, os.getpid()
        if kind == "sleep":
            time.sleep(args[0])
            return x
        if kind == "fail":
            raise ValueError(f"bad item {x}")
        if kind in ("fail_first", "die_once"):
            marker = Path(args[0])
            if not marker.exists():
                marker.touch()
                if kind == "die_once":
                    os._exit(3)
                raise ValueError(f"first attempt at {x}")
            return x
        if kind == "fail_log":
            Path(args[0], f"{x}-{os.getpid()}").touch()
            raise ValueError(f"bad item {x}")
        if kind == "log":
            Path(args[0], f"{x}-{os.getpid()}-{time.monotonic_ns()}").touch()
            return 10 * x
        if kind in ("short", "short_always"):
            return x
        if kind == "batch_len":
            return None  # not in a batch
        raise KeyError(kind)

    def run(item):
        if isinstance(item, list):
            out = [len(item) if i[0] == "batch_len" else one(i) for i in item]
            kinds = {i[0] for i in item}
            if "short_always" in kinds or (len(item) > 1 and "short" in kinds):
                out.pop()
            return out
        return one(item)

    return run


def make_broken(device):
    """make_worker that raises (a model that cannot be built)."""
    raise OSError(f"cannot load weights on {device}")


def make_hung(device):
    """make_worker that never returns (a download that hangs)."""
    time.sleep(3600)
