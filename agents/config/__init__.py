"""The training configuration: a typed OmegaConf structured schema, YAML presets, dotted overrides.

`load_config("configs/default.yaml", ["train.amp=bf16", "env.num_envs=64"])` returns a `Config`
of plain dataclasses. OmegaConf checks every value's type against the schema; `check_config` then
checks ranges. Any bad input is a `ValueError` / `TypeError` that names the key:

    unknown key      -> ValueError("unknown config key 'train.lrr' ...")
    wrong type       -> TypeError("config key 'env.num_envs': Value 'abc' ... Integer")
    out of range     -> ValueError("config key 'train.clip_coef' must be finite and > 0, got -0.1")
    bool key         -> TypeError("override 'train.anneal_lr=2': train.anneal_lr must be true or false, got 2")
                        (true/false, also yes/no/on/off; OmegaConf alone would read any int as a bool)

The schema is in `agents.config.schema`, the range checks in `agents.config.checks`, the `env`
section and a mixed-size run's groups in `agents.config.env_section`, which tasks a trained actor
can play in `agents.config.actor_fit`; their public names are imported from here too (they import
each other, never this file, so the package has no import cycle). The `env` section is every field
of `uavsim.EnvConfig` (generated from it, so the two never drift) plus `num_envs`. Counts of time
are environment steps: one step of one environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError
from omegaconf.nodes import BooleanNode, EnumNode, StringNode

from agents.config.checks import check_config
from agents.config.env_section import AUTO
from agents.config.schema import (
    DEVICE_PATTERN,
    Activation,
    Amp,
    Config,
    CriticKind,
    ImitationConfig,
    ModelConfig,
    Recipe,
    RunConfig,
    Teacher,
    TrainConfig,
)

# the schema and the checks live in this package's modules; their names are imported from here
__all__ = [
    "AUTO",
    "DEVICE_PATTERN",
    "Activation",
    "Amp",
    "Config",
    "CriticKind",
    "ImitationConfig",
    "ModelConfig",
    "Recipe",
    "RunConfig",
    "Teacher",
    "TrainConfig",
    "check_config",
    "load_config",
    "to_dict",
    "to_yaml",
]


def _wrap(err: OmegaConfBaseException, source: str, key_hint: str = "?") -> Exception:
    key = getattr(err, "full_key", None) or key_hint
    msg = str(err).splitlines()[0]
    if isinstance(err, ConfigKeyError) or "not in" in msg:
        return ValueError(f"unknown config key '{key}' (from {source}): {msg}")
    if isinstance(err, ValidationError) and "Invalid value" not in msg:
        return TypeError(f"config key '{key}' (from {source}): {msg}")
    if "is not a ListConfig" in msg:  # OmegaConf's words for a plain value given to a list key
        msg = f"expected a list, on the command line {key}=[...] ({msg})"
    return ValueError(f"config key '{key}' (from {source}): {msg}")


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off"}  # what OmegaConf reads as a bool, besides bools


def _bool_like(value: object) -> bool:
    """A value a bool key may take: a bool, 0 or 1, a bool word, or an `${...}` interpolation
    (resolved and type-checked by OmegaConf later)."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return True
    return isinstance(value, str) and (value.lower() in _BOOL_WORDS or value.startswith("${"))


def _fix_yaml_scalars(schema: DictConfig, other: DictConfig, source: str) -> DictConfig:
    """YAML 1.1 reads `off` as False: give enum-typed keys (`train.amp=off`) their string back.
    And OmegaConf reads any int as a bool (`train.anneal_lr=2` would be True): refuse that."""
    data = OmegaConf.to_container(other)

    def walk(node: DictConfig, d: dict, prefix: str) -> None:
        for key, value in d.items():
            child = node._get_node(key) if isinstance(node, DictConfig) and key in node else None
            if isinstance(value, dict) and isinstance(child, DictConfig):
                walk(child, value, f"{prefix}{key}.")
            elif isinstance(child, DictConfig) and value is not None and not isinstance(value, dict):  # `env: 5`
                raise TypeError(
                    f"config key '{prefix}{key}' (from {source}) is a section of keys, got {value!r}; "
                    f"e.g. {key}: {{KEY: VALUE}} in YAML, or {prefix}{key}.KEY=VALUE on the command line"
                )
            elif isinstance(value, bool) and isinstance(child, EnumNode):  # YAML 1.1 reads `off` as false
                word = "off" if value is False else "on"
                if word in child.enum_type.__members__:  # else the error quotes what the user wrote, not `off`
                    d[key] = word
            elif isinstance(child, BooleanNode) and not _bool_like(value):
                raise TypeError(f"{source}: {prefix}{key} must be true or false, got {value!r}")

    walk(schema, data, "")
    return OmegaConf.create(data)


