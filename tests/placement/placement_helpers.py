"""Worker factories for the dp_map tests (module-level, so spawned workers can import them).

Each ``make_*`` takes the worker's device and returns the item function. Cross-process facts
(which item was already killed once, which pid ran what) go through files in a directory passed
in with the item, since the workers share no memory with the test.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch


def make_square(device):
    """Item ``x`` (int) -> ``(x * x, completion time)``; within each run of 20 later items are quicker.

    The uneven durations make the two workers finish items out of input order; the completion
    time (CLOCK_MONOTONIC, shared by all processes on Linux) lets the test prove it.
    """

    def run(x):
        time.sleep(0.002 * (20 - x % 20))
        return x * x, time.monotonic()

    return run


def make_identity(device):
    """Item -> item (for overhead and ordering)."""
    return lambda x: x


def make_describe(device):
    """Item (ignored) -> (device string, pid, torch threads, CUDA_VISIBLE_DEVICES) of the worker."""

    def run(_):
        return str(device), os.getpid(), torch.get_num_threads(), os.environ.get("CUDA_VISIBLE_DEVICES")

    return run


def make_fail_on(device):
    """Item ``(x, bad, marker_dir)``: raises ValueError for ``x in bad``; returns ``(x, pid)``.

    Each attempt touches ``marker_dir/<x>-<pid>`` so the test can see which worker ran it.
    """

    def run(item):
        x, bad, marker_dir = item
        Path(marker_dir, f"{x}-{os.getpid()}").touch()
        if x in bad:
            raise ValueError(f"bad item {x}")
        return x, os.getpid()

    return run


def make_fail_first_attempt(device):
    """Item ``(x, marker_dir)``: the first attempt at ``x == 3`` raises; later attempts succeed."""

    def run(item):
        x, marker_dir = item
        marker = Path(marker_dir, f"failed-{x}")
        if x == 3 and not marker.exists():
            marker.touch()
            raise RuntimeError("transient failure")
        return x

    return run


# How a worker dies in these tests: killed by SIGKILL where signals exist (POSIX); on Windows, where
# a crashed process ends with an exit code, by os._exit(3). DEATH_TEXT is how dp_map names it.
DEATH = "SIGKILL" if hasattr(signal, "SIGKILL") else "exit"
DEATH_TEXT = {"SIGKILL": "signal SIGKILL", "exit": "exit code 3"}[DEATH]


def die_abruptly(how: str) -> None:
    """End this worker process at once, as a crash would: by the signal named ``how`` (``raise()``
    delivers it to this process, POSIX and Windows alike), or with ``os._exit(3)`` for ``"exit"``."""
    if how == "exit":
        os._exit(3)
    signal.raise_signal(getattr(signal, how))
    time.sleep(10)  # never return a result from here


def make_die_once(device):
    """Item ``(x, victim, how, marker_dir)``: the first worker to run ``victim`` dies (``die_abruptly(how)``)."""

    def run(item):
        x, victim, how, marker_dir = item
        marker = Path(marker_dir, "killed")
        if x == victim and not marker.exists():
            marker.touch()
            die_abruptly(how)
        time.sleep(0.01)
        return x

    return run


def make_always_die(device):
    """Item ``x``: item 0 kills its worker every time (``die_abruptly(DEATH)``); others return ``x``."""

    def run(x):
        if x == 0:
            die_abruptly(DEATH)
        time.sleep(0.01)
        return x

    return run


def make_hang_on(device):
    """Item ``x``: item 1 sleeps for an hour (a hung GPU call); others return ``x``."""

    def run(x):
        if x == 1:
            time.sleep(3600)
        return x

    return run


def make_broken(device):
    """make_worker that raises (a model that cannot be built)."""
    raise OSError(f"cannot load weights on {device}")


def make_slow_on_second_worker(device):
    """Item ``(x, slow_pid_file)``: the worker whose pid is first written to the file is 10x slower."""

    def run(item):
        x, pid_file = item
        path = Path(pid_file)
        try:
            with open(path, "x") as f:  # exactly one worker wins the race to create it
                f.write(str(os.getpid()))
        except FileExistsError:
            pass
        slow = path.read_text().strip() == str(os.getpid())
        time.sleep(0.05 if slow else 0.005)
        return x, os.getpid()

    return run


def make_cuda_tensor_result(device):
    """Item ``n`` -> ``{"ones": ones(n) on the worker's device}`` (comes back on the CPU)."""

    def run(n):
        return {"ones": torch.ones(n, device=device), "device": str(device)}

    return run
