"""The episodes of an evaluation: every policy plays the same maps, one episode each.

`evaluate_all` plays the trained actor (most likely action, and sampled) and the scripted
`BASELINES` on the same episodes and returns what `python -m agents.evaluate` writes
(`agents.evaluate.cli` describes the JSON); `evaluate_for_tensorboard` is the smaller evaluation
`agents.train_mappo` logs while it trains. The statistics are `agents.evaluate.stats`'s, the files
and printed lines `agents.evaluate.report`'s.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm

from agents.algo.action_noise import ActionNoise
from agents.algo.networks import Actor
from agents.algo.rollout import agent_ids, reset_where_done
from agents.evaluate.baseline_cache import BaselineCache, baseline_key
from agents.evaluate.report import curve_summary
from agents.evaluate.setup import episode_maps
from agents.evaluate.stats import METRICS, paired_results, per_map, summarize
from uavsim.config import EnvConfig
from uavsim.env import UAVSwarmEnv
from uavsim.scripted import make_scripted
from uavsim.video import record_episode

EVAL_SEED_OFFSET = 1_000_000  # in-training evaluation maps differ from the training maps
BASELINES = ("random", "greedy", "coordinated")  # scripted policies, played beside the trained one
POLICIES = ("policy", "policy_sampled", *BASELINES)
RECORDED = ("policy", "policy_sampled", "greedy", "coordinated")  # episode 0 of each is drawn


@torch.no_grad()
def run_episodes(
    env: UAVSwarmEnv, act: Callable[[dict], torch.Tensor], on_step: Callable[[], object] | None = None
) -> dict[str, np.ndarray]:
    """Play the next episode of every environment of `env` to its end with `act(obs) -> [B, N]`,
    calling `on_step()` after every step (host reads are fine here: this is evaluation).

    Returns:
        Per environment: NumPy `[B]` per metric of `METRICS`, and `coverage_curve` `[B, max_steps + 1]`
        float64, the coverage at each step, held at its final value once the episode ended.
    """
    cfg, b = env.config, env.num_envs
    obs = env.reset()
    ended = torch.zeros(b, dtype=torch.bool, device=env.device)
    res = {k: torch.zeros(b, dtype=torch.float64, device=env.device) for k in METRICS}
    curve = torch.empty(cfg.max_steps + 1, b, dtype=torch.float32, device=env.device)
    curve[0] = obs["state"][:, -1]  # the global state ends with the coverage (uavsim.rules)
    for t in range(cfg.max_steps):
        obs, _reward, terminated, truncated, info = env.step(act(obs))
        done = terminated | truncated
        first = done & ~ended
        length = info["episode_length"].double()
        values = {
            "coverage": info["episode_coverage"],
            "return": info["episode_return"],
            "length": length,
            "steps_to_target": torch.where(terminated, length, torch.full_like(length, cfg.max_steps)),
            "reached": terminated,
            "collisions": info["episode_collisions"],
            "near_misses": info["episode_near_misses"],
        }
        for k, v in values.items():
            res[k] = torch.where(first, v.double(), res[k])
        curve[t + 1] = torch.where(ended, curve[t], info["coverage"])  # before the autoreset
        ended |= done
        if on_step is not None:
            on_step()
        if bool(ended.all()):
            curve[t + 2 :] = curve[t + 1]
            break
    out = {k: v.cpu().numpy() for k, v in res.items()}
    out["coverage_curve"] = curve.T.double().cpu().numpy()
    return out


def first_episode_frames(
    env_cfg: EnvConfig,
    act_for: Callable[[UAVSwarmEnv], Callable[[dict], torch.Tensor]],
    seed: int,
    device: torch.device,
) -> list[np.ndarray]:
    """RGB frames `[H, W, 3]` uint8 of episode 0 of environment 0 of `seed` (the first map
    `run_episodes` plays), played by `act_for(env) -> act` on a one-environment batch on `device`,
    each with the whole trail (`uavsim.video.record_episode`). The trained actor plays its batch's
    episode; the greedy planner's tie-breaks depend on the batch, so its episode may differ by a tie."""
    env = UAVSwarmEnv(env_cfg, num_envs=1, device=device, seed=seed)  # not reset: record_episode plays episode 0
    act = act_for(env)
    return record_episode(env, lambda e: act(e.observe()), env_index=0, trail=env_cfg.max_steps).frames


def actor_policy(
    actor: Actor,
    env: UAVSwarmEnv,
    deterministic: bool,
    seed: int,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    temperature: float = 1.0,
):
    """`act(obs) -> actions [B, N]` of the trained actor on `env`: the most likely action
    (`deterministic`), else sampled at `temperature` with noise of `seed` (per environment,
    whatever the batch), under `autocast`. A recurrent actor's hidden state is carried from call to call and zeroed
    where `env`'s episode is at its first step."""
    agent = agent_ids(env.num_envs, env.num_uavs, env.device)
    noise = ActionNoise(seed, env.env_index, env.num_uavs)  # env b's draws whatever the batch
    if not actor.recurrent:
        return lambda obs: actor.act(obs, agent, noise, autocast, deterministic, temperature=temperature)[0]
    hidden = actor.initial_hidden(env.num_envs, env.num_uavs, env.device)

    def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        nonlocal hidden
        hidden = reset_where_done(hidden, env.read_state("t")[0] == 0)
        actions, _, _, hidden = actor.act(obs, agent, noise, autocast, deterministic, hidden, temperature)
        return actions

    return act


