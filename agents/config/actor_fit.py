"""Which tasks a trained actor can play: those where its input and output keep their shape.

Part of the config, not of `agents.evaluate.setup`: the config checks use it at load
(`run.evaluate_env`), and importing `agents.evaluate` (checkpoints, networks, the config) from them
would be an import cycle (`tests/test_import_graph.py`).
"""

from __future__ import annotations

import dataclasses

from agents.config.schema import ModelConfig
from uavsim.config import EnvConfig

ENV_KEYS = tuple(f.name for f in dataclasses.fields(EnvConfig))


def check_actor_fits(trained: EnvConfig, task: EnvConfig, model: ModelConfig) -> None:
    """A ValueError naming what differs where the actor trained on ``trained`` cannot play ``task``."""
    problems = []
    if task.local_obs_dim != trained.local_obs_dim:  # name the keys that shape the local observation
        shaping = ["obs_radius", "window_paths"] + (["state_pool"] if trained.comm_radius is not None else [])
        differ = [
            f"{k}={getattr(trained, k)}, not {getattr(task, k)}"
            for k in shaping
            if getattr(trained, k) != getattr(task, k)
        ]
        if (trained.comm_radius is None) != (task.comm_radius is None):
            differ.append(f"comm_radius={trained.comm_radius}, not {task.comm_radius} (the onboard memory's part)")
        problems.append(
            f"its input is a local observation of {trained.local_obs_dim} floats, this task's {task.local_obs_dim}: "
            + "; ".join(differ or [f"obs_radius={trained.obs_radius}"])
        )
    if task.num_actions != trained.num_actions:
        problems.append(f"it chooses among moves={trained.moves} moves, not moves={task.moves}")
    if model.agent_id and task.num_uavs != trained.num_uavs:
        problems.append(
            f"its input ends with a one-hot agent id sized to the training team of num_uavs={trained.num_uavs} "
            f"(model.agent_id=true), so it cannot tell {task.num_uavs} UAVs apart (a run with "
            "model.size_agnostic=true model.agent_id=false plays any team)"
        )
    if model.actor_shared_map and task.state_pool != trained.state_pool:
        problems.append(f"it reads the shared map in state_pool={trained.state_pool} blocks, not {task.state_pool}")
    if problems:
        raise ValueError(
            "the checkpoint's actor cannot play this task: "
            + "; ".join(problems)
            + " (evaluate with those keys as trained; grid size, rewards, steps and maps may change)"
        )
