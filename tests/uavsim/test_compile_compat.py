"""`uavsim.compile_compat`: inductor's fix for byte views of another width, backported to torch < 2.13.

The failure itself needs torch 2.11/2.12 (seen there on an H100 and on the CPU); here the patch is
forced onto torch 2.13's inductor and must leave a compiled write of the env's record exact."""

import pytest
import torch

from tests.uavsim.inductor_helpers import needs_compiler
from uavsim.compile_compat import (
    ensure_byte_views_compile,
    ensure_small_int_scatter_fallback,
    needs_byte_view_fix,
    prepare_inductor,
)
from uavsim.record import Field, Record


@pytest.mark.parametrize(
    "version, needed",
    [("2.11.0+cu130", True), ("2.12.1", True), ("2.5.0", True), ("2.13.0+cpu", False), ("2.14.0", False)],
)
def test_the_fix_is_for_torch_before_2_13(version, needed):
    assert needs_byte_view_fix(version) is needed


def test_from_torch_2_13_nothing_is_patched(monkeypatch):
    from torch._inductor import lowering

    if needs_byte_view_fix():
        pytest.skip("this torch needs the fix")
    monkeypatch.setattr(lowering, "to_dtype_bitcast", lowering.to_dtype_bitcast)  # restored after the test
    original = lowering.to_dtype_bitcast
    assert ensure_byte_views_compile() is False
    assert lowering.to_dtype_bitcast is original


@needs_compiler
def test_the_patched_lowering_compiles_field_writes_exactly(monkeypatch):
    """The env's pattern: a compiled step writes an int64 vector field and an int32 scalar field
    through typed views of a byte record (the writes torch 2.11's inductor could not lower)."""
    from torch._inductor import lowering

    monkeypatch.setattr(lowering, "to_dtype_bitcast", lowering.to_dtype_bitcast)  # restored after the test
    assert ensure_byte_views_compile(force=True) is True
    patched = lowering.to_dtype_bitcast
    assert ensure_byte_views_compile(force=True) is True and lowering.to_dtype_bitcast is patched, "applied twice"

    record = Record([Field("t", torch.int32, ()), Field("cell", torch.int64, (10,))])
    move = torch.tensor([0, 1, -1, 32, -32])

    def step(buf, actions):  # the env's step clones its state when compiled; the bug does not care
        v = record.views(buf)
        target = v["cell"] + move[actions]
        v["cell"].copy_(torch.where(target > 40, v["cell"], target))
        v["t"].add_(1)
        return v["cell"].sum() + v["t"].sum()

    gen = torch.Generator().manual_seed(0)
    buf = torch.randint(0, 3, (6, record.nbytes), dtype=torch.uint8, generator=gen)
    actions = torch.randint(0, 5, (6, 10), generator=gen)
    want_buf, got_buf = buf.clone(), buf.clone()
    want = step(want_buf, actions)
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):  # a cached graph would skip the lowering
        got = torch.compile(step, fullgraph=True, backend="inductor")(got_buf, actions)
    assert torch.equal(got, want) and torch.equal(got_buf, want_buf)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_small_int_scatter_adds_on_a_gpu_go_to_aten(monkeypatch, dtype):
    """Triton's atomic_add has no 8- or 16-bit form (the env's uint8 grid update failed to compile
    on an H100): inductor must take aten's scatter_add for them, as it does for int64 and bool,
    and keep its own kernels for the rest and for the CPU."""
    from torch._inductor import lowering, utils

    for module in (utils, lowering):  # restored after the test
        monkeypatch.setattr(
            module, "needs_fallback_due_to_atomic_add_limitations", module.needs_fallback_due_to_atomic_add_limitations
        )
    scatter_add = torch.ops.aten.scatter_add_.default

    def falls_back(dtype, device_type):
        return utils.use_scatter_fallback(scatter_add, None, dtype, dtype, device_type, True)

    assert not falls_back(dtype, "cuda"), "this inductor already falls back: the patch may be dropped"
    assert ensure_small_int_scatter_fallback() is True
    assert falls_back(dtype, "cuda") and lowering.needs_fallback_due_to_atomic_add_limitations(dtype)
    assert (
        not falls_back(dtype, "cpu") and not falls_back(torch.int32, "cuda") and not falls_back(torch.float32, "cuda")
    )
    assert falls_back(torch.int64, "cuda") and falls_back(torch.bool, "cuda")
    patched = utils.needs_fallback_due_to_atomic_add_limitations
    prepare_inductor()
    assert utils.needs_fallback_due_to_atomic_add_limitations is patched, "applied twice"


def test_preparing_a_compile_of_the_step_under_a_cap_uses_the_class_cache(monkeypatch):
    # the env's compiled step (train.compile_rollout, the benchmarks) under the AVX2 class's caps:
    # another class's cached kernels crashed a run (uavsim.machine.inductor_cache)
    import os

    from uavsim.machine.inductor_cache import CACHE_VARIABLE, class_cache_dir

    caps = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    for name, value in caps.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(CACHE_VARIABLE, "unset below")  # restored (here: removed) after the test
    monkeypatch.delenv(CACHE_VARIABLE)
    prepare_inductor()
    assert os.environ[CACHE_VARIABLE] == str(class_cache_dir(caps))
