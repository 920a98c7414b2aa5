"""Out-of-memory detection, cache freeing, and the batch-size back-off decorator.

:func:`oom_backoff` does what accelerate's ``find_executable_batch_size`` does. It is kept rather
than replaced by accelerate's (1.15), which does not fit a decorator called once per batch:

- that one runs ``gc.collect()`` on every call, OOM or not: 69 ms a call against 0.2 ms for this
  one around the same 0.2 ms matmul, in a process that imported torch and accelerate (172k objects
  for the collector; 2-core AMD EPYC, 3 rounds of 200 calls each, side by side);
- it has no lower bound: it shrinks by 0.9x down to 0, then raises ``RuntimeError("No executable
  batch size found, reached zero.")`` without the out-of-memory error it hit; this one stops at
  ``min_size`` and raises ``torch.OutOfMemoryError`` with the original message;
- accelerate is an optional dependency (the ``pipelines`` extra), not needed to train.

accelerate's OOM classifier (``should_reduce_batch_size``) is consulted when it is importable, so
both recognise the same errors.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable

import torch

from .checks import check_int, is_real

# Messages of out-of-memory RuntimeErrors that are not torch.OutOfMemoryError instances (older
# torch builds, the CPU allocator, cuDNN/cuBLAS failing to get a workspace, other backends).
_OOM_MESSAGES = (
    "out of memory",
    "DefaultCPUAllocator: can't allocate memory",  # torch's CPU allocator on Linux and macOS (posix_memalign)
    "DefaultCPUAllocator: not enough memory",  # the same on Windows (_aligned_malloc) and with mimalloc
    "CUDNN_STATUS_NOT_SUPPORTED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "MPS backend out of memory",
)


def is_oom_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error from torch on any device (CUDA, CPU, MPS)."""
    if isinstance(exc, torch.OutOfMemoryError):  # torch.cuda.OutOfMemoryError is the same class
        return True
    if not isinstance(exc, RuntimeError):
        return False
    if reads_as_oom(str(exc)):
        return True
    try:
        from accelerate.utils.memory import should_reduce_batch_size
    except ImportError:
        return False
    return bool(should_reduce_batch_size(exc))


def reads_as_oom(message: str) -> bool:
    """Whether an error's message (``str(exc)``, or a worker's traceback's last line) is an out-of-memory one."""
    return "OutOfMemoryError" in message or any(m in message for m in _OOM_MESSAGES)


def free_memory() -> None:
    """Collect garbage and return cached CUDA blocks to the driver (call it outside ``except``).

    Inside an ``except`` block the exception's traceback still references the failed frames and
    their activations, so nothing of them can be freed yet.
    """
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def oom_backoff(
    function: Callable | None = None,
    *,
    start: int = 128,
    factor: float = 0.5,
    min_size: int = 1,
    on_backoff: Callable[[int, int, str], None] | None = None,
):
    """Decorate ``function(batch_size, *args, **kwargs)`` to retry with a smaller batch on OOM.

    The wrapped function is called as ``wrapped(*args, **kwargs)``; the decorator passes the batch
    size. On an out-of-memory error (:func:`is_oom_error`) it frees memory and retries with
    ``int(batch_size * factor)`` (at least one less), down to ``min_size`` (tried last); an OOM at
    ``min_size`` is raised.
    Other exceptions propagate at once. The size that worked is kept for the next call
    (``wrapped.batch_size``), so later calls do not fail their way down again. ``on_backoff(old,
    new, message)`` is called before each retry (for logging).

    Usable bare (``@oom_backoff``) or configured (``@oom_backoff(start=64)``).
    """
    if function is None:
        return functools.partial(oom_backoff, start=start, factor=factor, min_size=min_size, on_backoff=on_backoff)
    if not callable(function):
        raise TypeError(f"oom_backoff decorates a callable, got {type(function).__name__}")
    # checked here, not at the first back-off: a bad hook would otherwise surface only once the
    # GPU is full, as an error about the hook instead of the out-of-memory one
    if on_backoff is not None and not callable(on_backoff):
        raise TypeError(f"on_backoff must be a callable (old, new, message) or None, got {type(on_backoff).__name__}")
    start = check_int(start, "start", 1)
    min_size = check_int(min_size, "min_size", 1)
    if min_size > start:
        raise ValueError(f"min_size ({min_size}) must be <= start ({start})")
    if not is_real(factor) or not 0.0 < factor < 1.0:
        raise ValueError(f"factor must be a float in (0, 1), got {factor!r}")
    factor = float(factor)
    params = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not params:
        raise TypeError(f"{function.__name__} must take the batch size as its first positional argument")

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        while True:
            size = wrapped.batch_size
            try:
                return function(size, *args, **kwargs)
            except Exception as exc:
                if not is_oom_error(exc):
                    raise
                # keep only the message: the exception's traceback pins the failed frames' tensors,
                # which free_memory can release only after this block has ended
                failure = f"{type(exc).__name__}: {exc}"
            free_memory()
            if size <= min_size:
                raise torch.OutOfMemoryError(
                    f"{function.__name__} ran out of memory at batch size {size}, min_size={min_size}: {failure}"
                )
            smaller = max(min_size, min(size - 1, int(size * factor)))  # min_size is tried before giving up
            if on_backoff is not None:
                on_backoff(size, smaller, failure)
            wrapped.batch_size = smaller

    wrapped.batch_size = start
    return wrapped