_YAML_NULLS = {"", "~", "null", "Null", "NULL"}  # what YAML reads as null: a string key's None (run.dir=null)


def _override(cfg: DictConfig, item: str) -> DictConfig:
    """The override ``key=value`` as a config. YAML 1.1 reads ``2024_01_05`` as an int, ``010`` as 8 and ``1:30``
    as 90: a string-typed key (``run.dir``, ``env.maps``, ``run.device``) takes the text as written instead,
    unless it is a YAML null or quoted (then YAML reads it: ``run.dir='"a: b"'``)."""
    key, text = item.split("=", 1)
    node = cfg
    for part in key.split("."):
        node = node._get_node(part) if isinstance(node, DictConfig) and part in node else None
    quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
    if not isinstance(node, StringNode) or text in _YAML_NULLS or quoted or text.startswith("${"):
        return OmegaConf.from_dotlist([item])
    nested: object = text
    for part in reversed(key.split(".")):
        nested = {part: nested}
    return OmegaConf.create(nested)


def _merge(base, other, source: str, key_hint: str = "?"):
    try:
        other = _fix_yaml_scalars(base, other, source)
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as err:
        raise _wrap(err, source, key_hint) from None


def load_config(
    path: str | Path | Sequence[str | Path] | None = None,
    overrides: Sequence[str] = (),
    base: Config | dict | None = None,
) -> Config:
    """Schema defaults (or `base`), then the YAML file at `path`, then the overrides, checked.

    Args:
        path: a YAML preset, or several laid over each other in order (a preset, then a recipe:
            `agents.config.recipe`); None: none.
        overrides: `key=value` items with dotted keys (`train.amp=bf16`).
        base: a config, or its `to_dict`, in place of the schema's defaults (a checkpoint's).

    Raises:
        ValueError, TypeError: a bad key, value, file or override, as the module docstring lists.
    """
    cfg = OmegaConf.structured(Config)
    if base is not None:
        base_dict = to_dict(base) if isinstance(base, Config) else base
        cfg = _merge(cfg, OmegaConf.create(base_dict), "the saved config")
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    for path in map(Path, paths):
        if path.is_dir():
            raise ValueError(f"config file {path} is a directory, expected a YAML file (e.g. configs/default.yaml)")
        if not path.is_file():
            raise ValueError(f"config file {path} does not exist")
        try:
            loaded = OmegaConf.load(path)
        except yaml.YAMLError as err:
            raise ValueError(f"config file {path} is not valid YAML: {str(err).splitlines()[0]}") from None
        except (UnicodeDecodeError, OSError) as err:
            raise ValueError(f"config file {path} cannot be read as text: {err}") from None
        if not isinstance(loaded, DictConfig):
            raise ValueError(f"config file {path} must hold a mapping at the top level")
        cfg = _merge(cfg, loaded, str(path))
    for item in overrides:
        if not isinstance(item, str) or "=" not in item or item.startswith("="):
            raise ValueError(f"override {item!r} must look like key=value (e.g. train.amp=bf16)")
        cfg = _merge(cfg, _override(cfg, item), f"override {item!r}", item.split("=", 1)[0])
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        raise _wrap(err, "the config") from None
    obj = _expand_home(obj)
    check_config(obj)
    return obj


def _expand_home(cfg: Config) -> Config:
    """`cfg` with a leading `~` of `run.dir` and `env.maps` the user's home: no shell expands one typed after
    `key=` (bash only in a variable assignment; PowerShell never for a native command's argument)."""
    home = {
        name: os.path.expanduser(v) if isinstance(v, str) else v
        for name, v in (("dir", cfg.run.dir), ("maps", cfg.env.maps))
    }
    return dataclasses.replace(
        cfg,
        run=dataclasses.replace(cfg.run, dir=home["dir"]),
        env=dataclasses.replace(cfg.env, maps=home["maps"]),
    )


def to_dict(cfg: Config) -> dict:
    """Plain nested dict with enums as strings (what checkpoints and config.yaml hold)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg)))
