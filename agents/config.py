"""The training configuration: a typed OmegaConf structured schema, YAML presets, dotted overrides.

`load_config("configs/default.yaml", ["train.amp=bf16", "env.num_envs=64"])` returns a `Config`
of plain dataclasses. OmegaConf checks every value's type against the schema; `check_config` then
checks ranges. Any bad input is a `ValueError` / `TypeError` that names the key:

    unknown key      -> ValueError("unknown config key 'train.lrr' ...")
    wrong type       -> TypeError("config key 'env.num_envs': Value 'abc' ... Integer")
    out of range     -> ValueError("config key 'train.clip_coef' must be finite and > 0, got -0.1")
    bool key         -> TypeError("override 'train.anneal_lr=2': train.anneal_lr must be true or false, got 2")
                        (true/false, also yes/no/on/off; OmegaConf alone would read any int as a bool)

The `env` section is every field of `uavsim.EnvConfig` (generated from it, so the two never drift)
plus `num_envs`. Counts of time are environment steps: one step of one environment.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError
from omegaconf.nodes import BooleanNode, EnumNode

from agents.env_section import AUTO, EnvSection, check_mixed, check_sizes, env_configs, is_mixed, largest, split_envs
from uavsim.config import EnvConfig


class Amp(str, enum.Enum):
    """Autocast mode: `off` (float32), `bf16` (CPU and GPU), `fp16` (with a GradScaler), or `auto`:
    chosen for the device at start (`agents.run.machine_defaults`)."""

    auto = "auto"
    off = "off"
    bf16 = "bf16"
    fp16 = "fp16"


class CriticKind(str, enum.Enum):
    """`mappo`: critic on the global state + the agent's local observation + its id (agent-specific
    global state). `ippo`: critic on the local observation + id only."""

    mappo = "mappo"
    ippo = "ippo"


class Teacher(str, enum.Enum):
    """The scripted planner the actor imitates before PPO (`agents.algo.imitation`); `none`: no warm start."""

    none = "none"
    greedy = "greedy"
    coordinated = "coordinated"


class Activation(str, enum.Enum):
    tanh = "tanh"
    relu = "relu"


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")  # what `run.device` (and `agents.evaluate --device`) accept


@dataclass
class ModelConfig:
    hidden_size: int = 128
    num_layers: int = 2  # hidden layers of each MLP
    activation: Activation = Activation.tanh
    critic: CriticKind = CriticKind.mappo
    agent_id: bool = True  # one-hot agent id in the actor's and the critic's input
    # K > 0 (with agent_id=false): a one-hot of the index mod K, K wide at any team size; 0: none
    agent_roles: int = 0
    # inputs that do not depend on the team or the map size (needs agent_id=false): the mappo
    # critic sees the UAVs as a density map instead of a list of positions; allows mixed sizes
    size_agnostic: bool = False
    # the actor also sees the shared coverage map (pooled map + heading); on in shared_map.yaml
    actor_shared_map: bool = False
    recurrent: bool = False  # a GRU between the actor's encoder and its head (rMAPPO)
    recurrent_size: int = 0  # model.recurrent: the GRU's units; 0 for hidden_size

    def id_width(self, num_agents: int) -> int:
        """Columns of the id one-hot in the networks' first layers for a team of `num_agents`."""
        return num_agents if self.agent_id else self.agent_roles

    @property
    def gru_units(self) -> int:
        """Units of the recurrent actor's GRU (the size of a UAV's hidden state)."""
        return self.recurrent_size or self.hidden_size