def evaluate_all(
    actor: Actor,
    env_cfg,
    episodes: int,
    seed: int,
    device: torch.device,
    record: bool = True,
    progress: bool | None = False,
    temperature: float = 1.0,
    cache: BaselineCache | None = None,
) -> tuple[dict, dict[str, list[np.ndarray]]]:
    """Trained `actor` (argmax and sampled) and the `BASELINES` on the same `episodes` maps of `seed`
    (one episode each) of the task `env_cfg`, on `device`.

    Args:
        record: draw the first episode of each of `RECORDED`.
        progress: a bar of steps per policy (None: on a terminal; elsewhere a line as each policy is done).
        temperature: `policy_sampled` draws from `softmax(logits / temperature)`.
        cache: the baselines' results are read from it where it holds them, else played and stored
            (`agents.evaluate.baseline_cache`); the results are the same either way.

    Returns:
        `(results, frames)`: the results of the module docstring less `meta`, and `{name: frames}`
        of the first episode of each of `RECORDED` (the same map for each; empty without `record`).
    """

    def policy(name: str, env: UAVSwarmEnv) -> Callable[[dict], torch.Tensor]:
        if name in ("policy", "policy_sampled"):
            return actor_policy(actor, env, name == "policy", seed, temperature=temperature)
        scripted = make_scripted(name, env, seed)
        return lambda obs: scripted(env)

    def play(name: str, bar: tqdm) -> tuple[dict[str, np.ndarray], list[np.ndarray] | None]:
        env = UAVSwarmEnv(env_cfg, num_envs=episodes, device=device, seed=seed)  # the same maps for each
        res = run_episodes(env, policy(name, env), on_step=bar.update)
        drawn = record and name in RECORDED
        return res, first_episode_frames(env_cfg, lambda e: policy(name, e), seed, device) if drawn else None

    raw, frames = {}, {}
    disable = None if progress is None else not progress  # tqdm: None disables it off a terminal
    total = len(POLICIES) * env_cfg.max_steps
    with tqdm(total=total, unit="step", desc="evaluate", disable=disable, file=sys.stderr) as bar:
        for i, name in enumerate(POLICIES):
            bar.set_postfix(policy=name)
            if cache is not None and name in BASELINES:
                key = baseline_key(name, env_cfg, episodes, seed, device)
                raw[name], drawn = cache.fetch(key, record and name in RECORDED, lambda name=name: play(name, bar))
            else:
                raw[name], drawn = play(name, bar)
            if drawn is not None:
                frames[name] = drawn
            bar.update((i + 1) * env_cfg.max_steps - bar.n)  # episodes that all ended early (or cached)
            if progress is None and bar.disable:  # off a terminal (a log): a line a policy, not silence till the end
                print(
                    f"evaluate: {name} done ({i + 1}/{len(POLICIES)}, {bar.format_dict['elapsed']:.0f} s)",
                    file=sys.stderr,
                )
    results = {name: summarize(res) for name, res in raw.items()}
    results.update(paired_results(raw))
    if env_cfg.maps is not None:  # which of the set's layouts each policy fails on
        maps, picked = episode_maps(env_cfg, episodes, seed)
        names = [f.name for f in maps.files]
        names = names if len(set(names)) == len(names) else [str(f) for f in maps.files]  # a sequence may repeat a name
        results["per_map"] = per_map(raw, picked, names)
    results["coverage_curve"] = {name: curve_summary(res["coverage_curve"]) for name, res in raw.items()}
    return results, {name: frames[name] for name in RECORDED if name in frames}


def evaluate_for_tensorboard(learner, logger) -> dict[str, float]:
    """In-training evaluation of `learner`'s actor on `run.eval_envs` fixed maps (not the training
    maps): the argmax policy (`eval/...`, its first episode's image written to `logger`), the
    sampling policy (`eval_sampled/...`) and the two frontier baselines (`eval_greedy/...`,
    `eval_coordinated/...`) for reference. Returns the scalars; the caller logs them."""
    cfg = learner.cfg
    seed = (cfg.seed + EVAL_SEED_OFFSET) % 2**31
    out = {}
    for prefix, deterministic in (("eval", True), ("eval_sampled", False)):
        env = UAVSwarmEnv(learner.env.config, num_envs=cfg.run.eval_envs, device=learner.env.device, seed=seed)
        res = run_episodes(env, actor_policy(learner.actor, env, deterministic, seed, learner.autocast))
        if deterministic:
            frames = first_episode_frames(
                env.config, lambda e: actor_policy(learner.actor, e, True, seed, learner.autocast), seed, env.device
            )
            logger.image(f"{prefix}/episode", frames[-1], learner.env_steps)
        out.update({f"{prefix}/{k}": v for k, v in summarize(res).items() if k != "episodes"})
    for name in ("greedy", "coordinated"):
        base = baseline_reference(name, learner.env.config, cfg.run.eval_envs, seed, learner.env.device)
        out.update({f"eval_{name}/{k}": v for k, v in base.items() if k != "episodes"})
    return out


_BASELINE_RESULTS: dict[tuple, dict[str, float]] = {}


def baseline_reference(
    name: str, env_cfg: EnvConfig, num_envs: int, seed: int, device: torch.device
) -> dict[str, float]:
    """A frontier baseline (`greedy` or `coordinated`) on the evaluation maps, the reference line of
    every in-training evaluation: computed once per process and reused (with its own fixed seed it
    plays the same episodes on the same maps, and its path search costs more than the policy's)."""
    key = (name, tuple(sorted(env_cfg.to_dict().items())), num_envs, seed, str(device))
    if key not in _BASELINE_RESULTS:
        env = UAVSwarmEnv(env_cfg, num_envs=num_envs, device=device, seed=seed)
        policy = make_scripted(name, env, seed)
        _BASELINE_RESULTS[key] = summarize(run_episodes(env, lambda obs: policy(env)))
    return _BASELINE_RESULTS[key]
