"""Host memory: how much this process may use, how much it holds, and keeping freed memory for reuse.

`host_memory` is the machine's total and available memory (psutil: every OS) bounded by the
process's cgroup limit (`uavsim.machine.cgroup`), which psutil does not read: inside a container it
reports the whole host's memory. `process_rss` is what this process holds. Both are read by the
placement library's inventory and the trainer's defaults and logs.

`retain_freed_memory` keeps freed host memory inside the process (glibc malloc) so that large CPU
tensors reuse pages. A batched step allocates tensors of tens of MB: the local observations of
4,096 environments are 25 MB. By default glibc serves such sizes with `mmap`, or trims them off the
top of the heap when they are freed, so every step's fresh tensor faults its pages in again, one
page at a time (what that costs: docs/performance.md, "Design choices, measured"). Raising both the
mmap threshold and the trim threshold keeps freed memory mapped for the next allocation (raising
only one of them made it slower still). The price: the process holds on to its peak heap until it
exits. Entry points call it (the trainer: `run.retain_host_memory`); importing the library never
changes the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import psutil

from uavsim.machine.cgroup import cgroup_memory

_M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
_M_MMAP_THRESHOLD = -3
_MAX_INT = 2**31 - 1  # mallopt takes a C int


def _glibc_function(name: str):
    """``name`` from the C library on Linux with glibc (``mallopt``, ``malloc_trim``), else None
    (another OS, or musl and others, which lack them)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def retain_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to their maximum. Returns whether both were applied
    (False off Linux, or with another C library, where nothing is changed)."""
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MAX_INT)) and bool(mallopt(_M_TRIM_THRESHOLD, _MAX_INT))


def release_free_memory() -> bool:
    """Return the heap's free memory to the system now (glibc ``malloc_trim(0)``), e.g. before a
    peak-memory window, so that memory another workload freed is not counted in the next one's
    peak. Returns whether it ran (False off Linux or without glibc)."""
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def host_memory() -> tuple[int, int]:
    """``(total, available)`` host memory in bytes (available = what new allocations can get),
    within this process's cgroup memory limit when it has one (a container's, a Slurm job's)."""
    total, available = _system_memory()
    limited = cgroup_memory()
    if limited is not None:
        total, available = min(total, limited[0]), min(available, limited[1])
    return total, available


def _system_memory() -> tuple[int, int]:
    """``(total, available)`` bytes of the machine from psutil: on Linux ``MemTotal`` and
    ``MemAvailable`` of ``/proc/meminfo``, on Windows and macOS their system calls. psutil does not
    know cgroup limits: ``host_memory`` adds them."""
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def process_rss() -> int:
    """Resident set size of this process in bytes (what it currently holds in host RAM), from
    psutil on every OS (about 50 us a call against 19 us for reading ``/proc/self/statm`` by hand,
    on a 2-core AMD EPYC: nothing next to a batch or an iteration, which is where it is read)."""
    return int(psutil.Process().memory_info().rss)
