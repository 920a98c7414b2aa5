"""The checkpoint payload of a training run: what `Learner` holds, and every rank's part of it.

`learner_state` gathers it (a collective under torchrun: every rank calls it; rank 0 saves) and
checks that the data-parallel replicas still hold identical parameters; `load_learner_state`
restores it into a freshly built learner and says clearly when the checkpoint does not fit.
`trained_actor` builds the actor alone from a checkpoint (`agents.evaluate`, `agents.export`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from agents.algo.layers import Form
from agents.algo.networks import Actor, make_actor
from agents.config import Config, to_dict
from agents.run import checkpoint as ckpt
from agents.run.resume import saved_config

if TYPE_CHECKING:
    from agents.algo.learner import Learner, SizeGroup


def _rank_state(learner: Learner) -> dict:
    """What differs between ranks: the environments, a recurrent actor's hidden states and the
    random streams."""
    env = learner.env.state_dict()
    env["state"] = {k: v.cpu() for k, v in env["state"].items()}
    out = {
        "env": env,
        "rng": {
            "action": learner.action_noise.state_dict(),
            "minibatch": learner.minibatch_gen.get_state(),
            "torch": torch.get_rng_state(),
            "device_type": learner.env.device.type,
        },
    }
    if learner.hidden is not None:
        out["hidden"] = learner.hidden.cpu()
    if learner.more_groups:  # a mixed-size run's other groups, the same items each
        out["more_groups"] = [_group_state(g) for g in learner.more_groups]
    return out


def _group_state(group: SizeGroup) -> dict:
    env = group.env.state_dict()
    env["state"] = {k: v.cpu() for k, v in env["state"].items()}
    out = {"env": env, "action": group.action_noise.state_dict()}
    if group.hidden is not None:
        out["hidden"] = group.hidden.cpu()
    return out


def parameter_checksum(learner: Learner) -> float:
    """Sum of all actor and critic parameters (float64): equal on every rank while replicas agree."""
    params = list(learner.actor.parameters()) + list(learner.critic.parameters())
    return float(torch.stack([p.detach().double().sum() for p in params]).sum())


def learner_state(learner: Learner) -> dict:
    """The checkpoint payload of `learner`. With several ranks this is a collective: call it on every rank.

    Raises:
        RuntimeError: the replicas' parameters differ.
    """
    ranks = learner.replicas.gather_objects(_rank_state(learner))
    checksums = learner.replicas.gather_objects(parameter_checksum(learner))
    if len(set(checksums)) != 1:
        raise RuntimeError(f"data-parallel replicas diverged: parameter checksums {checksums}")
    return {
        "format_version": ckpt.FORMAT_VERSION,
        "config": to_dict(learner.cfg),
        "env_steps": learner.env_steps,
        "iteration": learner.iteration,
        "bad_iterations": learner.bad_iterations,
        "actor": learner.actor.state_dict(),
        "critic": learner.critic.state_dict(),
        "value_norm": learner.value_norm.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "scaler": learner.scaler.state_dict(),
        "world_size": learner.replicas.world_size,
        "replica_checksums": checksums,
        **ranks[0],
        "ranks": ranks,
        **({"clone": learner.clone.state_dict()} if learner.clone is not None else {}),
    }


def load_learner_state(learner: Learner, payload: dict, source: str) -> None:
    """Restore a checkpoint into a freshly built learner.

    Args:
        learner: built from the checkpoint's config (`build_learner`), loaded in place.
        payload: the checkpoint (`agents.run.checkpoint.load_checkpoint`).
        source: the checkpoint's name, for messages.

    Raises:
        CheckpointError: another world size or device type, or state that does not fit the learner.
    """
    saved_world = int(payload.get("world_size", 1))
    if saved_world != learner.replicas.world_size:
        how = (
            "python -m agents.train_mappo --resume (without torchrun)"
            if saved_world == 1
            else f"torchrun --nproc_per_node={saved_world} (or nnodes x nproc_per_node = {saved_world})"
        )
        raise ckpt.CheckpointError(
            f"checkpoint {source} was written by {saved_world} rank(s) but this run has "
            f"{learner.replicas.world_size}: resume with {how}, since every rank's environments are part of the state"
        )
    own = payload["ranks"][learner.replicas.rank] if "ranks" in payload else payload
    saved_type = own["rng"].get("device_type", learner.env.device.type) if isinstance(own.get("rng"), dict) else None
    if saved_type is not None and saved_type != learner.env.device.type:
        raise ckpt.CheckpointError(
            f"checkpoint {source} was written on {saved_type} and this run is on {learner.env.device.type}: "
            f"resume with run.device={saved_type} (a {saved_type} random stream cannot continue on another device type)"
        )
    try:
        learner.actor.load_state_dict(payload["actor"])
        learner.critic.load_state_dict(payload["critic"])
        if learner.clone is not None:
            if "clone" not in payload:
                raise ValueError("it holds no imitated actor for train.clone_kl_coef > 0 (written without it)")
            learner.clone.load_state_dict(payload["clone"])
        learner.value_norm.load_state_dict(payload["value_norm"])
        learner.optimizer.load_state_dict(payload["optimizer"])
        if payload["scaler"]:
            learner.scaler.load_state_dict(payload["scaler"])
        learner.env.load_state_dict(own["env"])
        if learner.hidden is not None:
            _load_hidden(learner, own)
        if not isinstance(own["rng"]["action"], dict):
            raise ValueError("its action noise is not a state dict of agents.algo.action_noise")
        learner.action_noise.load_state_dict(own["rng"]["action"])
        learner.minibatch_gen.set_state(own["rng"]["minibatch"])
        saved_groups = own.get("more_groups", [])
        if len(saved_groups) != len(learner.more_groups):
            raise ValueError(f"it holds {len(saved_groups) + 1} size group(s), this run {len(learner.groups)}")
        for group, saved in zip(learner.more_groups, saved_groups):
            group.env.load_state_dict(saved["env"])
            if group.hidden is not None:
                _load_hidden(group, saved)
            group.action_noise.load_state_dict(saved["action"])
        torch.set_rng_state(own["rng"]["torch"])
    except (RuntimeError, ValueError, KeyError, TypeError) as err:
        raise ckpt.CheckpointError(f"checkpoint {source} does not match this learner: {err}") from None
    learner.env_steps, learner.iteration = int(payload["env_steps"]), int(payload["iteration"])
    learner.bad_iterations = int(payload.get("bad_iterations", 0))
    for group in learner.groups:  # the observation is a function of the environment state
        group.obs = group.env.observe()


def _load_hidden(learner: Learner | SizeGroup, own: dict) -> None:
    """The recurrent actor's hidden states `[B, N, H]` of this rank's environments (of one size group)."""
    hidden = own.get("hidden")
    if not isinstance(hidden, torch.Tensor):
        raise ValueError("it holds no hidden states for the recurrent actor")
    if hidden.shape != learner.hidden.shape or hidden.dtype != learner.hidden.dtype:
        raise ValueError(
            f"hidden states are {tuple(hidden.shape)} {hidden.dtype}, this learner's "
            f"{tuple(learner.hidden.shape)} {learner.hidden.dtype}"
        )
    if not torch.isfinite(hidden).all():
        raise ValueError("hidden states hold non-finite values")
    learner.hidden.copy_(hidden)


def trained_actor(
    path_or_run: str | Path, form: Form = Form.chain, task: Callable[[Config], Config] | None = None
) -> tuple[Path, dict, Config, Actor]:
    """The actor of the checkpoint `path_or_run` names (a file, or a run directory's newest), built
    from the config saved with it, on the CPU, in evaluation mode.

    Args:
        path_or_run: a checkpoint file or a run directory.
        form: how its no-grad calls compute the first layers (`Form`).
        task: the saved config to the one the actor is built for and returned (evaluation on
            another task: `agents.evaluate.setup.fitted_task`); None keeps it.

    Returns:
        `(checkpoint path, payload, config, actor)`.

    Raises:
        CheckpointError: no checkpoint there, an unreadable one, a config this code cannot use, or
            an actor that does not fit its config.
    """
    path, payload = ckpt.load_latest(path_or_run)
    cfg = saved_config(path, payload)
    cfg = cfg if task is None else task(cfg)
    actor = make_actor(cfg.env_config(), cfg.model, form=form)
    try:
        actor.load_state_dict(payload["actor"])
    except RuntimeError as err:
        raise ckpt.CheckpointError(f"checkpoint {path}: its actor does not fit its config: {err}") from None
    return path, payload, cfg, actor.eval()
