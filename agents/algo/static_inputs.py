"""The persistent tensors a captured function reads and writes, marked as static addresses.

CUDA graph trees (`torch.compile`'s `reduce-overhead`) skip a graph that writes into an input they
do not know to be static ("skipping cudagraphs due to mutated inputs": every captured rollout on
the GPUs of 2026-11-26/27 logged it), and copy every other non-static input into the graph's own
memory before each replay. The rollout step writes the env's state, its storage row, the step
counter, the noise counter and the episode sums in place; the PPO minibatch reads the whole stored
rollout. `torch._dynamo.mark_static_address` tells both that these tensors keep their address:
no skip, no copy. Unguarded: a tensor that moves (an env reset rebuilds its state record) makes
the graph record again once, not recompile. The networks' parameters and buffers are static already.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

MAX_DEPTH = 4  # env -> layout -> record -> tables: deeper than anything the rollout reads


def mark_static_tensors(*roots: object) -> int:
    """Mark every tensor reachable from `roots` (through object attributes, dataclass fields, dicts,
    lists and tuples, up to `MAX_DEPTH` levels; not into `nn.Module`s) as a static address.

    Call it before a captured function first sees the tensors, and again after any of them is
    replaced (marking twice is harmless). Returns the number of tensors marked.
    """
    seen: set[int] = set()
    marked = 0

    def visit(obj: object, depth: int) -> None:
        nonlocal marked
        if id(obj) in seen or depth > MAX_DEPTH:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            torch._dynamo.mark_static_address(obj, guard=False)
            marked += 1
        elif isinstance(obj, dict):
            for value in obj.values():
                visit(value, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                visit(value, depth + 1)
        elif isinstance(obj, nn.Module) or isinstance(obj, type) or callable(obj):
            return  # modules: dynamo treats their parameters and buffers as static itself
        elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
            for value in vars(obj).values():
                visit(value, depth + 1)

    for root in roots:
        visit(root, 0)
    return marked


def is_static(t: torch.Tensor) -> bool:
    """Whether `t` is marked as a static address (`mark_static_tensors`)."""
    return getattr(t, "_dynamo_static_input_type", None) is not None
