"""What the uavsim tests that compile with inductor share: the skip where no C++ compiler is found, and
`prepare_inductor`'s patches undone after a test (`test_compile_compat` checks an inductor never patched)."""

from __future__ import annotations

import shutil

import pytest

needs_compiler = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")), reason="torch.compile on the CPU needs a C++ compiler"
)


def restore_inductor_after(monkeypatch) -> None:
    """Have ``monkeypatch`` put back, after the test, what `uavsim.compile_compat.prepare_inductor` patches
    (inductor's lowerings) and sets (the kernel cache variable)."""
    from torch._inductor import lowering, utils

    from uavsim.machine.inductor_cache import CACHE_VARIABLE

    monkeypatch.setattr(lowering, "to_dtype_bitcast", lowering.to_dtype_bitcast)
    for module in (utils, lowering):
        name = "needs_fallback_due_to_atomic_add_limitations"
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setenv(CACHE_VARIABLE, "restored after the test")
    monkeypatch.delenv(CACHE_VARIABLE)
