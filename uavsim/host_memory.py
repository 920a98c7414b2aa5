"""Keep freed host memory inside the process (glibc malloc) so that large CPU tensors reuse pages.

A batched step allocates tensors of tens of MB: the local observations of 4,096 environments are
25 MB. By default glibc serves such sizes with `mmap`, or trims them off the top of the heap when
they are freed, so every step's fresh tensor faults its pages in again, one page at a time
(what that costs: docs/performance.md, "Design choices, measured").

Raising both the mmap threshold and the trim threshold keeps freed memory mapped for the next
allocation (raising only one of them made it slower still). The price: the process holds on to
its peak heap until it exits. Entry points call this (the trainer: `run.retain_host_memory`);
importing the library never changes the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

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
