"""Streaming training: one optimisation step per batch, nothing kept across batches, OOM back-off.

The bug this replaces (seed 001) collected every batch's embeddings in a list and trained at the
end, so memory grew with the data set until it ran out. Here each batch is moved to the device,
trained on, and dropped before the next one is fetched; only float losses are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from .checks import check_int, is_real
from .devices import as_device
from .meminfo import memory_in_use
from .oom import free_memory, is_oom_error
from .tensors import batch_len, split_batch, to_device


@dataclass
class StreamStats:
    """What a :func:`stream_train` run did.

    ``losses`` has one float per step; ``memory`` has the bytes in use on the device after each
    step (allocated bytes on CUDA, process RSS on CPU) when ``track_memory`` was set; ``micro_batch``
    is the largest piece size after out-of-memory back-offs (None when no back-off happened).
    """

    steps: int = 0
    samples: int = 0
    backoffs: int = 0
    micro_batch: int | None = None
    losses: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)


def _as_float(loss: Any) -> float | None:
    if loss is None:
        return None
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise ValueError(f"step must return a scalar loss, got a tensor of shape {tuple(loss.shape)}")
        return float(loss.detach().item())
    if is_real(loss):  # a NumPy loss (np.float32) too
        return float(loss)
    raise TypeError(f"step must return a scalar loss (tensor, float or None), got {type(loss).__name__}")


def stream_train(
    step: Callable[[Any], Any],
    batches: Iterable[Any],
    *,
    device: str | torch.device = "cpu",
    max_steps: int | None = None,
    split_on_oom: bool = True,
    min_micro_batch: int = 1,
    empty_cache_every: int = 0,
    track_memory: bool = False,
    progress: bool = False,
) -> StreamStats:
    """Call ``step(batch)`` once per batch of ``batches`` on ``device``; keep nothing but the losses.

    ``step`` does one optimisation step (zero grads, forward, backward, optimizer step) on a batch
    already on ``device`` and returns its scalar loss (tensor, Python or NumPy number) or None;
    the loss is turned into a float at once so no autograd graph survives the step. Batches are
    tensors or dicts/lists/tuples of tensors sharing the leading dimension (see
    ``agents.placement.tensors``).

    With ``split_on_oom``, a batch whose step runs out of memory is retried as two halves (and so
    on down to ``min_micro_batch`` rows); later batches are cut to the size that worked, so the
    stream goes on instead of restarting. Each piece is its own optimisation step, so ``step``
    should zero its gradients first. ``empty_cache_every=k`` frees the CUDA cache every k steps
    (rarely needed: the cache is reused, not leaked). ``max_steps`` stops early.
    """
    dev = as_device(device)
    max_steps = check_int(max_steps, "max_steps", 0, allow_none=True)
    min_micro_batch = check_int(min_micro_batch, "min_micro_batch", 1)
    empty_cache_every = check_int(empty_cache_every, "empty_cache_every", 0)
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")

    stats = StreamStats()
    bar = tqdm(total=max_steps, desc="stream_train", unit="step", disable=not progress)
    iterator = iter(batches)
    try:
        while max_steps is None or stats.steps < max_steps:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            batch = to_device(batch, dev, non_blocking=dev.type == "cuda")
            pieces = [batch] if stats.micro_batch is None else split_batch(batch, stats.micro_batch)
            del batch  # the pieces are views; drop the name so nothing outlives this batch
            while pieces and (max_steps is None or stats.steps < max_steps):
                piece = pieces.pop(0)
                if stats.micro_batch is not None and batch_len(piece) > stats.micro_batch:
                    # an earlier half of this batch backed off further: cut the rest to match
                    pieces[:0] = split_batch(piece, stats.micro_batch)
                    continue
                failure = None
                try:
                    loss = _as_float(step(piece))
                except Exception as exc:
                    if not (split_on_oom and is_oom_error(exc)):
                        raise
                    # leave the except block before freeing: its traceback pins the step's tensors
                    failure = f"{type(exc).__name__}: {exc}"
                if failure is not None:
                    free_memory()
                    rows = batch_len(piece)
                    if rows <= min_micro_batch:
                        raise torch.OutOfMemoryError(
                            f"step ran out of memory on a piece of {rows} row(s), the smallest allowed "
                            f"(min_micro_batch={min_micro_batch}): {failure}"
                        )
                    stats.micro_batch = max(min_micro_batch, math.ceil(rows / 2))
                    stats.backoffs += 1
                    pieces[:0] = split_batch(piece, stats.micro_batch)
                    del piece
                    continue
                stats.samples += batch_len(piece)
                del piece
                stats.steps += 1
                if loss is not None:
                    stats.losses.append(loss)
                if track_memory:
                    stats.memory.append(memory_in_use(dev))
                if empty_cache_every and stats.steps % empty_cache_every == 0:
                    free_memory()
                bar.update(1)
                if loss is not None:
                    bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
            del pieces
    finally:
        bar.close()
    return stats
