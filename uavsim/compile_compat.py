"""`torch.compile` of the env's step: two inductor fixes, for what the step does that inductor lowers wrong.

`prepare_inductor()` applies both; call it before compiling anything that steps the env. `into`, the
step's ``out=`` into views, turns into a copy when compiled.

Byte views (torch < 2.13).
The env's state is one byte record per environment with typed views of its fields
(`uavsim.record`). A compiled step writes those fields, and functionalization replays each write
into the record through a view of the field's bytes (`aten.view.dtype`, int64 to uint8 say).
Before torch 2.13, inductor lowered that view on the IR's strides as they were, where a size-1
dimension may carry any stride, and aten refused it: "self.stride(-1) must be 1 to view Long as
Byte (different element sizes), but got 0" (an H100 with torch 2.11.0+cu130, and the CPU with
torch 2.11.0). torch 2.13's `torch._inductor.lowering.to_dtype_bitcast` asks for contiguous strides
first; `ensure_byte_views_compile` makes an older inductor do the same. Patching a private
function is the narrow fix here: the alternative, rewriting every field write of the step as
arithmetic on bytes, would slow the eager step that most users run.

Scatter-adds of 8- and 16-bit integers on a GPU (every torch so far): `ensure_small_int_scatter_fallback`.
"""

from __future__ import annotations

import torch

from uavsim.machine.inductor_cache import use_class_cache

SMALL_INTS = (torch.uint8, torch.int8, torch.int16)  # no triton atomic_add for these widths
FIXED_IN = (2, 13)  # the first torch whose inductor asks for contiguous strides itself


def into(out: torch.Tensor, op, *args) -> torch.Tensor:
    """``op(*args, out=out)`` into a view ``out`` of a larger tensor: no temporary in eager mode.
    Under torch.compile, which takes no non-contiguous ``out=``, ``out.copy_(op(*args))``: the
    same values (``out=`` also computes in the op's dtype and casts), and the compiler fuses it."""
    if torch.compiler.is_compiling():
        return out.copy_(op(*args))
    return op(*args, out=out)


def needs_byte_view_fix(version: str = torch.__version__) -> bool:
    """Whether this torch's inductor lowers a byte view of another width without the fix."""
    return torch.torch_version.TorchVersion(version) < FIXED_IN


def ensure_byte_views_compile(force: bool = False) -> bool:
    """Make inductor lower `aten.view.dtype` between widths on contiguous strides, as torch 2.13
    does. Call before compiling a step of the env; a no-op from torch 2.13 on (unless `force`),
    and when already applied. Returns whether inductor's lowering is the patched one."""
    if not (force or needs_byte_view_fix()):
        return False
    from torch._inductor import ir, lowering

    if getattr(lowering.to_dtype_bitcast, "contiguous_first", False):
        return True
    original = lowering.to_dtype_bitcast

    def to_dtype_bitcast(x, dtype: torch.dtype, *, copy: bool = False):
        if x.get_dtype().itemsize != dtype.itemsize:
            x = ir.ExternKernel.require_contiguous_strides(x)
        return original(x, dtype, copy=copy)

    to_dtype_bitcast.contiguous_first = True  # type: ignore[attr-defined]
    lowering.to_dtype_bitcast = to_dtype_bitcast
    return True


def ensure_small_int_scatter_fallback() -> bool:
    """Make inductor send a scatter-add of 8- or 16-bit integers on a GPU to aten's kernel.

    Inductor (2.11 and 2.13 alike) lowers `scatter_add_` on a GPU to triton's `atomic_add`, which
    has no 8- or 16-bit form: the env's uint8 grid update failed to compile on an H100 ("atomic_add
    does not support uint8"). It already falls back for int64 and bool; this adds the small ints.
    Returns whether inductor's check is the patched one."""
    from torch._inductor import lowering, utils

    if getattr(utils.needs_fallback_due_to_atomic_add_limitations, "small_ints", False):
        return True
    original = utils.needs_fallback_due_to_atomic_add_limitations

    def needs_fallback(dtype: torch.dtype) -> bool:
        return dtype in SMALL_INTS or original(dtype)

    needs_fallback.small_ints = True  # type: ignore[attr-defined]
    utils.needs_fallback_due_to_atomic_add_limitations = needs_fallback  # what use_scatter_fallback calls
    lowering.needs_fallback_due_to_atomic_add_limitations = needs_fallback  # index_put's own import
    return True


def prepare_inductor() -> None:
    """Both fixes, before compiling a step of the env (`train.compile_rollout`, benchmarks), and a
    capped CPU class's own kernel cache (`uavsim.machine.inductor_cache`)."""
    use_class_cache()
    ensure_byte_views_compile()
    ensure_small_int_scatter_fallback()