@dataclass
class TrainConfig:
    total_env_steps: int = 2_000_000
    num_steps: int = 64  # rollout length T per iteration; a batch is num_steps x num_envs x num_uavs
    update_epochs: int = 4
    num_minibatches: int = 4  # each takes whole environment steps (all UAVs of a step together)
    actor_lr: float = 5e-4
    critic_lr: float = 5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    clip_vloss: bool = True
    vf_clip_coef: float = 0.2  # on the normalized value scale when value_norm is on
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5  # clipped separately for the actor and the critic
    norm_adv: bool = True
    value_norm: bool = True
    value_norm_beta: float = 0.995  # per-iteration decay of the running return statistics
    amp: Amp = Amp.auto  # auto: bf16 where the device computes it natively, fp16 on older GPUs, else off
    compile: bool = False  # torch.compile the minibatch loss (forward + backward); CPU: needs a C++ compiler
    # the rollout step as one captured graph (CUDA graphs on a GPU); slow to compile on a CPU
    compile_rollout: bool = False
    # fraction of the iterations over which the actor's lr ramps up from 0 (the critic's does not)
    actor_warmup: float = 0.0
    # weight of KL(clone || actor) on the rollout's states in PPO's loss (needs imitation.teacher)
    clone_kl_coef: float = 0.0
    chunk_length: int = 16  # model.recurrent: steps of back-propagation through time per sequence (divides num_steps)
    max_bad_iterations: int = 3  # consecutive bad iterations -> stop (agents.run.control.iteration_problem)


@dataclass
class ImitationConfig:
    """A warm start: the actor imitates a scripted planner before PPO (`agents.algo.imitation`)."""

    teacher: Teacher = Teacher.none  # none | greedy | coordinated
    env_steps: int = 81_920  # demonstration steps (environments x steps) per rank
    epochs: int = 20  # passes of behaviour cloning over the demonstrations
    lr: float = 1e-3
    minibatch_steps: int = 512  # environment steps (all their UAVs) per cloning minibatch
    dagger_rounds: int = 0  # rounds in which the cloned actor plays and the planner labels its states
    dagger_env_steps: int = 40_960  # the actor's steps per round (environments x steps) per rank
    dagger_epochs: int = 10  # passes over all labels after each round


@dataclass
class RunConfig:
    dir: str | None = None  # None -> runs/mappo-<seed>-<time>
    device: str = "auto"  # auto (cuda if available, else cpu) | cpu | cuda | cuda:N
    torch_threads: int | str = AUTO  # auto: the cores this process may use; 0 leaves torch's default
    retain_host_memory: bool = True  # glibc keeps freed memory: no page faults on each step's big tensors
    deterministic: bool = False  # torch.use_deterministic_algorithms; exact resume on CPU
    checkpoint_interval: int = 500_000  # env steps between checkpoints; 0: only the final one
    keep_checkpoints: int = 3
    eval_interval: int = 1_000_000  # env steps between evaluation images in TensorBoard; 0: off
    eval_envs: int = 32  # environments of the in-training evaluation
    progress: bool = True  # tqdm progress bar


