"""The scripted policies by name: what `python -m uavsim.play --policy`, `agents.evaluate`'s
baselines and the imitation warm start's teachers (`imitation.teacher`) choose from."""

from __future__ import annotations

from uavsim.coordinated import CoordinatedFrontierPolicy
from uavsim.env import UAVSwarmEnv
from uavsim.policies import GreedyFrontierPolicy, RandomPolicy

SCRIPTED = {"random": RandomPolicy, "greedy": GreedyFrontierPolicy, "coordinated": CoordinatedFrontierPolicy}


def make_scripted(name: str, env: UAVSwarmEnv, seed: int = 0, planner_seed: int = 0):
    """The scripted policy `name` for `env`.

    Args:
        name: a key of `SCRIPTED`.
        env: the env it plays.
        seed: draws the random policy's actions.
        planner_seed: the frontier planners' tie-breaks (by default their own fixed seed: their
            episodes on a set of maps depend on the maps only, whatever seed the caller evaluates with).

    Returns:
        `policy(env) -> actions [B, N]` int64.

    Raises:
        ValueError: an unknown `name`.
    """
    if name not in SCRIPTED:
        raise ValueError(f"unknown scripted policy {name!r}; expected one of {sorted(SCRIPTED)}")
    return SCRIPTED[name](env, seed=seed if name == "random" else planner_seed)
