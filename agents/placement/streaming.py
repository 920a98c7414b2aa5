"""Streaming training: one optimizer step per batch (or per ``accumulate`` batches), nothing kept.

The bug this replaces (seed 001) collected every batch's embeddings in a list and trained at the
end, so memory grew with the data set until it ran out. Here each batch is moved to the device,
trained on, and dropped before the next one is fetched; only float losses are kept.

A batch that runs out of memory is split, and its parts' gradients are accumulated, each weighted
by its share of the batch's rows, into the same single optimizer step: a split changes the memory
a step needs, never the step. When the failure hit inside ``backward``, some parameters already
hold this part's complete gradient (autograd accumulates a leaf once, when its gradient is done):
a hook records which, and the smaller parts owe only the others (``backward(inputs=...)``), so no
gradient is counted twice or lost, at no extra memory.

Gradient accumulation and mixed precision are written here with ``torch.autocast`` and
``torch.amp.GradScaler`` (about 25 lines of :class:`_Grads`) rather than through accelerate's
``Accelerator``, after measuring both on this project's 2-core CPU (docs/placement.md, section 7):
the same time per step within noise, and the same parameters. ``Accelerator`` would save about ten
lines but not the size-weighted split (its ``accumulate`` divides every loss by a fixed count, so
the weights and the owed-parameter hook stay), would move the model to a device of its own
choosing, keeps process-wide state (``AcceleratorState``) that the stages of a pipeline would
share, and is an optional dependency (the ``pipelines`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from .checks import check_int, check_visible_gpu, is_real
from .inventory import memory_in_use
from .oom import free_memory, is_oom_error
from .tensors import batch_len, split_batch, to_device

_PRECISIONS = {
    None: None,
    "fp32": None,
    "no": None,
    torch.float32: None,
    "bf16": torch.bfloat16,
    torch.bfloat16: torch.bfloat16,
    "fp16": torch.float16,
    torch.float16: torch.float16,
}


@dataclass
class StreamStats:
    """What a :func:`stream_train` run did.

    ``steps`` counts optimizer steps and ``batches`` the batches trained on (0-row ones are
    skipped); ``losses`` has one float per batch, its mean loss (a split batch's parts weighted by
    their rows); ``memory`` has the bytes in use on the device after each batch (allocated bytes on
    CUDA, process RSS on CPU) when ``track_memory`` was set; ``micro_batch`` is the largest part
    size after out-of-memory back-offs (None when none happened); ``skipped_steps`` counts fp16
    steps the gradient scaler skipped for inf/NaN gradients.
    """

    steps: int = 0
    batches: int = 0
    samples: int = 0
    backoffs: int = 0
    skipped_steps: int = 0
    micro_batch: int | None = None
    losses: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)


def _check_precision(precision: Any) -> torch.dtype | None:
    try:
        return _PRECISIONS[precision]
    except (KeyError, TypeError):
        raise ValueError(
            f"precision must be None/'fp32', 'bf16' or 'fp16' (or the torch dtype), got {precision!r}"
        ) from None


def _loss_value(loss: Any) -> float:
    """The float of a scalar loss that autograd can differentiate, or a TypeError/ValueError."""
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"loss_fn must return a scalar loss tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(f"loss_fn must return a scalar loss, got a tensor of shape {tuple(loss.shape)}")
    if not loss.requires_grad:
        raise ValueError("loss_fn's loss does not require grad (computed under torch.no_grad, or no trainable input?)")
    return float(loss.detach().float().item())


class _Grads:
    """One optimizer step's gradients, accumulated part by part; the scaler, clipping, the step."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device, dtype: torch.dtype | None):
        self.optimizer = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self.scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
        self.done: set[int] | None = None  # ids of parameters whose gradient this backward completed
        self._hooks = [p.register_post_accumulate_grad_hook(self._mark) for p in self.params]

    def _mark(self, param: torch.Tensor) -> None:
        if self.done is not None:
            self.done.add(id(param))

    def backward(self, loss: torch.Tensor, weight: float, owed: Sequence[torch.Tensor] | None) -> None:
        """Add ``weight`` x the gradient of ``loss`` to the parameters (only to ``owed`` when given)."""
        loss = loss * weight
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward(inputs=list(owed) if owed is not None else None)

    def still_owed(self, owed: Sequence[torch.Tensor] | None, done: set[int]) -> tuple[torch.Tensor, ...] | None:
        """What a failed part's smaller parts still owe: the parameters its backward did not finish."""
        if owed is None and not done:
            return None  # nothing was accumulated: a plain backward again
        return tuple(p for p in (self.params if owed is None else owed) if id(p) not in done)

    def step(self, max_grad_norm: float | None, rescale: float = 1.0) -> bool:
        """One optimizer step on the accumulated gradients, then zero them; False if fp16 skipped it."""
        if rescale != 1.0:  # a last group shorter than ``accumulate``: average over what it had
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(rescale)
        took = True
        if self.scaler is not None:
            if max_grad_norm is not None:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            took = self.scaler.get_scale() >= scale  # the scale drops exactly when the step was skipped
        else:
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return took

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


