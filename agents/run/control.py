"""When a training run stops, and what it says: which iterations went wrong (non-finite updates),
the errors that end a run (too many bad iterations, Ctrl-C) with where it can continue from, and
when a step counter crosses an evaluation or checkpoint interval."""

from __future__ import annotations

import os
from pathlib import Path

from agents.config import Amp, TrainConfig
from agents.run import checkpoint as ckpt


def iteration_problem(m: dict[str, float], cfg: TrainConfig) -> str | None:
    """What went wrong in an iteration's update, from its metrics `m` (`read_metrics`: its
    `skipped_updates` and `nonfinite_losses`) under the train config `cfg`, or None.

    A skipped update is a problem, except under fp16 when the loss was finite: then the gradient
    overflowed the loss scale, and the scaler skips that step and halves the scale by design. Only
    an fp16 iteration whose every update overflowed is one (the scale cannot find a finite gradient).
    """
    skipped, nonfinite = m["skipped_updates"], m["nonfinite_losses"]
    updates = cfg.update_epochs * cfg.num_minibatches
    if skipped == 0 or (cfg.amp == Amp.fp16 and nonfinite == 0 and skipped < updates):
        return None
    if nonfinite > 0:
        return f"{round(skipped)} of {updates} updates skipped, {round(nonfinite)} with a non-finite loss"
    return f"{round(skipped)} of {updates} updates skipped (non-finite gradient)"


class TrainingStopped(RuntimeError):
    """Training cannot go on (repeated non-finite updates); the last good checkpoint is intact.
    Under torchrun every rank raises it and only the main one (`is_main`) says it (only it knows
    the checkpoints)."""

    def __init__(self, message: str, is_main: bool = True):
        super().__init__(message)
        self.is_main = is_main


def launcher_command(world_size: int) -> str:
    """The command that starts the trainer the way this run was started (torchrun sets
    LOCAL_WORLD_SIZE: ranks per node)."""
    if world_size == 1:
        return "python -m agents.train_mappo"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    nodes = max(1, world_size // max(1, local))
    if nodes == 1:
        return f"torchrun --standalone --nproc_per_node={local} -m agents.train_mappo"
    return f"torchrun --nnodes={nodes} --nproc_per_node={local} (your rendezvous options) -m agents.train_mappo"


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message says where the run can continue from."""

    def __init__(
        self,
        env_steps: int,
        run_dir: Path,
        checkpoint: Path | None,
        resumed_from: Path | None = None,
        launcher: str = "python -m agents.train_mappo",
        is_main: bool = True,
    ):
        """The message for a run interrupted at `env_steps`.

        Args:
            env_steps: env steps done.
            run_dir: the run directory.
            checkpoint: the newest checkpoint the run can continue from (None: none).
            resumed_from: the checkpoint this process started from, if it resumed.
            launcher: how the run was started (`launcher_command`).
            is_main: whether this rank says it (under torchrun every rank raises it).
        """
        self.is_main = is_main
        head = f"interrupted at {env_steps} env steps"
        if checkpoint is None:
            msg = (
                f"{head}, before the run's first checkpoint: nothing to resume; start it again with its "
                f"command and run.dir={run_dir}"
            )
        elif checkpoint.parent == ckpt.checkpoint_dir(run_dir):
            msg = f"{head}; last checkpoint {checkpoint}; continue with: {launcher} --resume {run_dir}"
        else:  # a branch stopped before its first checkpoint: it continues from where it branched
            msg = (
                f"{head}; last checkpoint {checkpoint} (this run has none yet); continue with: "
                f"{launcher} --resume {checkpoint} run.dir={run_dir}"
            )
        if checkpoint is not None and checkpoint == resumed_from:
            msg += " and the overrides you resumed with (no checkpoint holds them yet)"
        super().__init__(msg)


def stopped_message(bad_iterations: int, last_good: Path | None) -> str:
    """What `TrainingStopped` says: how many bad iterations, and where the run can continue from."""
    where = (
        f"the last good checkpoint is {last_good}"
        if last_good is not None
        else "no checkpoint was written yet: start again with other settings (e.g. a lower learning rate)"
    )
    return f"training stopped: non-finite loss/gradient in {bad_iterations} consecutive iterations; {where}"


def crossed(every: int, before: int, now: int) -> bool:
    """Whether the step counter passed a multiple of `every` (0: never) going from before to now."""
    return every > 0 and now // every > before // every
