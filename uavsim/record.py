"""`Record`: every environment's state as one row of bytes, with a typed view per field.

The batched env keeps its state in a ``[B, nbytes]`` uint8 tensor: row ``b`` holds environment
``b``'s fields (the grid, UAV cells, counters, ...) at fixed offsets, each in its own narrow dtype.
A field is a view of that tensor, so the steps update fields in place, and replacing whole
environments by their next episode's start is a single ``torch.where`` over the rows (one kernel
for the whole state, whatever the number of fields), as a struct copy would be in C.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROW_ALIGN = 8  # bytes: every field of every row is aligned for its dtype (none is wider than 8)


@dataclass(frozen=True)
class Field:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # per environment
    parts: tuple[str, ...] = ()  # names of a ``(len(parts),)`` field's elements: each a view too

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize


@dataclass(frozen=True)
class Joined:
    """One typed view of the consecutive fields ``first..last`` (one dtype, no padding between), of
    ``shape`` per environment: one index op then reads elements of all of them. A view of the record's
    bytes, as each field's is: `Tensor.as_strided` from one field's view past its end reads other bytes
    once compiled (inductor, torch 2.13, lowers the field's dtype view as a copy of that field alone)."""

    name: str
    first: str
    last: str
    shape: tuple[int, ...]


class Record:
    """The byte layout of ``fields``, in order, each at an offset aligned to its item size.

    ``views(buf)`` gives ``{name: [M, *shape] dtype}`` views of a ``[M, nbytes]`` uint8 buffer (and
    ``{part: [M]}`` of each element of a field with ``parts``: values that one op updates together;
    and a view of each of ``joined``, `Joined`); ``span(first, last)`` the byte range from one field to
    another (to copy several at once).
    """

    def __init__(self, fields: list[Field], joined: tuple[Joined, ...] = ()):
        self.fields = {f.name: f for f in fields}
        self.offsets: dict[str, int] = {}
        offset = 0
        for f in fields:
            size = f.dtype.itemsize
            offset = -(-offset // size) * size
            self.offsets[f.name] = offset
            offset += f.nbytes
        self.nbytes = -(-offset // ROW_ALIGN) * ROW_ALIGN
        self.joined = {j.name: self._joined_field(j) for j in joined}

    def _joined_field(self, j: Joined) -> tuple[Field, tuple[str, ...]]:
        names = list(self.fields)
        if j.first not in self.fields or j.last not in self.fields or names.index(j.first) > names.index(j.last):
            raise ValueError(f"joined view {j.name!r}: {j.first!r}..{j.last!r} are not fields of the record in order")
        parts = tuple(names[names.index(j.first) : names.index(j.last) + 1])
        dtypes = {self.fields[p].dtype for p in parts}
        span = self.offsets[j.last] + self.fields[j.last].nbytes - self.offsets[j.first]
        view = Field(j.name, self.fields[j.first].dtype, j.shape)
        if len(dtypes) > 1 or span != sum(self.fields[p].nbytes for p in parts) or view.nbytes != span:
            raise ValueError(
                f"joined view {j.name!r}: fields {parts} must share one dtype with no padding between, and "
                f"shape {j.shape} must cover their {span} bytes"
            )
        return view, parts

    def empty(self, rows: int, device: torch.device) -> torch.Tensor:
        return torch.empty(rows, self.nbytes, dtype=torch.uint8, device=device)

    def views(self, buf: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._views(buf, self.fields, 0)

    @staticmethod
    def _field(raw: torch.Tensor, f: Field) -> torch.Tensor:
        # Each element's bytes as a last dimension first, then the dtype: the reinterpretation is
        # then one that torch.compile can also undo when it replays writes into the view's base.
        return raw.view(raw.shape[0], *f.shape, f.dtype.itemsize).view(f.dtype).squeeze(-1)

    def _views(self, buf: torch.Tensor, fields, base: int) -> dict[str, torch.Tensor]:
        out = {}
        for name in fields:
            f, start = self.fields[name], self.offsets[name] - base
            out[name] = self._field(buf[:, start : start + f.nbytes], f)
            for i, part in enumerate(f.parts):
                out[part] = out[name][:, i]
        for view, parts in self.joined.values():
            if all(p in out for p in parts):
                start = self.offsets[parts[0]] - base
                out[view.name] = self._field(buf[:, start : start + view.nbytes], view)
        return out

    def span(self, buf: torch.Tensor, first: str, last: str) -> torch.Tensor:
        """``buf[:, bytes of fields first..last]`` (their order in the record, padding between)."""
        return buf[:, self.offsets[first] : self.offsets[last] + self.fields[last].nbytes]

    def span_views(self, span: torch.Tensor, first: str, last: str) -> dict[str, torch.Tensor]:
        """Typed views of the fields ``first..last`` in a ``span`` of bytes (a copy of one)."""
        names = list(self.fields)
        return self._views(span, names[names.index(first) : names.index(last) + 1], self.offsets[first])


def as_words(x: torch.Tensor) -> torch.Tensor:
    """``[B, bytes / w]`` view of a contiguous ``[B, ...]`` tensor as its widest integer words
    ``w`` (<= 8 bytes) that divide a row: a row-masked ``torch.where`` on them copies bits exactly,
    and runs faster than on bytes or floats (docs/performance.md, "Design choices, measured")."""
    row = x.reshape(x.shape[0], -1)
    nbytes = row.shape[1] * row.element_size()
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        if nbytes % dtype.itemsize == 0 and dtype.itemsize >= row.element_size():
            return row.view(dtype)
    return row


def swap_rows(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``[B, ...]`` rows of ``new`` where ``mask [B]``, else of ``old`` (a new tensor, bits exact)."""
    return torch.where(mask[:, None], as_words(new), as_words(old)).view(old.dtype).view(old.shape)
