"""What CUDA graph trees would make of a compiled function, checked on any device (the CPU included).

`GraphAudit` is a `torch.compile` backend that traces as inductor does (AOT autograd, functional
graphs that keep an inference graph's writes into its inputs) and records, for every graph, what
inductor's `reduce-overhead` mode checks before it captures one (`torch._inductor.cudagraph_utils`):
the inputs the graph writes that are not static addresses ("skipping cudagraphs due to mutated
inputs"), inputs that are not tensors ("non-Tensor inputs"), and the non-static tensor inputs that
a replay first copies into the graph's own memory. Inductor itself only runs these checks on a CUDA
device; here they run on whatever device the function runs on, so a test on the CPU can say that
the trainer's captured graphs would not be skipped on a GPU; and inductor's own check for ops that
CUDA graphs cannot capture ("incompatible op": host syncs, data-dependent sizes, writes through a
boolean mask), and for static inputs that start unaligned (inductor copies them: not static). One
skip reason stays for a GPU to see: a CPU tensor inside a CUDA graph ("cpu device").

While an `benchmarks.op_count.OpCounter` counts, the audit tallies what CUDA graphs would change
of it (`Tally`): the kernels counted inside the graphs, which a replay launches as one graph, and
the copies a replay makes first, one per non-static tensor input that no graph of the same step
produced (CUDA graph trees keep those in place; a step begins with a forward or inference graph).
The counter's kernels, less those inside the graphs, plus the replays and the copies, are the
host's launches under CUDA graphs (`benchmarks.step_cost`; call the compiled function through
`GraphAudit.counted` there).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

from benchmarks.op_count import OpCounter

TENSOR_LIKE = (torch.Tensor, torch.SymInt, torch.Generator)  # the inputs CUDA graph trees take


@dataclasses.dataclass
class AuditedGraph:
    """One compiled graph: `kind` ("inference", "forward" or "backward"), its inputs, which of them
    CUDA graph trees take as static, and what would make them skip it."""

    kind: str
    label: str  # what `GraphAudit.labelled` named the compiled function ("" where unnamed)
    inputs: int
    static: frozenset[int]  # and 16-byte aligned, which inductor also requires
    mutated_not_static: list[str]  # placeholder names (and the source line that writes them, where known)
    non_tensor: list[str]  # types of inputs that are neither tensors nor symbolic ints
    incompatible_op: str | None = None  # the first op CUDA graphs cannot capture (a host sync, a bool-mask write)

    @property
    def skip_reasons(self) -> list[str]:
        """Why CUDA graph trees would skip this graph ([] where they would capture it)."""
        out = []
        if self.mutated_not_static:
            out.append(f"mutated inputs ({len(self.mutated_not_static)} instances): {self.mutated_not_static}")
        if self.non_tensor:
            out.append(f"non-Tensor inputs: {self.non_tensor}")
        if self.incompatible_op:
            out.append(f"incompatible op ({self.incompatible_op})")
        return out


@dataclasses.dataclass
class Tally:
    """What CUDA graphs change of an `OpCounter`'s count (see the module docstring)."""

    kernels_in_graphs: int = 0
    replays: int = 0
    copies: int = 0

    def launches(self, kernels: int) -> int:
        """The launches of `kernels` counted eagerly, with the graphs replayed."""
        return kernels - self.kernels_in_graphs + self.replays + self.copies