def _check_args(loss_fn, batches, optimizer, scheduler, max_grad_norm) -> float | None:
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if not isinstance(batches, Iterable) and not hasattr(batches, "__getitem__"):  # what iter() accepts
        raise TypeError(f"batches must be an iterable of batches (a list, a DataLoader), got {type(batches).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TypeError(f"scheduler must have a step() method or be None, got {type(scheduler).__name__}")
    if max_grad_norm is None:
        return None
    if not is_real(max_grad_norm) or not max_grad_norm > 0:
        raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}")
    return float(max_grad_norm)


def stream_train(
    loss_fn: Callable[[Any], torch.Tensor],
    batches: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    *,
    device: str | torch.device = "cpu",
    accumulate: int = 1,
    precision: str | torch.dtype | None = None,
    max_grad_norm: float | None = None,
    scheduler: Any = None,
    max_steps: int | None = None,
    split_on_oom: bool = True,
    min_micro_batch: int = 1,
    empty_cache_every: int = 0,
    track_memory: bool = False,
    progress: bool = False,
) -> StreamStats:
    """Train on ``batches`` one at a time on ``device``, keeping nothing but float losses.

    ``loss_fn(batch)`` runs the forward pass on a batch already on ``device`` and returns its
    mean loss over the batch's rows (a scalar tensor); ``stream_train`` does the backward pass and
    the optimizer step, and zeroes the gradients first. Batches are tensors or dicts/lists/tuples
    of tensors sharing the leading dimension (see ``agents.placement.tensors``).

    Args:
        loss_fn: ``batch -> scalar loss tensor`` (mean over the rows).
        batches: any iterable of batches (a DataLoader); read lazily. A batch of 0 rows is skipped:
            it is not in ``losses`` or ``batches`` and does not count towards ``accumulate``.
        optimizer: steps once per ``accumulate`` batches.
        device: where each batch goes.
        accumulate: batches per optimizer step; each counts equally (its loss / ``accumulate``);
            a shorter last group is averaged over the batches it had.
        precision: ``"bf16"`` or ``"fp16"`` runs ``loss_fn`` under ``torch.autocast``; fp16 also
            scales the loss with a ``GradScaler`` (steps with inf/NaN gradients are skipped).
        max_grad_norm: clip the gradients' total norm before each step.
        scheduler: ``scheduler.step()`` after each optimizer step taken (not after one fp16's scaler skipped).
        max_steps: stop after this many optimizer steps.
        split_on_oom: retry a batch that runs out of memory as halves (down to
            ``min_micro_batch`` rows), still one step; later batches are cut to the size that worked.
        empty_cache_every: free the CUDA cache every k batches (rarely needed).
        track_memory: record the memory in use after each batch in ``StreamStats.memory``.
        progress: show a progress bar.

    Returns:
        A :class:`StreamStats`.
    """
    dev = check_visible_gpu(device, "stream_train")
    max_grad_norm = _check_args(loss_fn, batches, optimizer, scheduler, max_grad_norm)
    dtype = _check_precision(precision)
    accumulate = check_int(accumulate, "accumulate", 1)
    max_steps = check_int(max_steps, "max_steps", 0, allow_none=True)
    min_micro_batch = check_int(min_micro_batch, "min_micro_batch", 1)
    empty_cache_every = check_int(empty_cache_every, "empty_cache_every", 0)

    stats = StreamStats()
    grads = _Grads(optimizer, dev, dtype)
    optimizer.zero_grad(set_to_none=True)
    bar = tqdm(total=max_steps, desc="stream_train", unit="step", disable=not progress)
    iterator, in_group = iter(batches), 0
    try:
        while max_steps is None or stats.steps < max_steps:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if batch_len(batch) == 0:  # e.g. a shard filtered to nothing: no loss to take, so no step either
                continue
            batch = to_device(batch, dev, non_blocking=dev.type == "cuda")
            loss = _train_on_batch(loss_fn, batch, grads, stats, dev, dtype, accumulate, split_on_oom, min_micro_batch)
            del batch
            in_group += 1
            stats.batches += 1
            stats.losses.append(loss)
            if in_group == accumulate:
                _step(grads, stats, max_grad_norm, scheduler, 1.0, bar)
                in_group = 0
            if track_memory:
                stats.memory.append(memory_in_use(dev))
            if empty_cache_every and stats.batches % empty_cache_every == 0:
                free_memory()
            bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        if in_group:  # the stream ended inside a group: step on what it had
            _step(grads, stats, max_grad_norm, scheduler, accumulate / in_group, bar)
    finally:
        grads.close()
        bar.close()
    return stats


