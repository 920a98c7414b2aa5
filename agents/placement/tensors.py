"""Moving and splitting nested batches (tensors inside dicts, lists and tuples).

A *batch* is a tensor, or a dict / list / tuple (named tuples included) / dataclass (a diffusers
pipeline's output, which is both) whose leaves are tensors or plain Python values; each comes back
as its own type; the tensors of one batch share their leading (batch) dimension. A list is
read as fields, each holding the whole batch: a list of per-sample tensors must be stacked first
(a list of same-shape images would otherwise be split along its channels, which nothing here can
tell apart from a list of fields such as ``[input_ids, attention_mask]``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

from .checks import check_int, check_visible_gpu


def _rebuild(obj: Any, values: list) -> Any:
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # named tuple: positional constructor
        return type(obj)(*values)
    return type(obj)(values)


def _map_tensors(obj: Any, fn) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return _rebuild_mapping(obj, {k: _map_tensors(v, fn) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return _rebuild(obj, [_map_tensors(v, fn) for v in obj])
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # a plain dataclass instance: its fields
        fields = [f.name for f in dataclasses.fields(obj) if f.init]
        return dataclasses.replace(obj, **{name: _map_tensors(getattr(obj, name), fn) for name in fields})
    return obj


def _rebuild_mapping(obj: Mapping, mapped: dict) -> Any:
    """``obj``'s type again, holding ``mapped``: a dict subclass from the dict (transformers'
    ``ModelOutput``); a dataclass that is also a mapping (diffusers' ``BaseOutput``: its constructor
    takes the fields) through ``dataclasses.replace``; other mutable mappings (``defaultdict``) as a
    copy with the items set. A plain dict only for a read-only mapping type that takes none of these."""
    try:
        return type(obj)(mapped)
    except TypeError:
        pass
    if dataclasses.is_dataclass(obj):
        names = {f.name for f in dataclasses.fields(obj) if f.init}
        if set(mapped) <= names:
            return dataclasses.replace(obj, **mapped)
    if isinstance(obj, MutableMapping):
        out = copy.copy(obj)  # keeps the type and its state (a defaultdict's factory)
        for k, v in mapped.items():
            out[k] = v
        return out
    return mapped


def to_device(obj: Any, device: str | torch.device, *, non_blocking: bool = False) -> Any:
    """Copy every tensor in ``obj`` (nested in dicts/lists/tuples) to ``device``; other leaves unchanged.

    Tensors already on ``device`` are returned as they are (``Tensor.to`` does not copy them).

    Raises:
        TypeError, ValueError: ``device`` is not a CPU or CUDA device, or a GPU this process cannot see.
    """
    dev = check_visible_gpu(device, "to_device")  # not torch's AssertionError on a CPU-only build
    return _map_tensors(obj, lambda t: t.to(dev, non_blocking=non_blocking))


def _compact_cpu(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.layout != torch.strided:  # sparse: no single storage to measure; it pickles its own indices and values
        return t
    if t.untyped_storage().nbytes() > t.numel() * t.element_size():
        # pickling a view sends its whole storage (a row of a big batch would carry the batch)
        t = t.clone()
    return t


def to_cpu(obj: Any) -> Any:
    """Every tensor in ``obj`` as a detached CPU tensor that owns just its own elements.

    Detached, so no autograd graph travels with it; views into a larger storage are copied, since
    pickling a view sends the whole storage. This is the form in which ``dp_map`` ships items
    and results between processes.
    """
    return _map_tensors(obj, _compact_cpu)


def batch_len(batch: Any) -> int:
    """Leading-dimension size of a batch: of the tensor, or of the first tensor found inside it.

    Raises TypeError when the batch holds no tensor, and ValueError when its tensors disagree on
    the leading dimension.
    """
    sizes: list[int] = []
    _map_tensors(batch, lambda t: sizes.append(t.shape[0] if t.dim() > 0 else -1) or t)
    if not sizes:
        raise TypeError(f"cannot find a batch dimension in a {type(batch).__name__} without tensors")
    if -1 in sizes:
        raise ValueError("a batch tensor is 0-dimensional; expected a leading batch dimension")
    if len(set(sizes)) != 1:
        raise ValueError(f"batch tensors disagree on the leading dimension: sizes {sorted(set(sizes))}")
    return sizes[0]


def split_batch(batch: Any, chunk: int) -> list[Any]:
    """Split a batch along dim 0 into consecutive pieces of at most ``chunk`` rows (same structure).

    Non-tensor leaves are repeated in every piece; a list or tuple of as many plain values as the
    batch has rows (per-sample data) is a `ValueError`, since repeating it would misalign it.
    """
    chunk = check_int(chunk, "chunk", 1)
    n = batch_len(batch)
    if n > 1:
        _refuse_sample_lists(batch, n)
    return [_map_tensors(batch, lambda t, s=s: t[s : s + chunk]) for s in range(0, n, chunk)]


def _refuse_sample_lists(obj: Any, n: int, path: str = "batch") -> None:
    """A list of ``n`` plain values beside ``n``-row tensors is per-sample data (captions, ids):
    repeating it in every piece would pair rows with the wrong samples, silently."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _refuse_sample_lists(v, n, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        if len(obj) == n and not any(isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in obj):
            raise ValueError(
                f"{path} is a {type(obj).__name__} of {n} values, as many as the batch's rows: "
                "per-sample data cannot be split with the tensors; pass it as a tensor, or keep it "
                "out of the batch"
            )
        for i, v in enumerate(obj):
            _refuse_sample_lists(v, n, f"{path}[{i}]")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _refuse_sample_lists(getattr(obj, f.name), n, f"{path}.{f.name}")
