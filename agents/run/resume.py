"""Continuing a run (`python -m agents.train_mappo --resume RUN_DIR_OR_CKPT`): its config, and where it writes.

A resumed run keeps the saved config except for `key=value` overrides, and cannot change what
defines the networks, the environment state or the length of an iteration (`FROZEN_ON_RESUME`:
the iteration counter and the learning-rate schedule count iterations of that length).

It writes into the run directory its checkpoint came from (`RUN/checkpoints/ckpt_*.pt`), or into
`run.dir` when an override names another one. It never continues an older checkpoint inside a run
that holds newer ones: the two lineages would mix, pruning would delete the new checkpoints in
favour of the old run's higher step counts, and `--resume RUN` would pick the stale one. Branch
into a new `run.dir` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agents.config import Config, load_config, to_dict
from agents.run import checkpoint as ckpt
from agents.run.logger import flatten
from agents.run.paths import dir_problem

# What a resumed run cannot change: sections (every key under them) and single keys. The imitation and the
# recipe are what the run did and was laid over before its first checkpoint: an override would be recorded, not done.
FROZEN_ON_RESUME = ("seed", "env", "model", "train.num_steps", "imitation", "run.recipe")


def _frozen(key: str) -> bool:
    return any(key == f or key.startswith(f + ".") for f in FROZEN_ON_RESUME)


def resume_config(resume: str | Path, overrides: Sequence[str]) -> Config:
    """The saved config of the checkpoint `resume` names (a file or a run directory), with
    `overrides` (`key=value`).

    Raises:
        ValueError: a bad override, or one that changes a frozen key (`FROZEN_ON_RESUME`).
        CheckpointError: the checkpoint, or its config, cannot be used.
    """
    source, payload = ckpt.load_latest(resume)
    # with the keys added since the checkpoint was written at their defaults, as the run loads them (not "changed")
    saved = flatten(to_dict(saved_config(source, payload)))
    cfg = load_config(None, overrides, base=payload["config"])
    now = flatten(to_dict(cfg))
    changed = [k for k in now if _frozen(k) and saved.get(k) != now[k]]
    if changed:
        raise ValueError(
            f"cannot change {changed} when resuming (they define the networks, the env state, the length of "
            "an iteration, or what the run did before its first checkpoint: its imitation and recipe); start a "
            "new run instead"
        )
    return cfg


def saved_config(source: Path, payload: dict) -> Config:
    """The config a checkpoint was written with; one that no longer loads is a `CheckpointError`."""
    try:
        return load_config(None, (), base=payload["config"])
    except (ValueError, TypeError) as err:
        raise ckpt.CheckpointError(f"checkpoint {source} holds a config this code cannot use: {err}") from None


def owning_run_dir(checkpoint: Path) -> Path | None:
    """The run directory of a checkpoint file kept as `RUN/checkpoints/ckpt_*.pt`, else None."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def check_run_dir(run_dir: Path) -> None:
    """Raise a ValueError unless `run_dir` is (or can be created as) a writable directory without checkpoints."""
    problem = dir_problem(run_dir)
    if problem:
        raise ValueError(f"run.dir: {problem}")
    if ckpt.list_checkpoints(run_dir):
        raise ValueError(
            f"run directory {run_dir} already has checkpoints: pass --resume {run_dir} "
            "to continue it, or choose another run.dir"
        )


def resume_run_dir(checkpoint: Path, saved_dir: str | None, cfg: Config) -> Path:
    """Where the run resumed from `checkpoint` writes (see the module docstring).

    Args:
        checkpoint: the checkpoint resumed from.
        saved_dir: the `run.dir` in the checkpoint's config (a different `cfg.run.dir` is an override).
        cfg: the resumed run's config.

    Returns:
        The run directory.

    Raises:
        ValueError: the directory cannot be used, or holds checkpoints newer than `checkpoint`.
    """
    own = owning_run_dir(checkpoint)
    wanted = Path(cfg.run.dir) if cfg.run.dir and cfg.run.dir != saved_dir else None
    if wanted is not None and (own is None or wanted.resolve() != own.resolve()):
        check_run_dir(wanted)  # a branch starts in a directory of its own
        return wanted
    if own is None:
        raise ValueError(
            f"checkpoint {checkpoint} is not in a run's checkpoints/ folder: pass run.dir=DIR for the resumed run"
        )
    problem = dir_problem(own)
    if problem:
        raise ValueError(f"the run directory {problem}; pass run.dir=NEW_DIR to continue elsewhere")
    newer = [c for c in ckpt.list_checkpoints(own) if c.name > checkpoint.name]
    if newer:
        raise ValueError(
            f"checkpoint {checkpoint} is older than {newer[-1]} of the same run: continuing it there "
            "would mix two runs; pass run.dir=NEW_DIR to branch into a new run, or resume the newest"
        )
    return own
