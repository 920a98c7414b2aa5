"""The config's `env` section, and the groups of a mixed-size run.

`EnvSection` is `num_envs` plus every `uavsim.EnvConfig` field with its type and default (generated,
so the two never drift). `num_uavs`, `grid_height`, `grid_width` and `num_walls` may also be lists
(mixed training, `model.size_agnostic` only): one run then trains on every group of

    groups = product(num_uavs values, maps),  maps = zip(grid_height, grid_width, num_walls)

(a scalar pairs with every value of the lists), e.g. `num_uavs=[6, 8, 12]`,
`grid_height=grid_width=[28, 32, 36]`: 9 groups; with `num_walls=[2, 0, 2]` the 32x32 maps keep no
walls. Each group is one `UAVSwarmEnv`; `split_envs` shares `env.num_envs` between them.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import field
from typing import Any

from uavsim.config import EnvConfig

_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "str | None": str | None, "int | None": int | None}

AUTO = "auto"  # the value of a key the machine decides at start (`agents.run.machine_defaults`)

MAP_KEYS = ("grid_height", "grid_width", "num_walls")  # lists of these pair element by element
SIZE_KEYS = ("num_uavs", *MAP_KEYS)  # the keys that may be lists


def _env_section() -> type:
    """`EnvSection`: `num_envs` plus every `EnvConfig` field with the same type and default (`Any`
    for `SIZE_KEYS`, an int or a list of ints, which `check_sizes` checks)."""
    # num_envs: an int, or "auto" (chosen for the device at start)
    env_fields: list[tuple[str, Any, Any]] = [("num_envs", int | str, field(default=AUTO))]
    for f in dataclasses.fields(EnvConfig):
        kind = Any if f.name in SIZE_KEYS else _TYPES[f.type if isinstance(f.type, str) else f.type.__name__]
        env_fields.append((f.name, kind, field(default=f.default)))
    return dataclasses.make_dataclass("EnvSection", env_fields)


EnvSection = _env_section()


def _values(section, key: str) -> list[int]:
    value = getattr(section, key)
    return list(value) if isinstance(value, list | tuple) else [value]


def is_mixed(section) -> bool:
    """Whether any of `SIZE_KEYS` holds a list (of more than one value)."""
    return any(len(_values(section, key)) > 1 for key in SIZE_KEYS)


def check_sizes(section) -> None:
    """Each of `SIZE_KEYS` is an int or a non-empty list of ints, distinct but for `num_walls`; the
    lists of `MAP_KEYS` have one length, and no two groups are alike. Raises ValueError naming the key."""
    for key in SIZE_KEYS:
        values = _values(section, key)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise TypeError(f"config key 'env.{key}' must be an int or a list of ints, got {getattr(section, key)!r}")
        if not values:
            raise ValueError(f"config key 'env.{key}' must be an int or a non-empty list of ints, got []")
        if key != "num_walls" and len(set(values)) != len(values):
            raise ValueError(f"config key 'env.{key}' lists a value twice: {values!r}")
    lists = {key: _values(section, key) for key in MAP_KEYS if len(_values(section, key)) > 1}
    if len({len(v) for v in lists.values()}) > 1:
        named = " and ".join(f"'env.{key}'" for key in lists)
        got = " and ".join(repr(v) for v in lists.values())
        raise ValueError(
            f"config keys {named} are paired into maps (size, walls): their lists need one length, got {got}"
        )
    maps = _maps(section)
    if len(set(maps)) != len(maps):
        raise ValueError(
            f"config key 'env.num_walls' lists a value twice for one map size: maps (h, w, walls) {maps!r}; "
            "give each map size one value (agents.evaluate at one map size: --env num_walls=N)"
        )


def _maps(section) -> list[tuple[int, int, int]]:
    """`(grid_height, grid_width, num_walls)` of each map kind: the `MAP_KEYS` lists zipped."""
    values = [_values(section, key) for key in MAP_KEYS]
    count = max(len(v) for v in values)
    return [tuple(v[i % len(v)] for v in values) for i in range(count)]


def group_sizes(section) -> list[tuple[int, int, int, int]]:
    """`(num_uavs, grid_height, grid_width, num_walls)` of each group, in the module docstring's order."""
    return [(n, *m) for n, m in itertools.product(_values(section, "num_uavs"), _maps(section))]


def env_configs(section) -> list[EnvConfig]:
    """Each group's `EnvConfig` (one for a single-size run). Raises EnvConfig's errors."""
    base = dataclasses.asdict(section)
    base.pop("num_envs")
    return [EnvConfig.from_dict({**base, **dict(zip(SIZE_KEYS, sizes, strict=True))}) for sizes in group_sizes(section)]


def largest(configs: list[EnvConfig]) -> EnvConfig:
    """The group with the most UAVs and, among those, the largest map: every per-environment size
    (storage, state, memory) of a mixed run is at most its."""
    return max(configs, key=lambda c: (c.num_uavs, c.grid_height * c.grid_width))


def split_envs(num_envs: int, groups: int) -> list[int]:
    """`num_envs` shared by `groups` as evenly as possible, the first groups taking one more:
    10 over 3 -> [4, 3, 3]."""
    return [num_envs // groups + (g < num_envs % groups) for g in range(groups)]


def check_mixed(cfg) -> None:
    """What a mixed-size run (lists in `env`, `agents.config.env_section`) needs; ValueError naming the key."""
    m, groups = cfg.model, len(cfg.env_configs())
    if not m.size_agnostic:
        raise ValueError(
            "config keys 'env.num_uavs' / 'env.grid_height' / 'env.grid_width' / 'env.num_walls' may be lists only "
            "with model.size_agnostic=true (and model.agent_id=false): the networks' inputs must not depend on sizes"
        )
    if m.actor_shared_map:
        raise ValueError("config key 'model.actor_shared_map' must be false with mixed sizes (heading per map size)")
    if cfg.env.num_envs == AUTO:
        return  # checked once the machine has chosen it
    if cfg.env.num_envs < groups:
        raise ValueError(f"config key 'env.num_envs' must be >= the {groups} size groups, got {cfg.env.num_envs}")
    t = cfg.train
    for envs in set(cfg.group_num_envs()):  # each group's minibatches take whole steps (or chunks) of it
        units = t.num_steps // t.chunk_length * envs if m.recurrent else t.num_steps * envs
        if units % t.num_minibatches:
            raise ValueError(
                f"config key 'train.num_minibatches' must divide each size group's "
                f"{'sequences' if m.recurrent else 'num_steps*envs'} ({units} for a group of {envs} of "
                f"env.num_envs={cfg.env.num_envs} over {groups} groups), got {t.num_minibatches}"
            )
