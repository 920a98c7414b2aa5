"""Count, on any device (the CPU included), the kernels a piece of torch code launches and the bytes
its operands occupy: the cost model of `benchmarks.step_cost`.

`OpCounter` is a `TorchDispatchMode`: it sees every aten op below autograd (the backward's too),
exactly the calls that would each launch a kernel on a GPU. The rules (deterministic, so counts may
be asserted in tests):

Kernels
    Every aten op counts one, except ops that only make metadata:
    * views and aliases: ops whose schema returns an alias of an input without writing it
      (``OpOverload.is_view``: ``view``, ``expand``, ``as_strided``, ``t``, ``transpose``,
      ``permute``, ``select``, ``slice``, ``unfold``, ``detach``, ``alias``, ``unsqueeze``,
      ``squeeze``, ...), and ``_unsafe_view`` (a view whose schema does not say so: ``reshape``
      ends with it after the copy it makes of a tensor it cannot view);
    * allocations without a fill (``empty``, ``empty_strided``, ``empty_like``, ``lift_fresh``),
      symbolic-size queries (``sym_*``) and any ``prim`` op;
    * ``_local_scalar_dense`` (``.item()``, ``bool(tensor)``): no kernel, but a host read, counted
      in ``host_syncs``;
    * the profiler's ``record_function`` enter and exit (``profiler::`` ops: a torch optimizer's
      ``step`` and ``zero_grad`` each open one, profiler on or off): host bookkeeping, no kernel.
    An op may launch more than one kernel on a GPU (a sort, a scan, ``nonzero``): the count is a
    lower bound there. Checks that run only on the CPU are counted too (``F.one_hot`` reads the
    index's min and max back on the CPU, not on CUDA): a few kernels and host syncs too many.
Host syncs
    Ops that need a device-to-host read on a GPU: ``_local_scalar_dense``, ``nonzero``,
    ``is_nonzero``, ``masked_select``, ``unique`` and indexing by a bool mask.
Optimizer step counters
    A torch optimizer that is neither capturable nor fused keeps each parameter's ``step`` a CPU
    tensor on every device, and reads it with ``.item()`` (the foreach loop twice a parameter): ops
    on such counters (and 0-dim scalars beside them) are host arithmetic on a GPU too, neither
    kernel nor sync.
Bytes
    Each tensor operand counted whole: inputs read plus outputs written. A tensor counts
    ``numel x itemsize``, or its storage span where that is smaller (an expanded or unfolded view
    covers less memory than it has elements). Arguments an op writes (in-place and ``out=``
    arguments) count as outputs, and also as inputs unless the op only writes them (``copy_``,
    ``fill_``, ``zero_``, ``out=``). A gather or a scatter counts its whole source / destination,
    so for indexed ops the count is an upper bound of the traffic; except ``index_copy_``, which
    writes whole rows it is given (the rollout's storage writes one step's row of a [T, ...]
    tensor): its destination counts as the source's bytes, written only.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

NO_KERNEL = frozenset(
    {
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "lift_fresh",
        "_unsafe_view",
        "_local_scalar_dense",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "record_stream",
        "set_",
    }
)
NO_KERNEL_NAMESPACES = frozenset({"prim", "profiler"})  # metadata and host bookkeeping
HOST_SYNC = frozenset(
    {
        "_local_scalar_dense",
        "nonzero",
        "is_nonzero",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "item",
    }
)
WRITE_ONLY = frozenset(
    {
        "copy_",
        "fill_",
        "zero_",
        "uniform_",
        "normal_",
        "random_",
        "bernoulli_",
        "exponential_",
        "index_fill_",
        "masked_fill_",
        "scatter_",
    }
)
INDEXED_BY_MASK = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


def operand_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t`` counted whole: ``numel x itemsize``, capped by the memory its strides span."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return min(t.numel(), span) * t.element_size()


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as c: fn()`` -> ``c.kernels``, ``c.bytes``, ``c.host_syncs`` and
    ``c.by_op`` (``{"aten.gather": [calls, bytes]}``). See the module docstring for the rules."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0
        self.bytes = 0
        self.host_syncs = 0
        self.by_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self._stepping: list[torch.optim.Optimizer] = []  # optimizers whose step() is running
        self._hooks: list = []

    def __enter__(self):
        self._hooks = [
            register_optimizer_step_pre_hook(lambda opt, *_: self._stepping.append(opt)),
            register_optimizer_step_post_hook(lambda opt, *_: self._stepping.remove(opt)),
        ]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        return super().__exit__(*exc)

    def _host_step_counters(self) -> set[int]:
        """ids of the CPU ``step`` counters of the running optimizers that keep them on the host."""
        ids = set()
        for opt in self._stepping:
            if opt.defaults.get("capturable") or opt.defaults.get("fused"):
                continue
            for state in opt.state.values():
                step = state.get("step")
                if isinstance(step, torch.Tensor) and step.device.type == "cpu":
                    ids.add(id(step))
        return ids

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._record(func, args, kwargs, out)
        return out

    def _record(self, func, args, kwargs, out) -> None:
        name = func._schema.name.split("::")[-1]
        if self._stepping:
            counters = self._host_step_counters()
            operands = _tensors((args, kwargs))
            # the counters and 0-dim scalars beside them (foreach adds a CPU tensor 1.0 to them)
            if any(id(t) in counters for t in operands) and all(id(t) in counters or t.dim() == 0 for t in operands):
                return
        if self._syncs(name, args):
            self.host_syncs += 1
        if func.namespace in NO_KERNEL_NAMESPACES or func.is_view or name in NO_KERNEL or name.startswith("sym_"):
            return
        written: list[torch.Tensor] = []
        read: list[torch.Tensor] = []
        named = dict(zip((a.name for a in func._schema.arguments), args))
        named.update(kwargs)
        for arg in func._schema.arguments:
            value = named.get(arg.name)
            tensors = _tensors(value)
            if arg.alias_info is not None and arg.alias_info.is_write:
                written += tensors
                if not (arg.is_out or name in WRITE_ONLY):
                    read += tensors
            else:
                read += tensors
        if not written:  # a functional op: what it returns is what it writes
            written = _tensors(out)
        if name == "index_copy_":  # (self, dim, index, source): the rows written, not all of self
            read, written = _tensors(args[2:4]), _tensors(args[3])
        nbytes = sum(map(operand_bytes, read)) + sum(map(operand_bytes, written))
        self.kernels += 1
        self.bytes += nbytes
        entry = self.by_op[f"{func.namespace}.{name}"]
        entry[0] += 1
        entry[1] += nbytes

    @staticmethod
    def _syncs(name: str, args) -> bool:
        if name in HOST_SYNC:
            return True
        if name in INDEXED_BY_MASK:  # x[mask] / x[mask] = v: the result's size is a device value
            return any(t.dtype == torch.bool for t in _tensors(args[1:2]))
        return False

    def top_ops(self, count: int = 8, per: float = 1.0) -> list[dict[str, Any]]:
        """The ``count`` ops that move the most bytes: name, calls and bytes (each divided by ``per``)."""
        ranked = sorted(self.by_op.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))[:count]
        return [{"op": op, "calls": calls / per, "bytes": nbytes / per} for op, (calls, nbytes) in ranked]
