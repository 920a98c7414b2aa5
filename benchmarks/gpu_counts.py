"""The CPU counts `benchmarks.gpu_model` predicts GPU wall clocks from, taken on the tree that ran.

    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what env --out counts.json
    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what trainer --config <tree>/benchmarks/trainer_config.yaml \
        --out ...
    PYTHONPATH=<tree> python benchmarks/gpu_counts.py --what learn --config <run>/learn/config.yaml --out ...
    PYTHONPATH=$PWD python benchmarks/gpu_counts.py --what learn --config configs/default.yaml \
        configs/recipe_gpu.yaml --out DIR/learn-today-gpu.json           # `make train` on CUDA: the GPU recipe
    PYTHONPATH=$PWD python benchmarks/gpu_counts.py --what learn --config configs/default.yaml \
        --set env.num_envs=256 --out DIR/learn-today-preset-256.json     # the preset as CUDA ran it before

Run as a file, not a module, with ``PYTHONPATH`` on the tree whose code is counted (a commit the GPU
rows name, checked out by ``git worktree add``): it imports only functions that every counted commit
has (`benchmarks.step_cost`, `learner_for` from `benchmarks.trainer_cost` or, before it, from
`benchmarks.step_cost`, `benchmarks.op_count`, `agents.algo.learner`, `agents.algo.imitation`,
`agents.evaluate`), so the counts are those of the code that ran, not of today's. Every count is an
`OpCounter` count (kernels, host syncs, operand bytes) with `torch.utils.flop_counter`'s FLOPs beside it.

What it counts, at small batches (counts are per call; bytes and FLOPs scale with the batch, which
two batch sizes per item check):
    env       `env.step` of the env benchmark's three GPU variants, 64 and 256 environments.
    trainer   a whole `train_iteration` (collect, GAE, PPO epochs) plus its two metric reads, at
              (envs, steps) = (16, 18), (32, 18), (16, 36): kernels = a + b x steps, bytes and FLOPs
              p + r x steps + q x envs x steps; (32, 36) checks that fit.
    learn     the trainer counts for the run's config (several files: laid over each other in order,
              as `run.recipe` lays configs/recipe_gpu.yaml over the preset; `--set` overrides after
              them), also at twice its minibatches (the per-minibatch share, so that a changed
              `train.num_minibatches` is predicted without a recount); one iteration at the run's own
              shape, by phase (rollout, update, the rest), its rollout averaged over whole periods of
              the env's rebuilds of prepared starts; and, where it imitates a planner, one
              demonstration step (planner, buffer write, env step) at the run's demonstration batch,
              averaged over sampled steps of a stretch from reset (the run's demonstration steps,
              at most 200); the policy step DAgger adds; one cloning minibatch at
              `imitation.minibatch_steps` and at 4x that (bytes and FLOPs per frame), each with what
              an epoch adds beyond its minibatches; and, where the
              run evaluates (`run.eval_interval` > 0), the in-training evaluation's pieces at
              `run.eval_envs` (an episode of the actor, the planners' calls).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.op_count import OpCounter
from benchmarks.step_cost import count_calls, random_actions, staggered_env, whole_periods
from uavsim import EnvConfig

try:
    from benchmarks.trainer_cost import learner_for
except ImportError:  # a counted tree from before benchmarks.trainer_cost: learner_for was step_cost's
    from benchmarks.step_cost import learner_for

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


def learner_at(config: list[Path], overrides: list[str], envs: int, steps: int):
    """`learner_for` the config files (one: as every counted tree takes it) with ``overrides``."""
    kw = {"overrides": overrides} if overrides else {}  # a keyword older trees' learner_for lacks
    return learner_for(envs, steps, "bf16", 100, config=config[0] if len(config) == 1 else config, **kw)


def whole_iteration(learner) -> dict[str, float]:
    """Counts of one `train_iteration` and its two metric reads (after an uncounted one: Adam's state)."""
    from agents.algo.learner import read_episode_stats, read_metrics, train_iteration

    read_metrics(train_iteration(learner))

    def one():
        read_metrics(train_iteration(learner))
        read_episode_stats(learner)

    return counted(one)


def iteration_counts(config: list[Path], overrides: list[str] = (), per_minibatch: bool = False) -> dict:
    out = {}
    for envs, steps in ITERATION_SHAPES:
        learner = learner_at(config, list(overrides), envs, steps)
        out[f"{envs}x{steps}"] = {"envs": envs, "steps": steps, **whole_iteration(learner)}
    tc = learner.cfg.train
    out["epochs"], out["minibatches"] = tc.update_epochs, tc.num_minibatches
    if per_minibatch:  # the first shape again at twice the minibatches: what one more minibatch costs
        envs, steps = ITERATION_SHAPES[0]
        more = 2 * tc.num_minibatches
        if envs * steps % more:
            raise ValueError(f"{envs}x{steps} env steps do not split into {more} minibatches")
        learner = learner_at(config, [*overrides, f"train.num_minibatches={more}"], envs, steps)
        out["minibatches_x2"] = {"envs": envs, "steps": steps, "minibatches": more, **whole_iteration(learner)}
    return out


def run_iteration(config: list[Path], overrides: list[str], envs: int, steps: int) -> dict:
    """One iteration at the run's own shape, by phase: ``rollout`` (`collect`: the policy and env
    steps, averaged over enough calls to cover whole periods of the env's rebuilds of prepared
    starts, as a run's iterations do), ``update`` (GAE, the clone's log-probabilities and every PPO
    minibatch at the run's size) and ``rest`` (learning rates, metrics and the two reads)."""
    from agents.algo.learner import collect, read_episode_stats, read_metrics, train_iteration

    learner = learner_at(config, overrides, envs, steps)
    read_metrics(train_iteration(learner))  # not counted: the first creates Adam's state
    period = max(1, learner.env.prepare_period)
    calls = min(18, math.lcm(steps, period) // steps)
    flops, marks = FlopCounterMode(display=False), {}
    with OpCounter() as c, flops:

        def mark(phase: str) -> None:
            marks[phase] = {"kernels": c.kernels, "syncs": c.host_syncs, "bytes": c.bytes}
            marks[phase]["flops"] = flops.get_total_flops()

        mark("start")
        read_metrics(train_iteration(learner, mark))
        read_episode_stats(learner)
        mark("stop")
        for _ in range(calls - 1):
            collect(learner)
        mark("rollouts")

    def between(a: str, b: str) -> dict[str, float]:
        return {k: marks[b][k] - marks[a][k] for k in marks[a]}

    rollout = add(between("env", "learn"), between("stop", "rollouts"))
    tc = learner.cfg.train
    return {
        "envs": envs,
        "steps": steps,
        "epochs": tc.update_epochs,
        "minibatches": tc.num_minibatches,
        "rollout_calls": calls,
        "rollout": {k: v / calls for k, v in rollout.items()},
        "update": between("learn", "end"),
        "rest": add(between("start", "env"), between("end", "stop")),
    }


def policy_step(learner, envs: int) -> dict[str, float]:
    from agents.algo.rollout import agent_ids

    agent = agent_ids(envs, learner.env.num_uavs, learner.env.device)
    obs = learner.env.observe()
    return counted(lambda: torch.no_grad()(learner.actor.act)(obs, agent, learner.action_noise, learner.autocast))


def planner_calls(cfg, envs: int, seed: int, steps: int, teacher: str, with_buffer: bool) -> dict[str, float]:
    """Mean counts of one planner call + env step (+ a demonstration write) over ``steps`` steps from
    reset, every `SAMPLE_EVERY`-th counted (the others run uncounted, so the states are the run's;
    only the counted ones write, into a buffer of their size: the write's count is the same)."""
    from agents.algo.imitation import DEMO_FIRST_ENV, Demonstrations
    from uavsim.env import UAVSwarmEnv
    from uavsim.scripted import make_scripted

    env = UAVSwarmEnv(  # the run's observations are the AMP dtype's (bf16 on these GPUs)
        cfg.env_config(), num_envs=envs, seed=seed, first_env_index=DEMO_FIRST_ENV, obs_dtype=torch.bfloat16
    )
    obs = env.reset()
    policy = make_scripted(teacher, env, planner_seed=seed)
    sampled = -(-steps // SAMPLE_EVERY)
    into = Demonstrations(sampled * envs, env.num_uavs, env.local_obs_dim, 0, env.obs_dtype, env.device)
    total, n = {}, 0
    for s in range(steps):

        def one(obs=obs, write=with_buffer and s % SAMPLE_EVERY == 0):
            act = policy(env)
            if write:
                into.add(obs["local"], act)
            return env.step(act)[0]

        if s % SAMPLE_EVERY == 0:
            box = []
            total = add(total, counted(lambda one=one, box=box: box.append(one())))
            obs, n = box[0], n + 1
        else:
            obs = one()
    return {k: v / n for k, v in total.items()} | {"sampled_calls": n, "steps": steps, "envs": envs}


def clone_minibatch(learner, rows: int | None = None) -> dict:
    """One cloning minibatch of ``rows`` frames (by default `imitation.minibatch_steps`): an epoch of
    `clone` over 4 minibatches of random frames less one over 2, halved (bytes: see below); and under
    ``epoch`` what an epoch adds beyond its minibatches (its order's draw, its sums, its read; Adam's
    state, made once a fit, counted in each epoch here)."""
    from agents.algo.imitation import Demonstrations, clone

    ic, env = learner.cfg.imitation, learner.env
    rows = rows or ic.minibatch_steps
    gen = torch.Generator().manual_seed(0)

    def epoch(minibatches: int) -> dict[str, float]:
        frames = minibatches * rows
        demos = Demonstrations(frames, env.num_uavs, env.local_obs_dim, 0, env.obs_dtype, env.device)
        local = torch.randn(frames, env.num_uavs, env.local_obs_dim, generator=gen).to(env.obs_dtype)
        demos.add(local, torch.randint(0, env.config.num_actions, (frames, env.num_uavs), generator=gen))
        return counted(lambda: clone(learner.actor, demos, 1, ic.lr, rows, gen, learner.autocast))

    two, four = epoch(2), epoch(4)
    one = {k: (four[k] - two[k]) / 2 for k in two}
    fixed = {k: two[k] - 2 * one[k] for k in two}
    # bytes: half the 2-minibatch epoch's. A gather counts its whole source (`OpCounter`), here all the
    # epoch's frames, so the difference would grow with the frames; the run's gathers read their rows.
    one["bytes"], fixed["bytes"] = two["bytes"] / 2, 0.0
    return one | {"epoch": fixed, "minibatches_counted": 6, "rows_per_minibatch": rows}


def learn_counts(config: list[Path], overrides: list[str] = ()) -> dict:
    from agents.algo.imitation import demo_env_shape
    from agents.evaluate import actor_policy, run_episodes

    overrides = list(overrides)
    run_cfg = config_of(config, overrides)
    envs, steps = run_cfg.env.num_envs, run_cfg.train.num_steps
    ic = run_cfg.imitation
    out = {"iteration": iteration_counts(config, overrides, per_minibatch=True)}
    out["run_iteration"] = run_iteration(config, overrides, envs, steps)
    out["eval_interval"] = run_cfg.run.eval_interval
    learner = learner_at(config, overrides, run_cfg.run.eval_envs, 2)
    out["eval_envs"] = eval_envs = run_cfg.run.eval_envs
    env = learner.env
    out["eval_steps"] = env.config.max_steps
    if run_cfg.run.eval_interval > 0:  # 0: no evaluation, nor the planners' reference episodes
        for deterministic in (True, False):
            pol = actor_policy(learner.actor, env, deterministic, 0, learner.autocast)
            out[f"eval_episode_{'argmax' if deterministic else 'sampled'}"] = counted(
                lambda pol=pol: run_episodes(env, pol)
            )
        for teacher in ("greedy", "coordinated"):
            out[f"eval_baseline_{teacher}_call"] = planner_calls(
                run_cfg, eval_envs, 0, env.config.max_steps, teacher, False
            )
    if ic.teacher.value != "none":
        per_env = getattr(ic, "steps_per_env", 0) or env.config.max_steps  # the key older trees lack
        demo_envs, demo_steps = demo_env_shape(ic.env_steps, per_env, envs)
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
            "demo_call": planner_calls(run_cfg, demo_envs, run_cfg.seed, min(200, demo_steps), ic.teacher.value, True),
            "dagger_policy_step": policy_step(learner_at(config, overrides, demo_envs, 2), demo_envs),
            "clone_minibatch": clone_minibatch(learner),
            "clone_minibatch_x4": clone_minibatch(learner, 4 * ic.minibatch_steps),
        }
    return out


def out_file(value: str) -> Path:
    """argparse `type` of `--out`, checked before counting (minutes for `learn`); not `benchmarks.common`'s
    `out_file_arg`: this file imports only what every counted tree has (the module docstring)."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory, expected a file path")
    return path


def config_of(paths: list[Path], overrides: list[str] = ()):
    from agents.config import load_config

    return load_config(paths[0] if len(paths) == 1 else paths, [*overrides, "run.device=cpu", "run.torch_threads=0"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", choices=("env", "trainer", "learn"), required=True)
    parser.add_argument(
        "--config", type=Path, nargs="+", help="the config counted (trainer, learn); several: laid over in order"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override (learn)")
    parser.add_argument("--out", type=out_file, required=True)
    args = parser.parse_args(argv)
    if args.what != "env" and args.config is None:
        parser.error("--config is needed for trainer and learn")
    if args.what == "env" and args.config is not None:
        parser.error("--config is for trainer and learn counts: env counts the env's defaults (EnvConfig())")
    if args.set and args.what != "learn":
        parser.error("--set is for learn counts")
    torch.set_num_threads(1)
    began = time.perf_counter()
    counts = {"env": env_counts, "trainer": iteration_counts, "learn": learn_counts}[args.what]
    payload = counts() if args.what == "env" else counts(args.config, args.set)
    import benchmarks

    tree = Path(benchmarks.__file__).resolve().parent.parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True).stdout
    payload = {
        "what": args.what,
        "config": " ".join(map(str, args.config)) if args.config else None,
        "overrides": args.set,
        "commit": commit.strip(),
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - began, 1),
        "counts": payload,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    print(f"wrote {args.out} ({payload['seconds']} s, tree {payload['commit']})", file=sys.stderr)


if __name__ == "__main__":
    main()
