"""What `python -m agents.evaluate` sets up before it plays: the checkpoint's actor, the output path,
and the task, which is the run's env config with `--env KEY=VALUE` overrides and `--maps PATH`.

`--env` takes any `uavsim.EnvConfig` field and checks it as training checks `env.KEY=VALUE`
overrides (`agents.config.load_config`): an unknown key or a bad value is a ValueError naming it.
`--maps` sets `EnvConfig.maps`: every policy plays the same maps of that set (`uavsim.maps`).

The trained actor plays a task only where its input and output keep their shape: the local window
(`obs_radius`), the actions (`moves`), the one-hot agent id sized to the training team
(`num_uavs`, when `model.agent_id`), the shared map's blocks (`state_pool`, when
`model.actor_shared_map`). The grid's size, the team's size without an agent id (a
`model.size_agnostic` run's actor: any team and map), rewards, steps and maps may change. A task it
cannot play is a ValueError that says why, before anything runs. A mixed-size run's task is its
largest group (`agents.config.Config.env_config`) unless `--env` sets the sizes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.algo.layers import Form
from agents.algo.networks import Actor
from agents.config import Config, check_config, load_config
from agents.config.actor_fit import ENV_KEYS, check_actor_fits
from agents.run.learner_state import trained_actor
from agents.run.paths import file_problem
from agents.run.resume import owning_run_dir
from uavsim.config import EnvConfig
from uavsim.maps import MapSet, load_map_set, map_indices, maps_value


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """`--env KEY=VALUE ...` and `--maps PATH`."""
    parser.add_argument(
        "--env",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="overrides of the run's env config, any EnvConfig field (e.g. --env grid_height=48 grid_width=48); "
        "baselines play the same task",
    )
    parser.add_argument(
        "--maps",
        default=None,
        metavar="PATH",
        help="play a map set: a map file or a folder of them (.txt, .npy, .png; uavsim.maps) of the env's grid size",
    )


def played_env(cfg: Config, env_items: Sequence[str]) -> list[str]:
    """The env overrides a trained policy plays with: the run's ``run.evaluate_env``, then ``env_items``."""
    return [*cfg.run.evaluate_env, *env_items]


def with_task(cfg: Config, env_items: Sequence[str], maps: str | None) -> Config:
    """The run's config ``cfg`` with ``--env`` items and ``--maps`` applied to its env section, checked.

    Raises:
        ValueError, TypeError: an item that is not KEY=VALUE, a key that is no EnvConfig field, a bad value.
    """
    for item in env_items:
        key = item.split("=", 1)[0].strip()
        if "=" not in item or not key:
            raise ValueError(f"--env {item!r}: expected KEY=VALUE (e.g. num_uavs=16)")
        if key not in ENV_KEYS:  # env.num_envs too: evaluation plays --episodes environments
            raise ValueError(f"--env {item!r}: unknown env key {key!r}; EnvConfig keys: {', '.join(ENV_KEYS)}")
    # a map path is set as is, not read as YAML (`#`, `: ` and quotes in a path would be read as syntax)
    given_maps = [maps_value(item.split("=", 1)[1]) for item in env_items if item.split("=", 1)[0].strip() == "maps"]
    env_items = [item for item in env_items if item.split("=", 1)[0].strip() != "maps"]
    cfg = load_config(None, [f"env.{item}" for item in env_items], base=cfg)
    for item in env_items:  # a list would train groups; an evaluation plays one task (the largest group's, silently)
        key = item.split("=", 1)[0].strip()
        if isinstance(getattr(cfg.env, key), list | tuple):
            raise ValueError(f"--env {item!r}: one value per key (an evaluation plays one task), got a list")
    if isinstance(cfg.env.num_walls, list | tuple):  # the largest group's would be an arbitrary pick
        raise ValueError(
            f"the run trained with env.num_walls={cfg.env.num_walls!r} (walls on some maps): say which maps "
            "to evaluate on, e.g. --env num_walls=0 (plain maps)"
        )
    if maps is not None or given_maps:  # --maps last; `--env maps=null`: generated maps (a run trained on a map set)
        cfg.env.maps = maps if maps is not None else given_maps[-1]
        check_config(cfg)
    return cfg


# The two map sets of the protocol (docs/training.md, "Protocol"): recipes are chosen on the
# validation maps; the figures a README reports come from the test maps, played once a recipe is
# fixed. No training run uses these seeds (training envs take `seed`, 0 to 4 in the presets' runs).
SPLITS = {"validation": (12345, 256), "test": (20261126, 512)}  # split: (env seed, maps)


def split_of(seed: int, episodes: int) -> str | None:
    """The split whose maps ``(seed, episodes)`` are, however they were named (``--split`` or the numbers)."""
    return next((name for name, maps in SPLITS.items() if maps == (seed, episodes)), None)


def add_protocol_arguments(p: argparse.ArgumentParser) -> None:
    """``--split``, ``--episodes`` and ``--seed``: which maps a policy is scored on."""
    p.add_argument(
        "--split",
        choices=list(SPLITS),
        default="validation",
        help="validation: seed 12345, 256 maps (choose recipes here); test: seed 20261126, 512 maps (report these)",
    )
    p.add_argument("--episodes", type=int, default=None, help="maps to play (default: the split's)")
    p.add_argument("--seed", type=int, default=None, help="the maps' env seed (default: the split's)")