def _step(grads: _Grads, stats: StreamStats, max_grad_norm, scheduler, rescale: float, bar) -> None:
    if not grads.step(max_grad_norm, rescale):
        stats.skipped_steps += 1  # fp16's scaler skipped it: the schedule waits too, as accelerate's does
    elif scheduler is not None:
        scheduler.step()
    stats.steps += 1
    bar.update(1)


def _train_on_batch(
    loss_fn, batch, grads: _Grads, stats: StreamStats, dev, dtype, accumulate, split, min_rows
) -> float:
    """Accumulate one batch's gradient (split on out-of-memory); return its mean loss."""
    rows_total = batch_len(batch)
    parts = [(batch, None)] if stats.micro_batch is None else [(p, None) for p in split_batch(batch, stats.micro_batch)]
    total = 0.0
    while parts:
        part, owed = parts.pop(0)
        rows = batch_len(part)
        if stats.micro_batch is not None and rows > stats.micro_batch:
            # an earlier part of this batch backed off further: cut this one to match
            parts[:0] = [(p, owed) for p in split_batch(part, stats.micro_batch)]
            continue
        value, failure = None, None
        grads.done = set()
        try:
            with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = loss_fn(part)
            value = _loss_value(loss)
            grads.backward(loss, rows / rows_total / accumulate, owed)
        except Exception as exc:
            if not (split and is_oom_error(exc)):
                raise
            # leave the except block before freeing: its traceback pins the step's tensors
            failure = f"{type(exc).__name__}: {exc}"
        done, grads.done, loss = grads.done, None, None
        if failure is None:
            total += value * rows / rows_total
            continue
        free_memory()
        owed = grads.still_owed(owed, done)
        if owed is not None and not owed:  # the backward had finished every parameter
            total += value * rows / rows_total
            continue
        if rows <= min_rows:
            raise torch.OutOfMemoryError(
                f"step ran out of memory on a part of {rows} row(s), the smallest allowed "
                f"(min_micro_batch={min_rows}): {failure}"
            )
        stats.micro_batch = max(min_rows, math.ceil(rows / 2))
        stats.backoffs += 1
        parts[:0] = [(p, owed) for p in split_batch(part, stats.micro_batch)]
    stats.samples += rows_total
    return total
