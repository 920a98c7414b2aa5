"""The training configuration's range checks (`check_config`): what the schema's types cannot express."""

from __future__ import annotations

import enum
import math

from agents.config.actor_fit import ENV_KEYS, check_actor_fits
from agents.config.env_section import AUTO, check_mixed, check_sizes, is_mixed
from agents.config.schema import DEVICE_PATTERN, Config, Teacher


def auto_or_at_least(value: object, low: int) -> bool:
    """Whether an `auto` key holds `auto` or an int >= `low`."""
    return value == AUTO or (isinstance(value, int) and value >= low)


def check_config(cfg: Config) -> None:
    """Range checks the types cannot express; a `ValueError` (or the env section's `TypeError`) names the key."""

    def need(ok: bool, key: str, expected: str) -> None:
        if not ok:
            section, name = key.split(".") if "." in key else (None, key)
            value = getattr(getattr(cfg, section), name) if section else getattr(cfg, name)
            shown = value.value if isinstance(value, enum.Enum) else value  # greedy, not <Teacher.greedy: 'greedy'>
            raise ValueError(f"config key '{key}' must be {expected}, got {shown!r}")

    t, r, m = cfg.train, cfg.run, cfg.model
    need(0 <= cfg.seed < 2**31, "seed", "in [0, 2**31)")
    need(auto_or_at_least(cfg.env.num_envs, 1), "env.num_envs", "auto or an int >= 1")
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
    need(im.steps_per_env >= 0, "imitation.steps_per_env", ">= 0 (0: the task's max_steps)")
    need(0 <= im.min_accuracy_gain < 1, "imitation.min_accuracy_gain", "in [0, 1) (0: every epoch)")
    need(0 < im.lr < math.inf, "imitation.lr", "finite and > 0")
    need(im.minibatch_steps >= 1, "imitation.minibatch_steps", ">= 1")
    need(im.dagger_rounds >= 0, "imitation.dagger_rounds", ">= 0")
    need(im.dagger_env_steps >= 1, "imitation.dagger_env_steps", ">= 1")
    need(im.dagger_epochs >= 1, "imitation.dagger_epochs", ">= 1")
    check_evaluate_env(cfg)
    if t.clone_kl_coef > 0:
        need(
            im.teacher != Teacher.none,
            "train.clone_kl_coef",
            "0 without imitation.teacher (there is no clone to stay near)",
        )
    if im.teacher != Teacher.none:
        need(not m.recurrent, "imitation.teacher", "none with model.recurrent=true (cloning fits a feed-forward actor)")
    need(auto_or_at_least(r.torch_threads, 0), "run.torch_threads", "auto or an int >= 0 (0: torch's own default)")
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


def check_evaluate_env(cfg: Config) -> None:
    """``run.evaluate_env``: each item ``KEY=VALUE`` with an `EnvConfig` key, and every group's task
    with them one the actor trained on it can play; a ValueError (TypeError for a value's type)
    naming the key and the item. Checked at load, so a run fails before training, not after."""
    import yaml

    from uavsim.maps import maps_value

    changes = {}
    for item in cfg.run.evaluate_env:
        key, value = (part.strip() for part in item.split("=", 1)) if "=" in item else ("", "")
        if key not in ENV_KEYS:
            raise ValueError(
                f"config key 'run.evaluate_env' item {item!r}: expected KEY=VALUE with an EnvConfig key "
                f"({', '.join(ENV_KEYS)})"
            )
        changes[key] = maps_value(value) if key == "maps" else yaml.safe_load(value)  # as agents.evaluate reads it
    if not changes:
        return
    for trained in cfg.env_configs():
        try:
            check_actor_fits(trained, trained.replace(**changes), cfg.model)
        except (ValueError, TypeError) as err:
            raise type(err)(f"config key 'run.evaluate_env' {cfg.run.evaluate_env!r}: {err}") from None