@dataclass
class Config:
    seed: int = 0
    env: EnvSection = field(default_factory=EnvSection)  # type: ignore[valid-type]
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    imitation: ImitationConfig = field(default_factory=ImitationConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def env_config(self) -> EnvConfig:
        """The task; a mixed-size run's largest group (`agents.env_section.largest`)."""
        return largest(self.env_configs())

    def env_configs(self) -> list[EnvConfig]:
        """Each group's task (`agents.env_section`): one for a single-size run."""
        return env_configs(self.env)

    def group_num_envs(self) -> list[int]:
        """Environments of each group (`agents.env_section.split_envs`)."""
        return split_envs(self.num_envs, len(self.env_configs()))

    @property
    def resolved(self) -> bool:
        """Whether every `auto` key holds its value for this machine (`agents.run.machine_defaults`)."""
        return AUTO not in (self.env.num_envs, self.run.torch_threads) and self.train.amp != Amp.auto

    # Derived values: computed, never configured (the batch geometry needs a resolved env.num_envs).
    @property
    def num_envs(self) -> int:
        """`env.num_envs`, once resolved (`agents.run.machine_defaults.resolve`)."""
        if not isinstance(self.env.num_envs, int):
            raise ValueError(
                f"env.num_envs is {self.env.num_envs!r}: resolve the config for a device first "
                "(agents.run.machine_defaults.resolve) or set env.num_envs"
            )
        return self.env.num_envs

    @property
    def batch_size(self) -> int:
        """Samples per iteration: num_steps x num_envs x num_uavs, summed over groups (one per agent-step)."""
        groups = zip(self.group_num_envs(), self.env_configs())
        return self.train.num_steps * sum(b * c.num_uavs for b, c in groups)

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.train.num_minibatches

    @property
    def env_steps_per_iteration(self) -> int:
        return self.train.num_steps * self.num_envs

    def num_iterations(self, world_size: int = 1) -> int:
        """Iterations of the run when `world_size` torchrun ranks each play `env.num_envs`."""
        return max(1, self.train.total_env_steps // (self.env_steps_per_iteration * world_size))


def _wrap(err: OmegaConfBaseException, source: str, key_hint: str = "?") -> Exception:
    key = getattr(err, "full_key", None) or key_hint
    msg = str(err).splitlines()[0]
    if isinstance(err, ConfigKeyError) or "not in" in msg:
        return ValueError(f"unknown config key '{key}' (from {source}): {msg}")
    if isinstance(err, ValidationError) and "Invalid value" not in msg:
        return TypeError(f"config key '{key}' (from {source}): {msg}")
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
            elif isinstance(value, bool) and isinstance(child, EnumNode):
                d[key] = "off" if value is False else "on"
            elif isinstance(child, BooleanNode) and not _bool_like(value):
                raise TypeError(f"{source}: {prefix}{key} must be true or false, got {value!r}")

    walk(schema, data, "")
    return OmegaConf.create(data)


def _merge(base, other, source: str, key_hint: str = "?"):
    try:
        other = _fix_yaml_scalars(base, other, source)
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as err:
        raise _wrap(err, source, key_hint) from None


def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = (), base: Config | dict | None = None
) -> Config:
    """Schema defaults (or `base`), then the YAML file at `path`, then the overrides, checked.

    Args:
        path: a YAML preset (None: none).
        overrides: `key=value` items with dotted keys (`train.amp=bf16`).
        base: a config, or its `to_dict`, in place of the schema's defaults (a checkpoint's).

    Raises:
        ValueError, TypeError: a bad key, value, file or override, as the module docstring lists.
    """
    cfg = OmegaConf.structured(Config)
    if base is not None:
        base_dict = to_dict(base) if isinstance(base, Config) else base
        cfg = _merge(cfg, OmegaConf.create(base_dict), "the saved config")
    if path is not None:
        path = Path(path)
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
        cfg = _merge(cfg, OmegaConf.from_dotlist([item]), f"override {item!r}", item.split("=", 1)[0])
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        raise _wrap(err, "the config") from None
    check_config(obj)
    return obj


def to_dict(cfg: Config) -> dict:
    """Plain nested dict with enums as strings (what checkpoints and config.yaml hold)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg)))


def check_config(cfg: Config) -> None:
    """Range checks the types cannot express; a `ValueError` (or the env section's `TypeError`) names the key."""

    def need(ok: bool, key: str, expected: str) -> None:
        if not ok:
            section, name = key.split(".") if "." in key else (None, key)
            value = getattr(getattr(cfg, section), name) if section else getattr(cfg, name)
            raise ValueError(f"config key '{key}' must be {expected}, got {value!r}")

    t, r, m = cfg.train, cfg.run, cfg.model
    need(0 <= cfg.seed < 2**31, "seed", "in [0, 2**31)")
    need(
        cfg.env.num_envs == AUTO or (isinstance(cfg.env.num_envs, int) and cfg.env.num_envs >= 1),
        "env.num_envs",
        "auto or an int >= 1",
    )
    need(m.hidden_size >= 1, "model.hidden_size", ">= 1")
    need(m.recurrent_size >= 0, "model.recurrent_size", ">= 0 (0: model.hidden_size)")
    need(m.num_layers >= 1, "model.num_layers", ">= 1")
    need(t.total_env_steps >= 1, "train.total_env_steps", ">= 1")
    need(t.num_steps >= 1, "train.num_steps", ">= 1")
    need(t.update_epochs >= 1, "train.update_epochs", ">= 1")
    need(t.num_minibatches >= 1, "train.num_minibatches", ">= 1")
    for key in ("actor_lr", "critic_lr", "adam_eps", "clip_coef", "vf_clip_coef", "max_grad_norm"):
        need(0 < getattr(t, key) < math.inf, f"train.{key}", "finite and > 0")
    for key in ("ent_coef", "vf_coef"):
        need(0 <= getattr(t, key) < math.inf, f"train.{key}", "finite and >= 0")
    need(0 <= t.gamma <= 1, "train.gamma", "in [0, 1]")
    need(0 <= t.gae_lambda <= 1, "train.gae_lambda", "in [0, 1]")
    need(0 < t.value_norm_beta < 1, "train.value_norm_beta", "in (0, 1)")
    need(t.max_bad_iterations >= 1, "train.max_bad_iterations", ">= 1")
    need(0 <= t.actor_warmup <= 1, "train.actor_warmup", "in [0, 1]")
    need(0 <= t.clone_kl_coef < math.inf, "train.clone_kl_coef", "finite and >= 0")
    im = cfg.imitation
    need(im.env_steps >= 1, "imitation.env_steps", ">= 1")
    need(im.epochs >= 1, "imitation.epochs", ">= 1")
    need(0 < im.lr < math.inf, "imitation.lr", "finite and > 0")
    need(im.minibatch_steps >= 1, "imitation.minibatch_steps", ">= 1")
    need(im.dagger_rounds >= 0, "imitation.dagger_rounds", ">= 0")
    need(im.dagger_env_steps >= 1, "imitation.dagger_env_steps", ">= 1")
    need(im.dagger_epochs >= 1, "imitation.dagger_epochs", ">= 1")
    if t.clone_kl_coef > 0:
        need(
            im.teacher != Teacher.none,
            "train.clone_kl_coef",
            "0 without imitation.teacher (there is no clone to stay near)",
        )
    if im.teacher != Teacher.none:
        need(not m.recurrent, "imitation.teacher", "none with model.recurrent=true (cloning fits a feed-forward actor)")
    need(
        r.torch_threads == AUTO or (isinstance(r.torch_threads, int) and r.torch_threads >= 0),
        "run.torch_threads",
        "auto or an int >= 0 (0: torch's own default)",
    )
    need(r.checkpoint_interval >= 0, "run.checkpoint_interval", ">= 0")
    need(r.keep_checkpoints >= 1, "run.keep_checkpoints", ">= 1")
    need(r.eval_interval >= 0, "run.eval_interval", ">= 0")
    need(r.eval_envs >= 1, "run.eval_envs", ">= 1")
    need(DEVICE_PATTERN.fullmatch(r.device) is not None, "run.device", "auto, cpu, cuda or cuda:N")
    need(r.dir is None or r.dir.strip() != "", "run.dir", "a directory, or null for runs/mappo-<seed>-<time>")
    check_sizes(cfg.env)
    try:
        cfg.env_configs()  # EnvConfig's own range checks, for every group
    except (TypeError, ValueError) as err:
        raise type(err)(f"config section 'env': {err}") from None
    need(m.agent_roles >= 0, "model.agent_roles", ">= 0 (0: no roles)")
    need(not (m.agent_roles and m.agent_id), "model.agent_roles", "0 with model.agent_id=true (roles replace the id)")
    if m.size_agnostic:
        need(
            not m.agent_id, "model.agent_id", "false with model.size_agnostic=true (a one-hot id is sized to the team)"
        )
    if is_mixed(cfg.env):
        check_mixed(cfg)
    need(t.chunk_length >= 1, "train.chunk_length", ">= 1")
    if m.recurrent:
        need(
            t.num_steps % t.chunk_length == 0,
            "train.chunk_length",
            f"a divisor of train.num_steps={t.num_steps} (the rollout is cut into whole chunks)",
        )
    if cfg.env.num_envs != AUTO and not is_mixed(cfg.env):  # else checked once the machine has chosen it
        need(
            cfg.env_steps_per_iteration % t.num_minibatches == 0,
            "train.num_minibatches",
            "a divisor of num_steps*num_envs (minibatches take whole environment steps) = "
            f"{cfg.env_steps_per_iteration}",
        )
        if m.recurrent:
            sequences = t.num_steps // t.chunk_length * cfg.env.num_envs
            need(
                sequences % t.num_minibatches == 0,
                "train.num_minibatches",
                "a divisor of the number of sequences, (num_steps / chunk_length) * num_envs = "
                f"{sequences} (model.recurrent: minibatches take whole chunks of one environment)",
            )
