"""Training throughput: our MAPPO iteration against the same algorithm from TorchRL's stock parts.

    python -m benchmarks.train_throughput            # writes benchmarks/results/
    python -m benchmarks.train_throughput --quick

Both pipelines run one PPO iteration at a time on the same environment (``UAVSwarmEnv``; TorchRL
through ``uavsim.adapters.torchrl_env.UAVTorchRLEnv``) with the same batch (``num_steps`` x
``num_envs`` x UAVs), the same epochs and minibatches, and MLPs of the same width and depth:

    ours     agents.train_mappo's iteration: device-resident storage, our GAE and PPO update.
    ours-compiled  the same with ``train.compile=true``: the minibatch loss (networks, log-probs,
             loss) through ``torch.compile``, forward and backward; rollout and optimizer eager.
    ours-captured  ``train.compile=true`` and ``train.compile_rollout=true``: the rollout step
             captured too (CUDA graphs on a GPU); not in the default list (minutes to compile on a CPU).
    torchrl  (``benchmarks.torchrl_pipeline``) ``torchrl.collectors.Collector`` over the TorchRL
             adapter, our actor and critic modules (the very same arithmetic as ``ours``) in a
             ``ProbabilisticActor`` and a ``TensorDictModule``, ``GAE`` and ``ClipPPOLoss`` from
             ``torchrl.objectives``, Adam with gradient clipping: the pipelines differ, the networks do not.
    torchrl-mlp  the same pipeline with the same architecture built from TorchRL's stock ``MLP``:
             the actor on ``[obs, one-hot id]`` and the critic on ``[state, obs, one-hot id]``,
             concatenated per UAV (what a TorchRL user assembles; it lacks our networks' split
             first layer, which computes the state's product once per environment step).
    torchrl-multiagentmlp  the same with TorchRL's MAPPO recipe networks: a ``MultiAgentMLP``
             actor and a centralized ``MultiAgentMLP`` critic over all UAVs' local observations,
             run once per environment step rather than once per UAV (less arithmetic than ours).

The figure is agent-steps per second of whole iterations (collection + update), warm-up excluded,
median of the timed iterations; AMP modes run under ``torch.autocast`` (bf16 everywhere, fp16
on CUDA only; ``--amps`` and ``--devices`` pick some). ``--profile`` adds where each pipeline's time
goes (``benchmarks.common.profile_ops``: matmuls, compiled kernels, other ops, outside ops; and for
ours, rollout against update).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    RESULTS_DIR,
    TRAINER_CONFIG,
    cpu_label,
    fmt_rate,
    machine_info,
    profile_ops,
    setup_host,
    sync,
    write_results,
)
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg
from benchmarks.torchrl_pipeline import SAME_TASK, torchrl_runner


def ours_runner(compiled: bool, captured: bool = False):
    """Our trainer's iteration, eager or with ``train.compile`` (its minibatch loss compiled; the
    compilation happens in the warm-up iteration, which is not timed), and with `captured`
    ``train.compile_rollout`` too."""

    def run(args, amp, device):
        return ours_iteration_runner(args, amp, device, compiled, captured)

    return run


def ours_iteration_runner(args, amp: str, device: str, compiled: bool = False, captured: bool = False):
    from agents.algo.learner import build_learner, read_metrics, train_iteration
    from agents.config import load_config
    from agents.run.logger import PhaseTimer

    cfg = load_config(
        TRAINER_CONFIG,
        [
            f"env.num_envs={args.num_envs}",
            f"train.num_steps={args.num_steps}",
            f"train.update_epochs={args.epochs}",
            f"train.num_minibatches={args.minibatches}",
            f"train.amp={amp}",
            f"model.hidden_size={args.hidden}",
            f"run.device={device}",
            "train.total_env_steps=100000000",
            f"train.compile={str(compiled).lower()}",
            f"train.compile_rollout={str(captured).lower()}",
            "run.torch_threads=0",
            *SAME_TASK,
        ],
    )  # setup_host set the threads
    learner = build_learner(cfg, torch.device(device))

    def iteration(timer: PhaseTimer | None = None):
        # the trainer reads its metrics once per iteration too
        read_metrics(train_iteration(learner, timer.mark) if timer else train_iteration(learner))

    def phase_seconds() -> dict[str, float]:
        """One iteration's rollout and update seconds (the trainer's own phase marks)."""
        timer = PhaseTimer(learner.env.device)
        iteration(timer)
        phases = timer.seconds()
        return {"rollout": phases["env"], "update": phases["learn"]}

    iteration.phase_seconds = phase_seconds  # type: ignore[attr-defined]
    return iteration


PIPELINES = {
    "ours": ours_runner(False),
    "ours-compiled": ours_runner(True),
    "torchrl": torchrl_runner("ours"),
    "torchrl-mlp": torchrl_runner("mlp"),
    "torchrl-multiagentmlp": torchrl_runner("multiagentmlp"),
}
OPTIONAL_PIPELINES = {"ours-captured": ours_runner(True, captured=True)}  # run only when named
ALL_PIPELINES = {**PIPELINES, **OPTIONAL_PIPELINES}
AMPS = ("off", "bf16", "fp16")  # fp16: CUDA only


def run_list(devices: list[str], amps: list[str]) -> list[tuple[str, str]]:
    """The (device, precision) pairs to run, in order: CUDA only where torch sees it, fp16 only there."""
    seen = [d for d in ("cpu", "cuda") if d in devices and (d == "cpu" or torch.cuda.is_available())]
    return [(d, a) for d in seen for a in AMPS if a in amps and (a != "fp16" or d == "cuda")]


def measure(args) -> dict[str, Any]:
    setup_host(args.threads)
    rows = []
    for device, amp in run_list(args.devices, args.amps):
        for name in args.pipelines:
            torch.manual_seed(0)
            iteration = ALL_PIPELINES[name](args, amp, device)
            try:
                for _ in range(args.warmup):
                    iteration()
                times = []
                for _ in range(args.iterations):
                    sync(device)
                    start = time.perf_counter()
                    iteration()
                    sync(device)
                    times.append(time.perf_counter() - start)
                profile = where_time_goes(iteration, args.profile) if args.profile else None
            finally:
                getattr(iteration, "close", lambda: None)()
            agent_steps = args.num_steps * args.num_envs * 10
            rate = agent_steps / statistics.median(times)
            rows.append(
                {
                    "pipeline": name,
                    "device": device,
                    "amp": amp,
                    "agent_steps_per_s": rate,
                    "env_steps_per_s": rate / 10,
                    "iteration_seconds": times,
                    **({"profile": profile} if profile else {}),
                }
            )
            print(f"{name:8s} {device:5s} amp={amp:4s} {fmt_rate(rate):>8s} agent-steps/s")
    for r in rows:
        for key, pipeline in (("speedup_vs_torchrl", "torchrl"), ("speedup_vs_torchrl_mlp", "torchrl-mlp")):
            base = next(
                (b for b in rows if b["pipeline"] == pipeline and b["device"] == r["device"] and b["amp"] == r["amp"]),
                None,
            )
            r[key] = r["agent_steps_per_s"] / base["agent_steps_per_s"] if base else None
    settings = {
        k: getattr(args, k)
        for k in (
            "num_envs",
            "num_steps",
            "epochs",
            "minibatches",
            "hidden",
            "threads",
            "iterations",
            "warmup",
            "profile",
            "devices",
            "amps",
        )
    }
    return {
        "benchmark": "train_throughput",
        "machine": machine_info("cuda" if torch.cuda.is_available() else None),
        "quick": args.quick,
        "settings": settings,
        "num_uavs": 10,
        "results": rows,
    }


def where_time_goes(iteration, repeats: int) -> dict[str, Any]:
    """`profile_ops` over `repeats` iterations, plus (for our trainer) the median rollout and update
    seconds of `repeats` unprofiled iterations."""
    out = profile_ops(iteration, repeats)
    if hasattr(iteration, "phase_seconds"):
        phases = [iteration.phase_seconds() for _ in range(repeats)]
        out.update({f"{k}_ms": 1e3 * statistics.median(p[k] for p in phases) for k in ("rollout", "update")})
    return out


def profile_table(rows: list[dict[str, Any]]) -> list[str]:
    """The `--profile` section: milliseconds per iteration by kind of work."""
    cell = lambda p, k: f"{p[k]:.0f}" if k in p else "-"  # noqa: E731
    lines = [
        "",
        "Where the time goes (torch.profiler, self CPU time, ms per iteration; iteration, rollout and update "
        "unprofiled, from the trainer's phase marks; matmuls + compiled kernels + other ops + outside ops add up to "
        "the profiled iteration, which the profiler slows):",
        "",
        "| pipeline | device | AMP | iteration | rollout | update | profiled iteration | matmuls | compiled kernels "
        "| other ops | outside ops | top ops (ms) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "profile" not in r:
            continue
        p = r["profile"]
        top = ", ".join(f"{o['op']} {o['self_ms']:.0f}" for o in p["top_ops"][:3])
        lines.append(
            f"| {r['pipeline']} | {r['device']} | {r['amp']} | {1e3 * statistics.median(r['iteration_seconds']):.0f} "
            f"| {cell(p, 'rollout_ms')} | {cell(p, 'update_ms')} | {cell(p, 'profiled_ms')} | {cell(p, 'matmul_ms')} "
            f"| {cell(p, 'compiled_kernels_ms')} | {cell(p, 'other_ops_ms')} | {cell(p, 'outside_ops_ms')} | {top} |"
        )
    return lines


def table(payload: dict[str, Any]) -> str:
    m, s = payload["machine"], payload["settings"]
    lines = [
        f"# Training throughput ({'quick' if payload['quick'] else 'full'})",
        "",
        f"CPU: {cpu_label(m)}, torch threads {s['threads']}"
        + (f"; GPU: {m['gpu']}" if "gpu" in m else "; no GPU")
        + f"; torch {m['torch']} "
        f"({m.get('torch_build', '?')} build); {m['date']}",
        f"Batch: {s['num_steps']} steps x {s['num_envs']} envs x 10 UAVs; {s['epochs']} epochs x "
        f"{s['minibatches']} minibatches; hidden {s['hidden']}; median of {s['iterations']} iterations",
        "",
        "| pipeline | device | AMP | agent-steps/s | env-steps/s | x TorchRL (our network modules) "
        "| x TorchRL (stock MLP, same architecture) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    ratio = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    for r in payload["results"]:
        lines.append(
            f"| {r['pipeline']} | {r['device']} | {r['amp']} | {fmt_rate(r['agent_steps_per_s'])} "
            f"| {fmt_rate(r['env_steps_per_s'])} | {ratio(r['speedup_vs_torchrl'])} "
            f"| {ratio(r.get('speedup_vs_torchrl_mlp'))} |"
        )
    if any("profile" in r for r in payload["results"]):
        lines += profile_table(payload["results"])
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = payload["results"]
    labels = list(dict.fromkeys(f"{r['device']}\n{r['amp']}" for r in rows))  # every pipeline runs each
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = list(dict.fromkeys(r["pipeline"] for r in rows))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        ys = [r["agent_steps_per_s"] for r in rows if r["pipeline"] == name]
        ax.bar([i + (k - (len(names) - 1) / 2) * width for i in range(len(ys))], ys, width, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set(
        ylabel="agent-steps / s (collection + update)",
        yscale="log",
        title=f"MAPPO iteration throughput — {payload['machine'].get('gpu', payload['machine']['cpu'])}"[:90],
    )
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny batch, two timed iterations (CI smoke)")
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--num-steps", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=list(ALL_PIPELINES))
    parser.add_argument(
        "--devices",
        nargs="+",
        default=["cpu", "cuda"],
        choices=["cpu", "cuda"],
        help="where to run (cuda: when torch sees a GPU)",
    )
    parser.add_argument(
        "--amps", nargs="+", default=list(AMPS), choices=list(AMPS), help="precisions to run (fp16: CUDA only)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile N iterations of each pipeline: where the time goes (0: off)",
    )
    parser.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = parser.parse_args(argv)
    if args.profile < 0:
        parser.error(f"--profile must be >= 0 (iterations to profile), got {args.profile}")
    for name, quick, full in (("num_envs", 8, 64), ("num_steps", 8, 64), ("iterations", 2, 5)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    for name in ("num_envs", "num_steps", "epochs", "minibatches", "hidden", "iterations", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if not run_list(args.devices, args.amps):
        parser.error(
            f"nothing to run for --devices {' '.join(args.devices)} and --amps {' '.join(args.amps)}: "
            f"fp16 runs on CUDA only, and torch sees {'a' if torch.cuda.is_available() else 'no'} CUDA device"
        )
    if (args.num_steps * args.num_envs) % args.minibatches:
        parser.error(
            f"--minibatches must divide num_steps x num_envs = {args.num_steps * args.num_envs} "
            "(minibatches take whole environment steps, in every pipeline alike)"
        )
    payload = measure(args)
    subset = (
        set(args.pipelines) != set(PIPELINES) or set(args.devices) != {"cpu", "cuda"} or set(args.amps) != set(AMPS)
    )
    return write_results(
        "train_throughput", payload, table(payload), lambda p: plot(payload, p), args.out_dir, subset=subset
    )


if __name__ == "__main__":
    main()