def split_defaults(args: argparse.Namespace) -> None:
    """Fill ``args.seed`` and ``args.episodes`` left unset from ``args.split``."""
    seed, episodes = SPLITS[args.split]
    args.seed = seed if args.seed is None else args.seed
    args.episodes = episodes if args.episodes is None else args.episodes


def fitted_task(cfg: Config, env_items: Sequence[str], maps: str | None) -> Config:
    """`with_task` with the run's ``run.evaluate_env`` items first, then ``env_items`` (which win), and
    a ValueError where the actor trained on ``cfg``'s task cannot play the new one."""
    task = with_task(cfg, played_env(cfg, env_items), maps)
    check_actor_fits(cfg.env_config(), task.env_config(), task.model)
    note = untrained_roles_note(cfg, task)
    if note:
        print(note, file=sys.stderr)
    return task


def untrained_roles_note(trained: Config, task: Config) -> str | None:
    """A line where the played team holds `model.agent_roles` roles the run's teams never had (UAV i plays role
    i mod K: a run of 3- and 5-UAV teams never trained roles 5-7, which a 7-UAV team plays); None elsewhere."""
    k = task.model.agent_roles
    if not k or task.model.agent_id:
        return None
    teams = [trained.env.num_uavs] if isinstance(trained.env.num_uavs, int) else list(trained.env.num_uavs)
    played = task.env.num_uavs if isinstance(task.env.num_uavs, int) else max(task.env.num_uavs)
    seen, playing = min(max(teams), k), min(played, k)
    if playing <= seen:
        return None
    return (
        f"note: {played} UAVs play roles 0-{playing - 1} of model.agent_roles={k}, but the run trained teams of "
        f"{', '.join(map(str, teams))} UAVs: roles {seen}-{playing - 1} were never trained (docs/training.md, roles)"
    )


def episode_maps(env_cfg: EnvConfig, episodes: int, seed: int) -> tuple[MapSet, np.ndarray]:
    """``(the map set, [episodes] int64 its map index for each)``: which map episode 0 of
    environments 0 .. episodes-1 of ``seed`` plays (``env_cfg.maps`` set)."""
    maps = load_map_set(env_cfg.maps, env_cfg)  # also reports a bad set before any episode runs
    return maps, map_indices(seed, np.arange(episodes), 0, len(maps))


def maps_meta(env_cfg: EnvConfig, episodes: int, seed: int) -> dict | None:
    """What the evaluation JSON records of a map set: its source, its files and how many of the
    ``episodes`` (episode 0 of environments 0 .. episodes-1 of ``seed``) play each; None without one."""
    if env_cfg.maps is None:
        return None
    maps, picked = episode_maps(env_cfg, episodes, seed)
    return {
        "source": env_cfg.maps,
        "files": [str(f) for f in maps.files],
        "episodes_per_map": np.bincount(picked, minlength=len(maps)).tolist(),
    }


def load_setup(args: argparse.Namespace) -> tuple[Path, dict, EnvConfig, Actor, Path, dict]:
    """``(checkpoint file, its payload, the task, the actor on the CPU, the JSON path, the task's
    meta)`` for `agents.evaluate`'s parsed ``args``.

    Raises:
        ValueError, TypeError: a bad checkpoint, task (`with_task`, `check_actor_fits`, a bad map set)
            or output path.
    """
    path, payload, cfg, actor = trained_actor(
        args.checkpoint, Form.epilogue, task=lambda saved: fitted_task(saved, args.env, args.maps)
    )
    env_cfg = cfg.env_config()
    out = Path(args.out) if args.out else (owning_run_dir(path) or path.parent) / "eval.json"
    problem = file_problem(out)
    if problem:
        raise ValueError(f"--out: {problem}")
    if out.suffix.lower() in (".gif", ".png"):  # the episode's GIF and PNG go beside the JSON: <stem>.gif/.png
        raise ValueError(f"--out {out}: the results' JSON path, not a {out.suffix} (its images are written beside it)")
    if out.resolve() == path.resolve() or (out.is_file() and out.suffix.lower() != ".json"):
        raise ValueError(f"--out {out}: an existing file that is not a results' JSON (the checkpoint?); name another")
    if args.maps is None and env_cfg.maps is not None and not Path(env_cfg.maps).exists():
        given = any(item.split("=", 1)[0].strip() == "maps" for item in args.env or ())
        if given:  # the user's own --env, not the run's set
            raise ValueError(f"--env maps={env_cfg.maps} is not found from {Path.cwd()}")
        relative = " (a path relative to where the run trained)" if not Path(env_cfg.maps).is_absolute() else ""
        raise ValueError(
            f"the run's map set env.maps={env_cfg.maps} is not found from {Path.cwd()}{relative}: pass --maps PATH"
        )
    overrides = [*played_env(cfg, args.env), *([f"maps={args.maps}"] if args.maps is not None else [])]
    meta = {"env_overrides": overrides, "maps": maps_meta(env_cfg, args.episodes, args.seed)}
    return path, payload, env_cfg, actor, out, meta
