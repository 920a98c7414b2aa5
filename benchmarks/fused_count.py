"""Kernels and bytes of torch code once `torch.compile` (inductor) has fused it, counted by inductor
itself on any device, the CPU included: the fused counterpart of `benchmarks.op_count`.

Inductor schedules a captured graph as kernels (fused pointwise and reduction chains, and extern
calls such as the matrix products) and, with its metrics log on, sums for each kernel the bytes of
the buffers it reads and writes (`BaseSchedulerNode.get_read_write_buffers_sizes`): its own model of
the traffic, in which a fused chain reads its inputs once and writes its outputs once, and its
temporaries never reach memory. This is the CPU backend's schedule. The CUDA backend fuses the same
pointwise chains and calls cuBLAS for the products too (unless `mode="max-autotune"` picks Triton
templates that can fuse an epilogue into a product), so the count is the yardstick of a captured
step when no GPU is lent. Deterministic for a given torch build (asserted in tests).

The FX graph and AOT autograd caches are off while counting: a cache hit skips the scheduling that
counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any


def fused_count(fn: Callable, *args, env_steps_per_call: int = 1) -> dict[str, Any]:
    """Compile `fn` whole (`fullgraph=True`, static shapes), run it once on `args` and return
    inductor's count of its kernels (no-op nodes left out) and bytes, per call and per env-step."""
    import torch._dynamo
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor import metrics
    from torch._inductor.compile_fx import inductor_metrics_log
    from torch._inductor.scheduler import NopKernelSchedulerNode

    level, propagate = inductor_metrics_log.level, inductor_metrics_log.propagate
    inductor_metrics_log.setLevel(logging.INFO)  # what makes inductor count (its log line is not shown)
    inductor_metrics_log.propagate = False
    torch._dynamo.reset()
    try:
        # emulate_precision_casts as `train.compile_rollout` compiles (agents.algo.rollout.compile_rollout_step)
        with (
            inductor_config.patch(fx_graph_cache=False, emulate_precision_casts=True),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            metrics.reset()
            torch.compile(fn, fullgraph=True, dynamic=False)(*args)
            kernels = sum(not isinstance(node, NopKernelSchedulerNode) for node, _ in metrics.nodes_num_elem)
            nbytes = metrics.num_bytes_accessed
    finally:
        inductor_metrics_log.setLevel(level)
        inductor_metrics_log.propagate = propagate
        torch._dynamo.reset()
    return {
        "kernels_per_call": kernels,
        "bytes_per_call": nbytes,
        "env_steps_per_call": env_steps_per_call,
        "bytes_per_env_step": nbytes / env_steps_per_call,
    }