class GraphAudit:
    """`torch.compile(fn, backend=GraphAudit())`: records an `AuditedGraph` per graph in `graphs`;
    the graphs run as traced (AOT autograd's eager kernels)."""

    def __init__(self) -> None:
        self.graphs: list[AuditedGraph] = []
        self.tally = Tally()  # while an OpCounter counts
        self._counter: OpCounter | None = None  # the counter `counted` set aside
        self._produced: set[int] = set()  # the memory of what this step's graphs returned
        self._label = ""
        self.runs: list[tuple[int, int]] = []  # (graph index, generation) of every graph run, in order
        self._generation, self._counter_seen, self._pending_backward = 0, None, False
        self._backend = aot_autograd(
            fw_compiler=self._compiler("forward"),
            bw_compiler=self._compiler("backward"),
            inference_compiler=self._compiler("inference"),
            keep_inference_input_mutations=True,
        )

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]):
        return self._backend(gm, example_inputs)

    def labelled(self, label: str) -> Callable:
        """This backend, naming the graphs it compiles `label` (a backward: its forward's)."""

        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]):
            self._label = label
            try:
                return self._backend(gm, example_inputs)
            finally:
                self._label = ""

        return backend

    @property
    def skip_reasons(self) -> list[str]:
        """Every recorded graph's skip reasons, each prefixed with the graph's index and kind."""
        return [f"graph {i} ({g.kind}): {r}" for i, g in enumerate(self.graphs) for r in g.skip_reasons]

    def _compiler(self, kind: str) -> Callable:
        def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]):
            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            # inductor copies a static input that does not start 16-byte aligned (`remove_unaligned_input_idxs`):
            # it is static no longer (the allocator aligns every allocation: a view's offset decides)
            static = frozenset(i for i in static_inputs(gm, kind) if aligned(example_inputs[i]))
            position = {node: i for i, node in enumerate(placeholders)}
            mutated = sorted({position[n.args[0]] for n in gm.graph.nodes if writes_placeholder(n, position)})
            label = self._label
            if kind == "backward" and not label:  # compiled at the first backward, after its forward
                label = next((g.label for g in reversed(self.graphs) if g.kind == "forward"), "")
            graph = AuditedGraph(
                kind=kind,
                label=label,
                inputs=len(placeholders),
                static=static,
                mutated_not_static=[described(placeholders[i]) for i in mutated if i not in static],
                non_tensor=[type(x).__name__ for x in example_inputs if not isinstance(x, TENSOR_LIKE)],
                incompatible_op=incompatible_op(gm),
            )
            self.graphs.append(graph)
            return make_boxed_func(self._runner(gm, graph))

        return compile_graph

    def counted(self, compiled: Callable) -> Callable:
        """`compiled` (a function compiled with this backend), callable under an `OpCounter`:
        dynamo runs no compiled code while a dispatch mode is active ("non-infra torch dispatch
        mode present"), so the counter steps aside for the call and comes back inside its graphs."""

        def call(*args, **kwargs):
            if not isinstance(_get_current_dispatch_mode(), OpCounter):
                return compiled(*args, **kwargs)
            with _pop_mode_temporarily() as counter:
                self._counter = counter
                try:
                    return compiled(*args, **kwargs)
                finally:
                    self._counter = None

        return call

    def _generation_of(self, kind: str) -> int:
        """The generation of CUDA graph trees a graph of `kind` runs in (as `CUDAGraphTreeManager`
        decides it): a call of a compiled function (not a backward, which autograd calls) begins a
        new one where the generation counter moved (each compiled call moves it, until the first
        `cudagraph_mark_step_begin`; from then on only that does) and, unless marked, no forward
        waits for its backward."""
        from torch._dynamo.mutation_guard import GenerationTracker
        from torch._inductor.cudagraph_trees import MarkStepBox

        marked = MarkStepBox.mark_step_counter != 0
        counter = MarkStepBox.mark_step_counter if marked else GenerationTracker.generation
        if kind != "backward" and counter != self._counter_seen and (marked or not self._pending_backward):
            self._generation += 1
            self._counter_seen = counter
        self._pending_backward = kind == "forward" or (self._pending_backward and kind != "backward")
        return self._generation

    def _runner(self, gm: torch.fx.GraphModule, graph: AuditedGraph) -> Callable:
        index = len(self.graphs) - 1

        def run(*args):
            self.runs.append((index, self._generation_of(graph.kind)))
            # a forward or inference graph runs inside `counted`'s call, a backward under the counter
            counter = self._counter or _get_current_dispatch_mode()
            if not isinstance(counter, OpCounter):
                return gm(*args)
            copies = sum(
                isinstance(x, torch.Tensor) and i not in graph.static and storage_of(x) not in self._produced
                for i, x in enumerate(args)
            )
            if graph.kind != "backward":  # a new step (a generation, in CUDA graph trees' terms) begins
                self._produced.clear()
            before = counter.kernels
            with counter if counter is self._counter else contextlib.nullcontext():
                out = gm(*args)
            self.tally.kernels_in_graphs += counter.kernels - before
            self.tally.replays += 1
            self.tally.copies += copies
            self._produced.update(storage_of(x) for x in out if isinstance(x, torch.Tensor))
            return out

        return run


def incompatible_op(gm: torch.fx.GraphModule) -> str | None:
    """The first node of `gm` that inductor will not capture in a CUDA graph (its own check: ops
    that sync with the host or allocate by data, writes through a boolean mask, data-dependent
    sizes), as `target (stack line)`; None where there is none."""
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    node = get_first_incompatible_cudagraph_node(gm)
    if node is None:
        return None
    trace = node.meta.get("stack_trace")
    return f"{node.target} ({trace.strip().splitlines()[-1].strip()})" if trace else str(node.target)


def aligned(x: Any) -> bool:
    """Whether a graph input starts 16 bytes into an aligned allocation (inductor's `ALIGNMENT`)."""
    return not isinstance(x, torch.Tensor) or x.storage_offset() * x.element_size() % 16 == 0


def storage_of(x: torch.Tensor) -> int:
    """Where `x`'s memory lies: CUDA graph trees tell the tensors their graphs produced by it (autograd
    hands a backward's output to `param.grad` as another tensor object on the same memory)."""
    return x.untyped_storage().data_ptr()


def static_inputs(gm: torch.fx.GraphModule, kind: str) -> list[int]:
    """The inputs of `gm` CUDA graph trees take as static, as inductor's `compile_fx` finds them:
    a forward's from AOT autograd's metadata (parameters, buffers and `mark_static_address`ed
    tensors), a backward's every input before the tangents (`count_tangents`)."""
    if kind == "backward":
        from torch._inductor.utils import count_tangents

        return list(range(count_tangents(gm)))
    context = torch._guards.TracingContext.try_get()
    return list(context.fw_metadata.static_input_indices) if context and context.fw_metadata else []


def writes_placeholder(node: torch.fx.Node, position: dict[torch.fx.Node, int]) -> bool:
    """Whether `node` writes into a graph input: an in-place op (functionalized graphs keep only
    `copy_` into an input) whose first argument is a placeholder."""
    if node.op != "call_function" or not node.args or node.args[0] not in position:
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


def described(node: torch.fx.Node) -> str:
    """A placeholder's name and the last source line of its first writing use, where known."""
    for user in node.users:
        trace = user.meta.get("stack_trace")
        if trace:
            return f"{node.name} ({trace.strip().splitlines()[-1].strip()})"
    return node.name


if __name__ == "__main__":  # `python -m benchmarks.graph_audit --help` printed nothing
    raise SystemExit(f"{__spec__.name} is a library of counts: run python -m benchmarks.step_cost (see its --help)")
