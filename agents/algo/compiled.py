"""`train.compile`: the PPO minibatch through `torch.compile` (the loss, its backward, and the
arithmetic of the optimizer's step), on CUDA replayed as CUDA graphs; and the check that this machine
can build its kernels (also for `train.compile_rollout`)."""

from __future__ import annotations

import shutil

import torch

from agents.algo.optimizer_step import NormsFn, minibatch_norms
from agents.algo.ppo import LossFn, minibatch_loss
from uavsim.machine.inductor_cache import use_class_cache


def check_compiler(device: torch.device, key: str = "train.compile") -> None:
    """Fail early, naming the config `key` and the fix, where `torch.compile` cannot build kernels on
    `device`: raises ValueError without a C++ compiler on the CPU, Triton or a C compiler on CUDA.
    On the CPU it also gives a capped class its own kernel cache (`uavsim.machine.inductor_cache`)."""
    if device.type == "cpu":
        from torch._inductor import cpp_builder

        use_class_cache()  # before the first compile: another class's cached kernels crashed a run

        try:
            cpp_builder.get_cpp_compiler()
        except Exception as err:  # inductor raises its own error types for a missing compiler
            raise ValueError(
                f"{key}=true on the CPU needs a C++ compiler for torch.compile "
                f"(inductor found none: {err}); install g++ or set {key}=false"
            ) from None
    elif device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton() or not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
            raise ValueError(
                f"{key}=true on CUDA needs Triton and a C compiler (Triton builds its launcher "
                f"with one); install them or set {key}=false"
            )


def cpu_rollout_warning(compile_rollout: bool, device: torch.device) -> str | None:
    """A line for the banner where `train.compile_rollout` is asked for on the CPU (None elsewhere):
    there inductor's rollout step collected 4.4x slower than the eager one, after 2.4 minutes of
    compiling (the default preset, 64 environments, the 2-core Zen 4 EPYC in bf16; its AVX2 class 3.4x;
    docs/training.md). It is CUDA's: graphs replayed instead of a launch per kernel."""
    if not compile_rollout or device.type != "cpu":
        return None
    return (
        "warning: train.compile_rollout=true on the CPU: minutes of compiling, and on the default preset a collection "
        "several times slower than the eager one where measured (docs/training.md); it pays on CUDA"
    )


def compile_loss(device: torch.device) -> LossFn:
    """`minibatch_loss` through `torch.compile` for `device` (`train.compile`): the forward in one
    graph, the backward in another (a graph break raises), on CUDA each replayed as a CUDA graph
    (`update_options`). Static shapes, so it compiles once (a few seconds). Raises
    `check_compiler`'s ValueError here, rather than a compiler error at the first update."""
    check_compiler(device)
    return torch.compile(minibatch_loss, dynamic=False, fullgraph=True, options=update_options(device))


def compile_norms(device: torch.device) -> NormsFn:
    """`minibatch_norms` (the gradient norms, the skip flag and the statistics row of a minibatch's
    step) through `torch.compile` for `device` (`train.compile`), whole (a break raises), on CUDA
    replayed as a CUDA graph: a few dozen small kernels in one launch."""
    check_compiler(device)
    return torch.compile(minibatch_norms, dynamic=False, fullgraph=True, options=update_options(device))


def update_options(device: torch.device) -> dict[str, bool]:
    """Inductor's options for the update's graphs on `device`: CUDA graphs on CUDA (inductor's
    `reduce-overhead` mode: the graphs read the stored rollout in place, `agents.algo.static_inputs`),
    inductor's defaults elsewhere."""
    from torch._inductor import list_mode_options

    return list_mode_options("reduce-overhead" if device.type == "cuda" else "default")
