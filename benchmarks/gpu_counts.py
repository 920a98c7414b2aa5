"""The CPU counts `benchmarks.gpu_model` predicts GPU wall clocks from, taken on the tree that ran.

    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what env --out counts.json
    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what trainer --config <tree>/benchmarks/trainer_config.yaml \
        --out ...
    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what learn --config <run>/learn/config.yaml --out ...

Run as a file, not a module, with ``PYTHONPATH`` on the tree whose code is counted (a commit the GPU
rows name, checked out by ``git worktree add``): it imports only functions that every counted commit
has (`benchmarks.step_cost`, `benchmarks.op_count`, `agents.algo.learner`, `agents.algo.imitation`,
`agents.evaluate`), so the counts are those of the code that ran, not of today's. Every count is an
`OpCounter` count (kernels, host syncs, operand bytes) with `torch.utils.flop_counter`'s FLOPs beside it.

What it counts, at small batches (counts are per call; bytes and FLOPs scale with the batch, which
two batch sizes per item check):
    env       `env.step` of the env benchmark's three GPU variants, 64 and 256 environments.
    trainer   a whole `train_iteration` (collect, GAE, PPO epochs) plus its two metric reads, at
              (envs, steps) = (16, 18), (32, 18), (16, 36): kernels = a + b x steps, bytes and FLOPs
              p + r x steps + q x envs x steps; (32, 36) checks that fit.
    learn     the trainer counts for the run's config, and, where it imitates a planner, one
              demonstration step (planner, buffer write, env step) at the run's demonstration
              batch, averaged over sampled steps of a 200-step stretch from reset; the policy step
              DAgger adds; one cloning minibatch; and the in-training evaluation's pieces at
              `run.eval_envs` (an episode of the actor, the planners' calls).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.op_count import OpCounter
from benchmarks.step_cost import count_calls, learner_for, random_actions, staggered_env, whole_periods
from uavsim import EnvConfig

ENV_VARIANTS = {  # the env benchmark's GPU backends (benchmarks.env_throughput): UAVSwarmEnv keywords
    "batched-cuda": {"reset_mode": "prepared"},
    "batched-cuda-sparse": {"reset_mode": "sparse"},
    "batched-cuda-next-step-bf16": {"reset_mode": "prepared", "autoreset_mode": "next_step", "obs_dtype": "bf16"},
}
# (envs, steps) of the counted train_iteration: the first three fit the model, the fourth checks it
ITERATION_SHAPES = ((16, 18), (32, 18), (16, 36), (32, 36))
SAMPLE_EVERY = 10  # a demonstration or baseline step counted of every this many


def counted(fn) -> dict[str, float]:
    """Kernels, host syncs, bytes and FLOPs of one call of ``fn()``."""
    flops = FlopCounterMode(display=False)
    with OpCounter() as c, flops:
        fn()
    return {"kernels": c.kernels, "syncs": c.host_syncs, "bytes": c.bytes, "flops": flops.get_total_flops()}


def add(a: dict[str, float], b: dict[str, float], scale: float = 1.0) -> dict[str, float]:
    return {k: a.get(k, 0.0) + scale * b[k] for k in b}


def env_counts() -> dict:
    out = {}
    for name, kwargs in ENV_VARIANTS.items():
        kw = dict(kwargs)
        if kw.get("obs_dtype") == "bf16":
            kw["obs_dtype"] = torch.bfloat16
        out[name] = {}
        for envs in (64, 256):
            env = staggered_env(EnvConfig(), envs, 100, **kw)
            steps = whole_periods(18, env)
            actions = random_actions(env.config, envs, steps, env.device)
            r = count_calls(lambda i: env.step(actions[i]), steps, envs)  # noqa: B023 -- called here
            out[name][str(envs)] = {
                "kernels": r["kernels_per_call"],
                "syncs": r["host_syncs_per_call"],
                "bytes_per_env_step": r["bytes_per_env_step"],
            }
    return out


def iteration_counts(config: Path) -> dict:
    from agents.algo.learner import read_episode_stats, read_metrics, train_iteration

    out = {}
    for envs, steps in ITERATION_SHAPES:
        learner = learner_for(envs, steps, "bf16", 100, config=config)
        read_metrics(train_iteration(learner))  # not counted: the first creates Adam's state

        def one(learner=learner):
            read_metrics(train_iteration(learner))
            read_episode_stats(learner)

        out[f"{envs}x{steps}"] = {"envs": envs, "steps": steps, **counted(one)}
    tc = learner.cfg.train
    out["epochs"], out["minibatches"] = tc.update_epochs, tc.num_minibatches
    return out


def policy_step(learner, envs: int) -> dict[str, float]:
    from agents.algo.rollout import agent_ids

    agent = agent_ids(envs, learner.env.num_uavs, learner.env.device)
    obs = learner.env.observe()
    return counted(lambda: torch.no_grad()(learner.actor.act)(obs, agent, learner.action_noise, learner.autocast))


def planner_calls(cfg, envs: int, seed: int, steps: int, teacher: str, with_buffer: bool) -> dict[str, float]:
    """Mean counts of one planner call + env step (+ a demonstration write) over ``steps`` steps from
    reset, every `SAMPLE_EVERY`-th counted (the others run uncounted, so the states are the run's)."""
    from agents.algo.imitation import DEMO_FIRST_ENV, Demonstrations
    from uavsim.env import UAVSwarmEnv
    from uavsim.scripted import make_scripted

    env = UAVSwarmEnv(  # the run's observations are the AMP dtype's (bf16 on these GPUs)
        cfg.env_config(), num_envs=envs, seed=seed, first_env_index=DEMO_FIRST_ENV, obs_dtype=torch.bfloat16
    )
    obs = env.reset()
    policy = make_scripted(teacher, env, planner_seed=seed)
    into = Demonstrations(steps * envs, env.num_uavs, env.local_obs_dim, 0, env.obs_dtype, env.device)
    total, n = {}, 0
    for s in range(steps):

        def one(obs=obs):
            act = policy(env)
            if with_buffer:
                into.add(obs["local"], act)
            return env.step(act)[0]

        if s % SAMPLE_EVERY == 0:
            box = []
            total = add(total, counted(lambda one=one, box=box: box.append(one())))
            obs, n = box[0], n + 1
        else:
            obs = one()
    return {k: v / n for k, v in total.items()} | {"sampled_calls": n, "steps": steps, "envs": envs}


def clone_minibatch(learner, frames: int = 2048) -> dict[str, float]:
    """One epoch of `clone` over ``frames`` random frames, per minibatch (and the epoch's syncs)."""
    from agents.algo.imitation import Demonstrations, clone

    ic, env = learner.cfg.imitation, learner.env
    demos = Demonstrations(frames, env.num_uavs, env.local_obs_dim, 0, env.obs_dtype, env.device)
    gen = torch.Generator().manual_seed(0)
    local = torch.randn(frames, env.num_uavs, env.local_obs_dim, generator=gen).to(env.obs_dtype)
    demos.add(local, torch.randint(0, env.config.num_actions, (frames, env.num_uavs), generator=gen))
    mbs = frames // ic.minibatch_steps
    c = counted(lambda: clone(learner.actor, demos, 1, ic.lr, ic.minibatch_steps, gen, learner.autocast))
    return {k: v / mbs for k, v in c.items()} | {"minibatches_counted": mbs, "rows_per_minibatch": ic.minibatch_steps}


def learn_counts(config: Path) -> dict:
    from agents.algo.imitation import demo_env_shape
    from agents.evaluate import actor_policy, run_episodes

    out = {"iteration": iteration_counts(config)}
    run_cfg = config_of(config)
    envs = run_cfg.env.num_envs
    ic = run_cfg.imitation
    learner = learner_for(run_cfg.run.eval_envs, 2, "bf16", 100, config=config)
    out["eval_envs"] = eval_envs = run_cfg.run.eval_envs
    env = learner.env
    for deterministic in (True, False):
        pol = actor_policy(learner.actor, env, deterministic, 0, learner.autocast)
        out[f"eval_episode_{'argmax' if deterministic else 'sampled'}"] = counted(
            lambda pol=pol: run_episodes(env, pol)
        )
    out["eval_steps"] = env.config.max_steps
    for teacher in ("greedy", "coordinated"):
        out[f"eval_baseline_{teacher}_call"] = planner_calls(
            run_cfg, eval_envs, 0, env.config.max_steps, teacher, False
        )
    if ic.teacher.value != "none":
        demo_envs, demo_steps = demo_env_shape(ic.env_steps, env.config.max_steps, envs)
        dagger_steps = -(-ic.dagger_env_steps // demo_envs)
        out["imitation"] = {
            "teacher": ic.teacher.value,
            "demo_envs": demo_envs,
            "demo_steps": demo_steps,
            "dagger_rounds": ic.dagger_rounds,
            "dagger_steps": dagger_steps,
            "epochs": [ic.epochs] + [ic.dagger_epochs] * ic.dagger_rounds,
            "frames": [demo_steps * demo_envs + r * dagger_steps * demo_envs for r in range(ic.dagger_rounds + 1)],
            "minibatch_steps": ic.minibatch_steps,
            "demo_call": planner_calls(run_cfg, demo_envs, run_cfg.seed, 200, ic.teacher.value, True),
            "dagger_policy_step": policy_step(learner_for(demo_envs, 2, "bf16", 100, config=config), demo_envs),
            "clone_minibatch": clone_minibatch(learner),
        }
    return out


def config_of(path: Path):
    from agents.config import load_config

    return load_config(path, ["run.device=cpu", "run.torch_threads=0"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", choices=("env", "trainer", "learn"), required=True)
    parser.add_argument("--config", type=Path, help="the config counted (trainer, learn)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.what != "env" and args.config is None:
        parser.error("--config is needed for trainer and learn")
    torch.set_num_threads(1)
    began = time.perf_counter()
    counts = {"env": env_counts, "trainer": iteration_counts, "learn": learn_counts}[args.what]
    payload = counts() if args.what == "env" else counts(args.config)
    import benchmarks

    tree = Path(benchmarks.__file__).resolve().parent.parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True).stdout
    payload = {
        "what": args.what,
        "config": str(args.config) if args.config else None,
        "commit": commit.strip(),
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - began, 1),
        "counts": payload,
    }
    args.out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {args.out} ({payload['seconds']} s, tree {payload['commit']})", file=sys.stderr)


if __name__ == "__main__":
    main()
