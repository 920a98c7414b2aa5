"""Whether other processes keep this process's cores busy at start, where torch's OpenMP threads lose.

torch's OpenMP threads spin a while at every barrier (OpenMP's default wait policy). Alone that is fastest: on a 2-core
Zen 4 EPYC the coordinated planner's loop ran 3x and PPO 1.5x faster than with passive waits. Beside a busy process
the spinning thread holds a core the other needs: PPO ran 1.9x slower than passive, the imitation's cloning epochs up
to 10x (docs/performance.md, "Design choices, measured"). OpenMP reads the policy when torch loads, so a run cannot
switch it once it sees the load: it says what to do instead.
"""

from __future__ import annotations

import os

import psutil

BUSY_CORES = 0.8  # others' load, in cores: one busy process (measured slower spinning than passive) reads ~1


def affinity_cores(count: int) -> list[int]:
    """The logical CPUs (of `count`) this process may run on."""
    try:
        cores = psutil.Process().cpu_affinity() or range(count)
    except (AttributeError, OSError):  # macOS has no affinity call
        cores = range(count)
    return [c for c in cores if c < count]


def others_busy_cores(sample_s: float = 0.2) -> float:
    """The cores of this process's affinity kept busy over `sample_s` seconds, while this process waits
    (so, by others): the sum of their utilisations."""
    percent = psutil.cpu_percent(interval=sample_s, percpu=True)
    return sum(percent[c] for c in affinity_cores(len(percent))) / 100.0


def contention_warning(threads: int, busy_cores=others_busy_cores, cores: int | None = None) -> str | None:
    """A warning for a run of `threads` torch threads when others keep `busy_cores()` of its `cores` (its
    affinity's, by default) busy, more than the `cores - threads` it leaves them, and the user chose no wait
    policy; None when it would not lose (one thread forms no OpenMP team), without sampling (`busy_cores`
    takes 0.2 s), or when the user chose a policy."""
    if threads < 2 or os.environ.get("OMP_WAIT_POLICY"):
        return None
    cores = len(affinity_cores(os.cpu_count() or threads)) if cores is None else cores
    busy = busy_cores()
    # a run of 2 threads in a 2-CPU container on a 64-core host beside 3 busy cores has 59 idle cores to run on
    if busy < BUSY_CORES + max(0, cores - threads):
        return None
    return (
        f"warning: other processes keep {busy:.1f} of this run's cores busy; its {threads} torch threads spin at "
        "each barrier (OpenMP's default) and can run several times slower beside them. Start it with "
        "OMP_WAIT_POLICY=PASSIVE (set before Python starts) or run.torch_threads=1 (docs/performance.md)"
    )
