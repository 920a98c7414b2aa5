"""`retain_freed_memory`: a large tensor freed and allocated again reuses its pages instead of
faulting them in anew (counted as minor page faults, in a fresh process each time)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from uavsim.machine.host_memory import retain_freed_memory
applied = retain_freed_memory() if sys.argv[1] == "retain" else None
for _ in range(40):  # warm-up: the heap grows over the first rounds (up to 12 seen), then settles
    torch.empty(8 << 20).fill_(1.0)  # 32 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    torch.empty(8 << 20).fill_(1.0)  # what a batched step does: a fresh big tensor, written, freed
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True)
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_retained_memory_is_reused_without_page_faults():
    _, default_faults = _faults("default")
    applied, retained_faults = _faults("retain")
    assert applied == "True"
    assert default_faults > 20 * 4000, "the probe should fault 8k pages per 32 MiB allocation by default"
    assert retained_faults < default_faults / 20
