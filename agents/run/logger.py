"""TensorBoard logging (CleanRL's tag names), phase timing without syncs, memory readings.

Scalars arrive as plain floats: the trainer reads its device metrics once per iteration and hands
them over here. The x-axis is always the number of environment steps.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from uavsim.machine.host_memory import process_rss

if TYPE_CHECKING:
    from agents.algo.learner import Learner


class Logger:
    """TensorBoard writer; with `enabled=False` (ranks other than 0) every call does nothing.

    Args:
        run_dir: where the event files go.
        purge_step: a resumed run's first step: TensorBoard drops logged steps from there on.
        enabled: False makes it a no-op.
    """

    def __init__(self, run_dir: str | Path, purge_step: int | None = None, enabled: bool = True):
        self.enabled = enabled
        if enabled:
            wait_for_a_newer_second(Path(run_dir))
        self.writer = SummaryWriter(str(run_dir), purge_step=purge_step) if enabled else None

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            if value is not None and math.isfinite(value):
                self.writer.add_scalar(tag, value, step)

    def hyperparameters(self, flat: dict[str, object], step: int = 0) -> None:
        """A Markdown table of every config value (CleanRL's `hyperparameters` text), at `step`
        (a resumed run logs its possibly overridden config one step after the step it resumed from,
        where TensorBoard's purge hides the copy an earlier, killed resume logged)."""
        if self.writer is None:
            return
        rows = "\n".join(f"|{k}|{v}|" for k, v in flat.items())
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}", step)

    def image(self, tag: str, rgb: np.ndarray, step: int) -> None:
        if self.writer is None:
            return
        self.writer.add_image(tag, rgb, step, dataformats="HWC")

    def text(self, tag: str, text: str, step: int) -> None:
        if self.writer is None:
            return
        self.writer.add_text(tag, text, step)

    def close(self) -> None:
        if self.writer is None:
            return
        self.writer.flush()
        self.writer.close()


def wait_for_a_newer_second(run_dir: Path) -> None:
    """Wait until the clock's second is past that of the newest event file in `run_dir`, so that a new
    writer's file sorts after it (under a second; a file stamped more than a second ahead, a clock
    set back, is not waited for)."""
    # TensorBoard reads a run's event files in name order, `events.out.tfevents.<second>.<host>.<pid>.<n>`
    # with a per-process `n` that is not zero-padded: a second writer made in the same second by the
    # same process sorts first when `n` gains a digit (`...9` after `...10`), and its purge of a
    # killed run's steps is then read before those steps and lost (a resume right after a run, in
    # one process, hit it).
    stamps = [
        int(p.name.split(".")[3])
        for p in run_dir.glob("events.out.tfevents.*")
        if len(p.name.split(".")) > 3 and p.name.split(".")[3].isdigit()
    ]
    if not stamps or not 0 <= max(stamps) - int(time.time()) <= 1:
        return
    while int(time.time()) <= max(stamps):
        time.sleep(0.02)


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class PhaseTimer:
    """Wall time of the phases of an iteration. On CUDA it records events (no sync) and reads them
    when `seconds()` is called, once per iteration; on the CPU work is synchronous anyway."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((name, ev))
        else:
            self.marks.append((name, time.perf_counter()))

    def seconds(self) -> dict[str, float]:
        """Seconds from each mark to the next, keyed by the earlier mark's name; clears the marks."""
        out = {}
        for (name, a), (_, b) in zip(self.marks, self.marks[1:]):
            if self.cuda:
                b.synchronize()
                out[name] = a.elapsed_time(b) / 1000.0
            else:
                out[name] = b - a
        self.marks = []
        return out


def host_rss_mb() -> float:
    """Current resident set size of this process in MiB (`uavsim.machine.host_memory.process_rss`)."""
    return process_rss() / 2**20


def device_memory_mb(device: torch.device) -> float:
    return torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")


def iteration_scalars(learner: Learner, m: dict[str, float], ep: dict[str, float], t: dict[str, float]) -> dict:
    """TensorBoard's scalars of one iteration: its metrics `m`, episode statistics `ep` and phase seconds `t`
    (docs/training.md names each)."""
    it_time = t["env"] + t["learn"]
    steps = learner.steps_per_iteration
    agent_steps = learner.agent_steps_per_iteration
    out = {
        "charts/episodic_return": ep["return"],
        "charts/episodic_length": ep["length"],
        "charts/coverage": ep["coverage"],
        "charts/steps_to_target": ep["steps_to_target"],
        "charts/target_reached": ep["reached_frac"],
        "charts/collisions": ep["collisions"],
        "charts/near_misses": ep["near_misses"],
        "charts/episodes": ep["episodes"],
        "charts/SPS": steps / it_time,
        "charts/agent_SPS": agent_steps / it_time,
        "charts/learning_rate": learner.optimizer.param_groups[0]["lr"],
        "charts/critic_learning_rate": learner.optimizer.param_groups[1]["lr"],
        "perf/env_sps": steps / max(t["env"], 1e-9),
        "perf/env_time": t["env"],
        "perf/learn_time": t["learn"],
        "perf/host_rss_mb": host_rss_mb(),
        "perf/device_mem_mb": device_memory_mb(learner.env.device),
        "value_norm/mean": m["value_norm_mean"],
        "value_norm/std": m["value_norm_std"],
    }
    for k in (
        "value_loss",
        "policy_loss",
        "entropy",
        "approx_kl",
        "old_approx_kl",
        "clipfrac",
        "explained_variance",
        "actor_grad_norm",
        "critic_grad_norm",
        "skipped_updates",
        "nonfinite_losses",
    ):
        out[f"losses/{k}"] = m[k]
    if "clone_kl" in m:  # train.clone_kl_coef
        out["losses/clone_kl"] = m["clone_kl"]
    if learner.scaler.is_enabled():
        out["amp/loss_scale"] = learner.scaler.get_scale()
    return out
