"""A capped CPU class's own inductor cache (`use_class_cache`), so that emulating a class cannot crash a run.

Inductor picks the vector ISA of the kernels it compiles from `ATEN_CPU_CAPABILITY`, but its caches
key on neither that nor `ONEDNN_MAX_CPU_ISA`. Kernels compiled under `ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2` (the AVX2 class emulated on a newer CPU: docs/performance.md) and then
loaded by an uncapped run of the same code corrupted that run's heap (`malloc_consolidate(): invalid
chunk size`, then SIGABRT: `tests/agents/test_compile.py` and a `train.compile_rollout` run on the
2-core Zen 4 EPYC, torch 2.13.0). So a process under a cap compiles into a directory of its own,
named after the caps, unless `TORCHINDUCTOR_CACHE_DIR` says where.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

CAP_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")  # what caps torch's CPU kernels
CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def class_cache_dir(environ: MutableMapping[str, str]) -> Path | None:
    """The cache directory of the caps set in `environ`: inductor's default one with the caps after its
    name (`/tmp/torchinductor_USER_aten-avx2_onednn-avx2`), or None where no cap is set (the default
    cache, the uncapped class's)."""
    caps = []
    for name in CAP_VARIABLES:
        value = re.sub(r"[^a-z0-9]+", "-", environ.get(name, "").strip().lower()).strip("-")
        if value:
            caps.append(f"{name.split('_')[0].lower()}-{value}")
    if not caps:
        return None
    default = inductor_default() or Path(tempfile.gettempdir()) / "torchinductor"
    return default.with_name(f"{default.name}_{'_'.join(caps)}")


def use_class_cache(environ: MutableMapping[str, str] | None = None) -> Path | None:
    """Point inductor at the capped class's own cache (`class_cache_dir`) unless `TORCHINDUCTOR_CACHE_DIR`
    names another directory than inductor's default: inductor writes its default there itself when it
    first opens its cache (`torch._dynamo.reset()` does), so the default counts as unset. Call it before
    the process's first compile. Returns the directory chosen, or None where nothing changed."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(CACHE_VARIABLE)
    if chosen and Path(chosen) != inductor_default():
        return None
    path = class_cache_dir(environ)
    if path is not None:
        environ[CACHE_VARIABLE] = str(path)
    return path


def inductor_default() -> Path | None:
    """Inductor's own default cache directory (None where this torch does not say)."""
    try:  # a private module: torch has no public name for it (torch 2.13)
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return Path(default_cache_dir()).absolute()
