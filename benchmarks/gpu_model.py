"""A run-level GPU model: wall clock on an H100 / H200 from counts taken on the CPU, beside every GPU row.

    python -m benchmarks.gpu_model                 # writes benchmarks/results/gpu_model.{md,json}
    python -m benchmarks.gpu_model --merge DIR     # first folds gpu_counts outputs (DIR/*.json) into COUNTS

`make train`'s prediction stands on counts of the working tree: `benchmarks/gpu_counts.py --what learn`
for each of `RECIPES` (its docstring gives the two commands), written as ``DIR/learn-today-<name>.json``
and merged; a few minutes on two CPU cores. A changed `train.num_steps` or `train.num_minibatches`
needs no recount (the small-shape fit and the per-minibatch share), only this module run again; a
changed batch of the planner's calls (`env.num_envs`, `imitation.env_steps`, `imitation.steps_per_env`)
does, and says so.

The counts (`benchmarks.gpu_counts`, run on the tree each GPU row names: kernels, host syncs, operand
bytes and FLOPs per call, from `benchmarks.op_count.OpCounter` and torch's FLOP counter) are kept in
`COUNTS`. A piece of work of ``k`` kernels, ``s`` host syncs, ``b`` bytes and ``f`` FLOPs takes

    max(k x launch, b / (bw_fraction x bandwidth) + f / (mm_efficiency x matmul_peak)) + s x sync

seconds: the host queues kernels at ``launch`` each (eager dispatch, a scripted planner's ops, a
compiled function's with its graphs skipped, or a CUDA graph's replay) while the GPU runs behind
it at a fraction of its DRAM bandwidth and matmul rate; each host sync waits for the queue and
costs ``sync`` beyond it. This is `benchmarks.step_cost`'s ceiling
(``min(bandwidth / bytes, envs / (kernels x launch))``) turned into a time, with syncs and FLOPs
added, so the two models agree on an env step. A whole run adds up its phases: process start,
imitation (planner calls, DAgger's policy steps, cloning minibatches), PPO iterations, in-training
evaluations and the planners' reference episodes computed once (`agents.evaluate`; neither where
`run.eval_interval` is 0).

`make_train` predicts what `make train` runs on one H100 SXM and one H200: the GPU recipe
(configs/recipe_gpu.yaml over configs/default.yaml, read through `agents.config` as the run reads
them) and, beside it, the preset alone at 256 environments (what CUDA ran before the recipe), phase
by phase, each from counts taken at the run's own batch: the planner's call at the demonstration
batch, the PPO iteration at the run's shape (rollout over whole rebuild periods, every minibatch at
its size), the cloning minibatch at `imitation.minibatch_steps`; and the GPU recipe's designs
(`DESIGNS`: config overrides, or CUDA graphs replayed at the assumed `launch_replayed_us`).

The constants are fitted on named rows (see `fit`) and each row's prediction is printed beside its
measurement with the ratio predicted / measured; a row outside +-35 % names its largest term.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import RESULTS_DIR
from benchmarks.step_cost import GPUS

COUNTS = RESULTS_DIR / "gpu_model_counts.json"
OUT = RESULTS_DIR / "gpu_model"  # .md and .json
# Dense bf16 matmul rate, FLOP/s: 788 T measured on an H200 of this workplace (8192^3, random data);
# the H100 is the same processor (the datasheets give both ~990 T).
MATMUL_PEAK = {"H100 SXM": 788e12, "H200": 788e12}
TOLERANCE = 0.35
ENV_SIZES = (4096, 65536, 262144)
ENV_VARIANTS = ("batched-cuda", "batched-cuda-sparse", "batched-cuda-next-step-bf16")
# Which tree each folder's rows ran (its README): counts are taken there (benchmarks.gpu_counts).
TREES = {
    "gpu-nvidia-h100-2026-11-26": {"env": "e295d22", "train": "93334a4", "learn": "e295d22"},
    "gpu-nvidia-h200-2026-11-26": {"env": "9a0a93e", "train": "9a0a93e", "learn": "9a0a93e"},
    "gpu-nvidia-h100-2026-11-27": {"train": "95dacb6", "learn": "95dacb6"},
    "gpu-nvidia-h100-2026-11-27b": {"env": "ee821f5", "train": "ee821f5"},
}
# The presets' end-to-end runs (their READMEs and logs): process wall clock, env steps, environments.
LEARN_ROWS = {
    "gpu-nvidia-h100-2026-11-26": {"seconds": 92.0, "env_steps": 4980736, "imitation_s": None},
    "gpu-nvidia-h200-2026-11-26": {"seconds": 155.0, "env_steps": 1998848, "imitation_s": 97.0},
    "gpu-nvidia-h100-2026-11-27": {"seconds": 281.0, "env_steps": 1998848, "imitation_s": 154.0},
}
# Loans whose host was measured slower than the others' (README): their rows are also predicted with
# this loan's own launch and sync costs, scaled by its eager training row's measured / predicted.
SLOW_HOSTS = {
    "gpu-nvidia-h100-2026-11-27": "the same loan's eager training ran 557 ms an iteration where two other "
    "H100 loans ran the same counts in 359-362 ms (README: 'that loan's host, not the code')",
}
# Rows measured on a GPU that the model does not predict, and why.
NOT_MODELLED = {
    "batched-cuda-compile": "the env step compiled by inductor: no count of its fused kernels",
    "vmas-navigation-cuda": "VMAS navigation, not this project's code",
}


@dataclasses.dataclass(frozen=True)
class Constants:
    """The model's constants (seconds per kernel / sync, fractions of the datasheet / measured peaks)."""

    launch_eager_us: float  # host cost per eager kernel (Python + dispatcher + launch)
    launch_compiled_us: float  # per eager-counted kernel of `train.compile(_rollout)` with graphs skipped
    launch_planner_us: float  # host cost per op of a scripted planner's call (uavsim.scripted)
    launch_replayed_us: float  # per kernel replayed from a CUDA graph (assumed: no committed row replayed one)
    sync_us: float  # per host sync beyond the queue it drains
    bw_fraction: float  # of the DRAM peak the counted bytes stream at
    mm_efficiency: float  # of MATMUL_PEAK the update's matmuls reach (assumed: small GEMMs, never dominant)
    process_s: float  # a training process's start, build and shutdown

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if not getattr(self, f.name) >= 0:
                raise ValueError(f"constant {f.name} must be >= 0, got {getattr(self, f.name)}")


ASSUMED = {"launch_replayed_us": 2.0, "mm_efficiency": 0.25, "sync_us": 10.0}
PLANNER_FIT_RUN = "gpu-nvidia-h200-2026-11-26"  # its imitation phase fits launch_planner_us
PROCESS_FIT_RUNS = ("gpu-nvidia-h100-2026-11-26", "gpu-nvidia-h200-2026-11-26")  # the first left in fits process_s


def gpu_of(name: str) -> str:
    """`GPUS` key of a device name ('NVIDIA H100 80GB HBM3' -> 'H100 SXM')."""
    for key in GPUS:
        if key.split()[0] in name:
            return key
    raise ValueError(f"no GPU of the model matches {name!r} (known: {sorted(GPUS)})")


# -- the arithmetic ------------------------------------------------------------------------------
def work_seconds(
    kernels: float, syncs: float, nbytes: float, flops: float, gpu: str, c: Constants, launch: str = "eager"
) -> dict[str, float]:
    """Seconds of one piece of work, and its terms (see the module docstring)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {sorted(GPUS)}")
    per = {
        "eager": c.launch_eager_us,
        "compiled": c.launch_compiled_us,
        "replayed": c.launch_replayed_us,
        "planner": c.launch_planner_us,
    }
    if launch not in per:
        raise ValueError(f"launch must be one of {sorted(per)}, got {launch!r}")
    host = kernels * per[launch] * 1e-6
    memory = nbytes / (c.bw_fraction * GPUS[gpu]) if nbytes else 0.0
    matmul = flops / (c.mm_efficiency * MATMUL_PEAK[gpu]) if flops else 0.0
    sync = syncs * c.sync_us * 1e-6
    return {
        "seconds": max(host, memory + matmul) + sync,
        "launches": host,
        "memory": memory,
        "matmul": matmul,
        "syncs": sync,
    }


def scaled(terms: dict[str, float], times: float) -> dict[str, float]:
    return {k: v * times for k, v in terms.items()}


TERMS = ("seconds", "launches", "memory", "matmul", "syncs")


def total(parts: dict[str, dict[str, float]]) -> dict[str, float]:
    """The sum of ``parts``' terms (`TERMS`; shares such as 'rollout launches' are not summed)."""
    return {k: sum(terms.get(k, 0.0) for terms in parts.values()) for k in TERMS}


def env_step(counts: dict, variant: str, envs: int, gpu: str, c: Constants) -> dict[str, float]:
    """One env step of ``envs`` environments: kernels and syncs from the 256-env count (every step
    has resets there, as at thousands), bytes per env-step times ``envs``."""
    k = counts[variant]["256"]
    return work_seconds(k["kernels"], k["syncs"], k["bytes_per_env_step"] * envs, 0.0, gpu, c)


def iteration_fit(it: dict) -> dict[str, float]:
    """Per-iteration counts from the three counted shapes (envs x steps = 16x18, 32x18, 16x36):
    kernels and syncs ``a + b x steps`` (checked equal at the two batch sizes), bytes and FLOPs
    ``p + r x steps + q x envs x steps`` (weights are read once per step and per minibatch,
    activations and storage once per env-step)."""
    a, b, d = it["16x18"], it["32x18"], it["16x36"]
    if not (
        a["steps"] == b["steps"] and a["envs"] == d["envs"] and b["envs"] != a["envs"] and d["steps"] != a["steps"]
    ):
        raise ValueError("iteration counts need shapes (E, T), (E', T) and (E, T') with E != E' and T != T'")
    dt = d["steps"] - a["steps"]
    out = {
        "kernels_per_step": (d["kernels"] - a["kernels"]) / dt,
        "syncs_per_step": (d["syncs"] - a["syncs"]) / dt,
        "same_kernels_at_two_batches": a["kernels"] == b["kernels"],
    }
    out["kernels_fixed"] = a["kernels"] - out["kernels_per_step"] * a["steps"]
    out["syncs_fixed"] = a["syncs"] - out["syncs_per_step"] * a["steps"]
    for k in ("bytes", "flops"):
        q = (b[k] - a[k]) / ((b["envs"] - a["envs"]) * a["steps"])
        r = (d[k] - a[k] - q * a["envs"] * dt) / dt
        out[f"{k}_per_env_step"], out[f"{k}_per_step"] = q, r
        out[f"{k}_fixed"] = a[k] - r * a["steps"] - q * a["envs"] * a["steps"]
    return out


def iteration_counts(it: dict, envs: int, steps: int) -> dict[str, float]:
    """Kernels, syncs, bytes and FLOPs of one iteration of ``envs`` x ``steps`` (`iteration_fit`)."""
    f = iteration_fit(it)
    out = {k: f[f"{k}_fixed"] + f[f"{k}_per_step"] * steps for k in ("kernels", "syncs")}
    for k in ("bytes", "flops"):
        out[k] = f[f"{k}_fixed"] + f[f"{k}_per_step"] * steps + f[f"{k}_per_env_step"] * envs * steps
    return out


def iteration(it: dict, envs: int, steps: int, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    n = iteration_counts(it, envs, steps)
    return work_seconds(n["kernels"], n["syncs"], n["bytes"], n["flops"], gpu, c, launch)


def per_call(call: dict, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    """A counted call (kernels, syncs, bytes, FLOPs, at the batch it ran) as `work_seconds`."""
    return work_seconds(call["kernels"], call["syncs"], call["bytes"], call["flops"], gpu, c, launch)


def cloning(mb: dict, im: dict, gpu: str, c: Constants, launch: str = "eager") -> dict[str, float]:
    """Behaviour cloning's passes: ``im``'s epochs over its frames (``epochs``, ``frames``,
    ``minibatch_steps``) in minibatches counted as ``mb``, launched as ``launch``; each epoch adds its
    read of the loss and accuracy (a host sync) and, where counted (``mb["epoch"]``), its own ops."""
    minibatches = sum(e * (f // im["minibatch_steps"]) for e, f in zip(im["epochs"], im["frames"]))
    epoch = mb.get("epoch", {"kernels": 0, "syncs": 0, "bytes": 0, "flops": 0})
    epochs = sum(im["epochs"])
    return total(
        {
            "mb": scaled(per_call(mb, gpu, c, launch), minibatches),
            "epochs": scaled(per_call(epoch | {"syncs": epoch["syncs"] + 1}, gpu, c, launch), epochs),
        }
    )


def learn_run(
    lc: dict,
    envs: int,
    steps: int,
    env_steps: float,
    eval_interval: float,
    gpu: str,
    c: Constants,
    launch: str = "eager",
    planner_syncs: float | None = None,
) -> dict[str, dict[str, float]]:
    """A training run's phases, each `work_seconds`' terms summed: ``lc`` is a `gpu_counts` learn
    count; ``launch`` is the PPO iterations' launch mode; ``planner_syncs`` replaces the planner's
    counted host syncs per call (a design's)."""
    iterations = env_steps / (envs * steps)
    parts = {"process": {"seconds": c.process_s, "launches": 0, "memory": 0, "matmul": 0, "syncs": 0}}
    im = lc.get("imitation")
    if im:
        call = dict(im["demo_call"])
        if planner_syncs is not None:
            call["syncs"] = planner_syncs
        demo = per_call(call, gpu, c, launch="planner")
        dagger = total({"call": demo, "policy": per_call(im["dagger_policy_step"], gpu, c)})
        parts["imitation: planner calls"] = scaled(demo, im["demo_steps"])
        parts["imitation: DAgger steps"] = scaled(dagger, im["dagger_rounds"] * im["dagger_steps"])
        parts["imitation: cloning"] = cloning(im["clone_minibatch"], im, gpu, c)
    one = iteration(lc["iteration"], envs, steps, gpu, c, launch)
    rollout = work_seconds(iteration_fit(lc["iteration"])["kernels_per_step"] * steps, 0, 0, 0, gpu, c, launch)
    parts["PPO iterations"] = scaled(one, iterations)
    parts["PPO iterations"]["rollout launches"] = rollout["launches"] * iterations  # a share of its launches
    parts |= evaluation_parts(lc, env_steps, eval_interval, gpu, c)
    return parts


def evaluation_parts(lc: dict, env_steps: float, eval_interval: float, gpu: str, c: Constants) -> dict[str, dict]:
    """The in-training evaluations and the planners' reference episodes they compute once; none where
    the run does not evaluate (``eval_interval`` 0: the GPU recipe's)."""
    if eval_interval <= 0:
        return {}
    evals = int(env_steps // eval_interval)
    if "eval_episode_argmax" not in lc:
        raise ValueError("these counts were taken at run.eval_interval 0: count the run again to predict evaluations")
    parts = {}
    episodes = total({k: per_call(lc[k], gpu, c) for k in ("eval_episode_argmax", "eval_episode_sampled")})
    # and one more argmax episode for the logged image (`first_episode_frames`)
    parts["in-training evaluations"] = scaled(
        total({"2": episodes, "img": per_call(lc["eval_episode_argmax"], gpu, c)}), evals
    )
    steps_per_episode = lc["eval_steps"]
    parts["planners' reference episodes (once)"] = total(
        {
            t: scaled(per_call(lc[f"eval_baseline_{t}_call"], gpu, c, launch="planner"), steps_per_episode)
            for t in ("greedy", "coordinated")
        }
    )
    return parts


# -- the measured rows ---------------------------------------------------------------------------
def env_rows(folder: Path) -> list[dict[str, Any]]:
    """The env benchmarks' GPU rows at `ENV_SIZES` (ours, VMAS beside ours, the compiled step): from
    their JSON files, or, where a folder has none, from its logs' lines."""
    rows = []
    files = sorted(folder.glob("env_throughput-*nvidia-*.json"))
    for f in files:
        d = json.loads(f.read_text())
        gpu = gpu_of(d["machine"]["gpu"])
        run = " [beside VMAS]" if "-vmas-" in f.name else " [compile run]" if "-compile-" in f.name else ""
        for r in d["results"]:
            if r["device"] == "cuda" and r["num_envs"] in ENV_SIZES:
                rows.append(
                    {"source": f.name, "gpu": gpu, "variant": r["backend"], "envs": r["num_envs"], "run": run}
                    | {"rate": r.get("env_steps_per_s")}
                )
    if not files:
        for log in sorted(folder.glob("log-*.txt")):
            text = log.read_text(errors="replace")
            gpu = gpu_of(re.search(r"^NVIDIA [^,]+", text, re.M).group(0))
            for m in re.finditer(r"^(batched-cuda\S*)\s+(\d+) envs\s+([\d.]+)([kM]?) env-steps/s", text, re.M):
                envs = int(m.group(2))
                if envs in ENV_SIZES:
                    rate = float(m.group(3)) * {"": 1, "k": 1e3, "M": 1e6}[m.group(4)]
                    rows.append(
                        {"source": log.name, "gpu": gpu, "variant": m.group(1), "envs": envs, "run": " [log]"}
                        | {"rate": rate}
                    )
    return rows


def train_rows(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(folder.glob("train_throughput-nvidia-*.json")):
        d = json.loads(f.read_text())
        s = d["settings"]
        for r in d["results"]:
            rows.append(
                {
                    "source": f.name,
                    "gpu": gpu_of(d["machine"]["gpu"]),
                    "pipeline": r["pipeline"],
                    "envs": s["num_envs"],
                    "steps": s["num_steps"],
                    "epochs": s["epochs"],
                    "minibatches": s["minibatches"],
                    "agent_steps": s["num_envs"] * s["num_steps"] * d["num_uavs"],
                    "rate": r["agent_steps_per_s"],
                }
            )
    return rows


def measured_rows(results: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    """Every GPU row of ``results/gpu-*``, each with ``measured_s`` (per env step, per training
    iteration, or per run) and the tree that ran it (`TREES`)."""
    rows = []
    for folder in sorted(results.glob("gpu-*")):
        trees = TREES.get(folder.name)
        if trees is None:
            raise ValueError(f"{folder.name}: no tree named in gpu_model.TREES; add the commit its README names")
        for r in env_rows(folder):
            r.update(kind="env", folder=folder.name, tree=trees["env"])
            r["measured_s"] = r["envs"] / r["rate"] if r["rate"] else None
            r["row"] = f"env {r['variant']} {r['envs']:,} envs{r.pop('run')}"
            rows.append(r)
        for r in train_rows(folder):
            r.update(kind="train", folder=folder.name, tree=trees["train"])
            r["measured_s"] = r["agent_steps"] / r["rate"]
            r["row"] = (
                f"train {'captured' if r['pipeline'].endswith('captured') else 'eager'} {r['envs']:,} x {r['steps']}"
            )
            rows.append(r)
        if (folder / "learn").is_dir():
            lr = LEARN_ROWS[folder.name]
            cfg = yaml.safe_load((folder / "learn" / "config.yaml").read_text())
            envs, steps = cfg["env"]["num_envs"], cfg["train"]["num_steps"]
            rows.append(
                {
                    "kind": "learn",
                    "folder": folder.name,
                    "tree": trees["learn"],
                    "source": "learn/config.yaml, README",
                    "gpu": gpu_of(folder.name.replace("-", " ").upper()),
                    "envs": envs,
                    "steps": steps,
                    "eval_interval": cfg["run"]["eval_interval"],
                    "env_steps": lr["env_steps"],
                    "imitation_s": lr["imitation_s"],
                    "measured_s": lr["seconds"],
                    "row": f"learn: the preset, {envs} envs, {lr['env_steps'] / 1e6:.2f}M steps",
                }
            )
            if lr["imitation_s"]:  # the phase the log times ('imitation of coordinated: ... N s')
                phase = dict(rows[-1], kind="imitation", measured_s=lr["imitation_s"])
                phase["row"] = "learn: its imitation phase"
                rows.append(phase)
    return rows


# -- prediction and fit --------------------------------------------------------------------------
def predict(row: dict, counts: dict, c: Constants) -> dict[str, Any]:
    """``{"seconds", "terms", "parts"?}`` for a measured row."""
    gpu, tree = row["gpu"], row["tree"]
    section = {"env": "env", "train": "trainer", "learn": "learn", "imitation": "learn"}[row["kind"]]
    if tree not in counts.get(section, {}):
        return {"seconds": None, "why": f"no {section} counts of tree {tree} in {COUNTS.name}"}
    if row["kind"] == "env":
        if row["variant"] not in ENV_VARIANTS:
            return {"seconds": None, "why": NOT_MODELLED.get(row["variant"], "not modelled")}
        terms = env_step(counts["env"][tree], row["variant"], row["envs"], gpu, c)
        return {"seconds": terms["seconds"], "terms": terms}
    if row["kind"] == "train":
        it = counts["trainer"][tree]
        if (it["epochs"], it["minibatches"]) != (row["epochs"], row["minibatches"]):
            raise ValueError(
                f"{row['row']}: counted {it['epochs']}x{it['minibatches']} minibatches, "
                f"ran {row['epochs']}x{row['minibatches']}"
            )
        launch = "compiled" if row["pipeline"].endswith("captured") else "eager"
        terms = iteration(it, row["envs"], row["steps"], gpu, c, launch)
        return {"seconds": terms["seconds"], "terms": terms}
    parts = learn_run(counts["learn"][tree], row["envs"], row["steps"], row["env_steps"], row["eval_interval"], gpu, c)
    if row["kind"] == "imitation":
        parts = {k: v for k, v in parts.items() if k.startswith("imitation")}
    terms = total(parts)
    return {"seconds": terms["seconds"], "terms": terms, "parts": parts}


def largest_term(terms: dict[str, float]) -> str:
    shown = {k: v for k, v in terms.items() if k in TERMS[1:]}
    return max(shown, key=shown.get)


def fit(rows: list[dict], counts: dict, exclude: frozenset = frozenset()) -> tuple[Constants, dict[str, list[str]]]:
    """Fit the constants on named rows (``exclude``: row keys left out, for leave-one-out), in order:

    launch_eager_us     env rows at 4,096 envs without host syncs (default and next-step variants):
                        launch-bound, so time / kernels;
    bw_fraction         env rows at 262,144 envs (same variants): bandwidth-bound, bytes / time
                        over the DRAM peak;
    launch_compiled_us  the captured training rows: time / (eager-counted) kernels;
    each the geometric mean over its rows (least squares on log(predicted / measured));
    launch_planner_us   the imitation phase of the 155 s run (97 s, its log): the host cost per op
                        of the scripted planners' calls (their many small ops run faster than the
                        env step's);
    process_s           what the 92 s run (no imitation) leaves of its wall clock: the process's
                        start, checkpoints, event files and evaluation images (host work not counted);
    sync_us             assumed (`ASSUMED`): no row separates a planner call's syncs from its ops.
    The 281 s run, the env rows at 65,536 and every sparse row are fitted on nothing."""
    used: dict[str, list[str]] = {}
    pick = lambda cond: [r for r in rows if cond(r) and key(r) not in exclude and r["measured_s"]]  # noqa: E731
    base = dict(ASSUMED, launch_eager_us=1.0, launch_compiled_us=1.0, launch_planner_us=1.0, bw_fraction=1.0)
    base["process_s"] = 0.0

    plain = lambda r: r["kind"] == "env" and r["variant"] in ("batched-cuda", "batched-cuda-next-step-bf16")  # noqa: E731
    sel = pick(lambda r: plain(r) and r["envs"] == 4096)
    base["launch_eager_us"] = statistics.geometric_mean(
        r["measured_s"] / counts["env"][r["tree"]][r["variant"]]["256"]["kernels"] * 1e6 for r in sel
    )
    used["launch_eager_us"] = [key(r) for r in sel]
    sel = pick(lambda r: plain(r) and r["envs"] == 262144)
    base["bw_fraction"] = statistics.geometric_mean(
        counts["env"][r["tree"]][r["variant"]]["256"]["bytes_per_env_step"]
        * r["envs"]
        / r["measured_s"]
        / GPUS[r["gpu"]]
        for r in sel
    )
    used["bw_fraction"] = [key(r) for r in sel]
    sel = pick(lambda r: r["kind"] == "train" and r["pipeline"].endswith("captured"))
    implied = [
        r["measured_s"] / iteration_counts(counts["trainer"][r["tree"]], r["envs"], r["steps"])["kernels"] * 1e6
        for r in sel
    ]
    base["launch_compiled_us"] = statistics.geometric_mean(implied)
    used["launch_compiled_us"] = [key(r) for r in sel]
    # launch_planner_us on the imitation phase the H200 run timed; process_s on what the 92 s run
    # (no imitation) leaves, or, with that row left out, the 155 s run.
    sel = pick(lambda r: r["kind"] == "imitation" and r["folder"] == PLANNER_FIT_RUN)
    if sel:
        r = sel[0]
        at = lambda x: predict(r, counts, Constants(**base | {"launch_planner_us": x}))["seconds"]  # noqa: E731
        lo, hi = 0.0, 1000.0  # the phase's time rises with the per-op cost
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if at(mid) < r["measured_s"] else (lo, mid)
        base["launch_planner_us"] = lo
        used["launch_planner_us"] = [key(r)]
    else:
        base["launch_planner_us"] = base["launch_eager_us"]
        used["launch_planner_us"] = ["(as launch_eager_us: its fitting row left out)"]
    for folder in PROCESS_FIT_RUNS:
        sel = pick(lambda r, folder=folder: r["kind"] == "learn" and r["folder"] == folder)
        if sel:
            r = sel[0]
            base["process_s"] = max(0.0, r["measured_s"] - predict(r, counts, Constants(**base))["seconds"])
            used["process_s"] = [key(r)]
            break
    return Constants(**base), used


def key(row: dict) -> str:
    return f"{row['folder']}: {row['row']}"


# -- report --------------------------------------------------------------------------------------
def evaluate_rows(rows: list[dict], counts: dict, c: Constants) -> list[dict[str, Any]]:
    """Each row with its prediction, the ratio predicted / measured, and what a miss names."""
    out = []
    for r in rows:
        p = predict(r, counts, c)
        row = {k: v for k, v in r.items() if k not in ("rate",)} | {"measured_rate": r.get("rate")}
        row["predicted_s"] = p["seconds"]
        if p["seconds"] is None or not r["measured_s"]:
            failed = "no measurement: the step failed at this size (its JSON's error)"
            row.update(ratio=None, within=None, note=failed if not r["measured_s"] else p.get("why", ""))
        else:
            row["ratio"] = p["seconds"] / r["measured_s"]
            row["within"] = abs(row["ratio"] - 1) <= TOLERANCE
            row["terms"] = p["terms"]
            row["bound_by"] = largest_term(p["terms"])
            if "parts" in p:
                row["parts"] = p["parts"]
            row["note"] = "" if row["within"] else miss_note(row)
        out.append(row)
    for r in out:  # a slow loan's rows again, with its own host costs
        if r["folder"] in SLOW_HOSTS and r["ratio"] is not None and not r.get("pipeline", "").endswith("captured"):
            eager = next(e for e in out if e["folder"] == r["folder"] and e.get("pipeline") == "ours")
            factor = 1 / eager["ratio"]
            c2 = dataclasses.replace(
                c,
                launch_eager_us=c.launch_eager_us * factor,
                launch_planner_us=c.launch_planner_us * factor,
                sync_us=c.sync_us * factor,
            )
            r["host_factor"] = factor
            r["ratio_with_loan_host"] = predict(r, counts, c2)["seconds"] / r["measured_s"]
            if r is not eager:
                r["note"] += (
                    f" This loan's eager training ran x{factor:.2f} the model's time ({SLOW_HOSTS[r['folder']]}); "
                    f"with launch and sync costs scaled by that, this row's ratio would be "
                    f"{r['ratio_with_loan_host']:.2f}."
                )
            else:
                head = "" if r["within"] else "misses the launches term: "
                r["note"] = f"{head}this loan's host: {SLOW_HOSTS[r['folder']]}"
    return out


def miss_note(row: dict) -> str:
    """What a row outside the tolerance misses: its largest term, over- or under-predicted."""
    way = "over" if row["ratio"] > 1 else "under"
    return f"misses: {row['bound_by']} term {way}-predicted ({row['ratio']:.2f}x)"


def leave_one_out(rows: list[dict], counts: dict, used: dict[str, list[str]]) -> dict[str, float]:
    """For each row a constant was fitted on: its ratio when the constants are refitted without it."""
    out = {}
    for k in sorted({k for ks in used.values() for k in ks if not k.startswith("(")}):
        c, _ = fit(rows, counts, exclude=frozenset({k}))
        r = next(r for r in rows if key(r) == k)
        out[k] = predict(r, counts, c)["seconds"] / r["measured_s"]
    return out


# -- `make train` on a CUDA machine ----------------------------------------------------------------
PRESET = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"  # `make train`'s preset
# What `make train` runs on one GPU, each predicted from a count of the working tree (`gpu_counts`
# output ``learn-today-<name>.json``, merged under ``today-<name>``): the run.recipe it resolves to
# and the overrides after it.
RECIPES = {
    "gpu": {"recipe": "gpu", "overrides": [], "what": "the GPU recipe: configs/recipe_gpu.yaml over the preset"},
    "preset-256": {
        "recipe": "preset",
        "overrides": ["env.num_envs=256"],
        "what": "the preset alone at 256 envs, as CUDA ran it before the recipe (212 s predicted on 954f86d, "
        "before the planner's one host read a call)",
    },
}
MAKE_TRAIN_GPUS = ("H100 SXM", "H200")
TARGET_S = 60.0  # issue 48: `make train` on one H100/H200 in <= 60 s
# Designs predicted for the GPU recipe: config overrides over it (read through the config, as a run
# would), and how the PPO iterations and the cloning minibatches launch.
DESIGNS = {
    "as configured (PPO and cloning eager)": {},
    "PPO iterations replayed as CUDA graphs": {"launch": "replayed"},
    "cloning at half the epochs (10 + 5 + 5: min_accuracy_gain stopping each fit there)": {
        "overrides": ["imitation.epochs=10", "imitation.dagger_epochs=5"]
    },
    "cloning at a quarter of the epochs (5 + 3 + 3)": {
        "overrides": ["imitation.epochs=5", "imitation.dagger_epochs=3"]
    },
    "cloning minibatches of 4,096 frames (imitation.minibatch_steps=4096: a quarter of the minibatches)": {
        "overrides": ["imitation.minibatch_steps=4096"]
    },
    "cloning minibatches replayed as a CUDA graph": {"clone_launch": "replayed"},
    "train.num_steps=8 (eager)": {"overrides": ["train.num_steps=8"]},
    "train.num_minibatches=4 (eager)": {"overrides": ["train.num_minibatches=4"]},
    "PPO replayed + cloning minibatches of 4,096 frames": {
        "launch": "replayed",
        "overrides": ["imitation.minibatch_steps=4096"],
    },
    "PPO and cloning minibatches replayed": {"launch": "replayed", "clone_launch": "replayed"},
}


def recipe_config(name: str, overrides: list[str] = ()):
    """The config `make train` runs under `RECIPES[name]` (the files as `agents.config.recipe` lays
    them), with ``overrides`` after the recipe's own."""
    from agents.config import load_config
    from agents.config.recipe import recipe_paths
    from agents.config.schema import Recipe

    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {sorted(RECIPES)}")
    r = RECIPES[name]
    paths = recipe_paths(PRESET, Recipe(r["recipe"]))
    return load_config(paths, [*r["overrides"], *overrides, "run.device=cpu", "run.torch_threads=0"])


def run_shape(cfg) -> dict[str, Any]:
    """What a run of ``cfg`` (an `agents.config.Config`) does, read from it: its PPO iterations'
    shape and count, its evaluations, and its imitation's demonstration batch, planner calls and
    cloning passes (as `agents.algo.imitation.warm_start` plays them on one task and one rank)."""
    from agents.algo.imitation import demo_env_shape

    tc, ic = cfg.train, cfg.imitation
    envs, steps = cfg.env.num_envs, tc.num_steps
    if not isinstance(envs, int):
        raise ValueError(f"env.num_envs must be resolved to a number to predict a run, got {envs!r}")
    iterations = cfg.num_iterations()
    shape = {
        "envs": envs,
        "steps": steps,
        "iterations": iterations,
        "env_steps": iterations * envs * steps,
        "epochs": tc.update_epochs,
        "minibatches": tc.num_minibatches,
        "eval_interval": cfg.run.eval_interval,
    }
    if ic.teacher.value != "none":
        demo_envs, demo_steps = demo_env_shape(ic.env_steps, ic.steps_per_env or cfg.env.max_steps, envs)
        dagger_steps = math.ceil(ic.dagger_env_steps / demo_envs)
        shape["imitation"] = {
            "demo_envs": demo_envs,
            "demo_steps": demo_steps,
            "dagger_rounds": ic.dagger_rounds,
            "dagger_steps": dagger_steps,
            "epochs": [ic.epochs] + [ic.dagger_epochs] * ic.dagger_rounds,
            "frames": [(demo_steps + r * dagger_steps) * demo_envs for r in range(ic.dagger_rounds + 1)],
            "minibatch_steps": ic.minibatch_steps,
            "min_accuracy_gain": ic.min_accuracy_gain,
        }
    return shape


COUNT_KEYS = ("kernels", "syncs", "bytes", "flops")


def minibatch_share(it: dict) -> dict[str, float]:
    """What one more PPO minibatch costs an iteration (its share of every epoch), from the first
    counted shape at the config's minibatches and at twice as many (``minibatches_x2``)."""
    more, base = it["minibatches_x2"], it[f"{it['minibatches_x2']['envs']}x{it['minibatches_x2']['steps']}"]
    added = it["epochs"] * (more["minibatches"] - it["minibatches"])
    return {k: (more[k] - base[k]) / added for k in COUNT_KEYS}


def ppo_iteration(lc: dict, shape: dict) -> tuple[dict[str, float], float, str]:
    """Counts of one PPO iteration of ``shape``, its rollout's kernels, and where they come from: the
    count at the run's own shape (``run_iteration``: rollout, update and the rest) where it was taken
    at this shape, else the small-shape fit (`iteration_fit`) with the per-minibatch share for a
    changed `train.num_minibatches`."""
    ri = lc.get("run_iteration")
    here = (shape["envs"], shape["steps"], shape["epochs"], shape["minibatches"])
    if ri and (ri["envs"], ri["steps"], ri["epochs"], ri["minibatches"]) == here:
        whole = {k: sum(ri[p][k] for p in ("rollout", "update", "rest")) for k in COUNT_KEYS}
        return whole, ri["rollout"]["kernels"], "counted at the run's shape"
    it = lc["iteration"]
    if shape["epochs"] != it["epochs"]:
        raise ValueError(f"counted at {it['epochs']} PPO epochs, the config runs {shape['epochs']}: count again")
    whole = iteration_counts(it, shape["envs"], shape["steps"])
    if shape["minibatches"] != it["minibatches"]:
        if "minibatches_x2" not in it:
            raise ValueError("these counts have no per-minibatch share: count again for a changed num_minibatches")
        share = minibatch_share(it)
        extra = shape["epochs"] * (shape["minibatches"] - it["minibatches"])
        whole = {k: whole[k] + extra * share[k] for k in COUNT_KEYS}
    rollout = iteration_fit(it)["kernels_per_step"] * shape["steps"]
    return whole, rollout, "fitted on the small shapes"


def clone_minibatch_at(im: dict, rows: int) -> dict[str, Any]:
    """Counts of one cloning minibatch of ``rows`` frames: kernels and syncs as counted (the same at
    both counted sizes), bytes and FLOPs on the line through the two counted sizes; with what an
    epoch adds (``epoch``) where it was counted."""
    a = im["clone_minibatch"]
    epoch = {"epoch": a["epoch"]} if "epoch" in a else {}
    if rows == a["rows_per_minibatch"]:
        return {k: a[k] for k in COUNT_KEYS} | epoch
    b = im.get("clone_minibatch_x4")
    if b is None:
        counted_rows = a["rows_per_minibatch"]
        raise ValueError(f"cloning counted at {counted_rows} frames a minibatch only; count again for {rows}")
    t = (rows - a["rows_per_minibatch"]) / (b["rows_per_minibatch"] - a["rows_per_minibatch"])
    return {k: a[k] for k in ("kernels", "syncs")} | {k: a[k] + t * (b[k] - a[k]) for k in ("bytes", "flops")} | epoch


def recipe_parts(
    lc: dict,
    shape: dict,
    gpu: str,
    c: Constants,
    launch: str = "eager",
    clone_launch: str = "eager",
) -> dict[str, dict[str, float]]:
    """A run of ``shape`` (`run_shape`) phase by phase from a learn count ``lc`` of the same tree:
    start-up, demonstrations and DAgger's planner calls, cloning, PPO iterations (launched as
    ``launch``), evaluations where the run makes any."""
    parts = {"process (start-up, checkpoints, shut-down)": work_seconds(0, 0, 0, 0, gpu, c) | {"seconds": c.process_s}}
    im, counted_im = shape.get("imitation"), lc.get("imitation")
    if im:
        if counted_im is None or counted_im["demo_envs"] != im["demo_envs"]:
            got = counted_im and counted_im["demo_envs"]
            raise ValueError(f"planner counted at {got} envs a call, the config plays {im['demo_envs']}: count again")
        demo = per_call(counted_im["demo_call"], gpu, c, launch="planner")
        dagger = total({"call": demo, "policy": per_call(counted_im["dagger_policy_step"], gpu, c)})
        parts["imitation: demonstrations (planner calls)"] = scaled(demo, im["demo_steps"])
        dagger_calls = im["dagger_rounds"] * im["dagger_steps"]
        parts["imitation: DAgger (planner calls + policy steps)"] = scaled(dagger, dagger_calls)
        mb = clone_minibatch_at(counted_im, im["minibatch_steps"])
        parts["imitation: cloning"] = cloning(mb, im, gpu, c, clone_launch)
    counts, rollout_kernels, _ = ppo_iteration(lc, shape)
    one = work_seconds(counts["kernels"], counts["syncs"], counts["bytes"], counts["flops"], gpu, c, launch)
    parts["PPO iterations"] = scaled(one, shape["iterations"])
    rollout = work_seconds(rollout_kernels, 0, 0, 0, gpu, c, launch)["launches"]
    parts["PPO iterations"]["rollout launches"] = rollout * shape["iterations"]  # a share of its launches
    parts |= evaluation_parts(lc, shape["env_steps"], shape["eval_interval"], gpu, c)
    return parts


def make_train(counts: dict, c: Constants) -> dict[str, Any]:
    """`make train` on one GPU (`MAKE_TRAIN_GPUS`) under each of `RECIPES` whose count of the working
    tree is in ``counts``, phase by phase, and the GPU recipe's designs (`DESIGNS`)."""
    out: dict[str, Any] = {"target_s": TARGET_S, "recipes": {}, "designs": {}}
    for name, r in RECIPES.items():
        lc = counts["learn"].get(f"today-{name}")
        if lc is None:
            continue
        shape = run_shape(recipe_config(name))
        entry = {"what": r["what"], "tree": lc.get("commit"), "shape": shape, "gpus": {}}
        entry["ppo_source"] = ppo_iteration(lc, shape)[2]
        for gpu in MAKE_TRAIN_GPUS:
            parts = recipe_parts(lc, shape, gpu, c)
            entry["gpus"][gpu] = {"seconds": total(parts)["seconds"], "parts": parts}
        entry["counts"] = behind(lc, shape)
        out["recipes"][name] = entry
    lc = counts["learn"].get("today-gpu")
    if lc is not None:
        for name, d in DESIGNS.items():
            shape = run_shape(recipe_config("gpu", d.get("overrides", [])))
            row = {"overrides": d.get("overrides", []), "launch": d.get("launch", "eager")}
            row["clone_launch"] = d.get("clone_launch", "eager")
            for gpu in MAKE_TRAIN_GPUS:
                parts = recipe_parts(lc, shape, gpu, c, row["launch"], row["clone_launch"])
                row[gpu] = {"seconds": total(parts)["seconds"]} | {k: v["seconds"] for k, v in parts.items()}
            out["designs"][name] = row
    return out


def behind(lc: dict, shape: dict) -> dict[str, float]:
    """The counts a `make_train` prediction stands on, as the report lists them."""
    counts, rollout, _ = ppo_iteration(lc, shape)
    out = {
        "PPO iteration: kernels": counts["kernels"],
        "PPO iteration: rollout kernels (policy and env steps)": rollout,
        "PPO iteration: update kernels (GAE, clone log-probs, epochs x minibatches) and the rest": counts["kernels"]
        - rollout,
        "PPO iteration: GB counted": counts["bytes"] / 1e9,
        "PPO iterations": shape["iterations"],
    }
    ri = lc.get("run_iteration")
    if ri and out["PPO iteration: kernels"] == sum(ri[p]["kernels"] for p in ("rollout", "update", "rest")):
        mbs = ri["epochs"] * ri["minibatches"]
        rows = shape["envs"] * shape["steps"] // shape["minibatches"]
        out[f"PPO minibatch ({rows:,} env steps) with its share of GAE: kernels"] = ri["update"]["kernels"] / mbs
        out[f"PPO minibatch ({rows:,} env steps) with its share of GAE: GB counted"] = ri["update"]["bytes"] / mbs / 1e9
    im, cim = shape.get("imitation"), lc.get("imitation")
    if im:
        mb = clone_minibatch_at(cim, im["minibatch_steps"])
        out |= {
            f"planner call + env step at {im['demo_envs']:,} envs: kernels": cim["demo_call"]["kernels"],
            f"planner call + env step at {im['demo_envs']:,} envs: host syncs": cim["demo_call"]["syncs"],
            f"planner call + env step at {im['demo_envs']:,} envs: GB counted": cim["demo_call"]["bytes"] / 1e9,
            "planner calls (demonstrations + DAgger)": im["demo_steps"] + im["dagger_rounds"] * im["dagger_steps"],
            f"cloning minibatch ({im['minibatch_steps']:,} frames): kernels": mb["kernels"],
            "cloning minibatches": sum(e * (f // im["minibatch_steps"]) for e, f in zip(im["epochs"], im["frames"])),
        }
    return out


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.1f} s"


def report(payload: dict) -> str:
    c, used = payload["constants"], payload["fitted_on"]
    lines = [
        "# GPU model: predicted beside measured",
        "",
        "`benchmarks/gpu_model.py` (the arithmetic: its docstring) over the counts of "
        "`benchmarks/gpu_counts.py`, taken on the CPU on the tree each row ran "
        f"({', '.join(sorted(payload['trees']))}; `{COUNTS.name}`). Ratio = predicted / measured; "
        f"within = inside +-{TOLERANCE:.0%}. Env rows: seconds per env step; training rows: per iteration; "
        "learn rows: the process's wall clock.",
        "",
        "| folder | row | tree | measured | predicted | ratio | within | bound by | note |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in payload["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        within = "-" if r["within"] is None else ("yes" if r["within"] else "**no**")
        loo = payload["leave_one_out"].get(key(r))
        note = r["note"] + (f" fitted on; left out: {loo:.2f}" if loo is not None else "")
        lines.append(
            f"| {r['folder'].removeprefix('gpu-nvidia-')} | {r['row']} | {r['tree']} | {fmt_s(r['measured_s'])} | "
            f"{fmt_s(r['predicted_s'])} | {ratio} | {within} | {r.get('bound_by', '-')} | {note.strip()} |"
        )
    n = [r for r in payload["rows"] if r["ratio"] is not None]
    lines += [
        "",
        f"{sum(r['within'] for r in n)} of {len(n)} predicted rows within +-{TOLERANCE:.0%}; "
        f"{len(payload['rows']) - len(n)} rows not predicted (note says why).",
        "",
        "## Constants",
        "",
        "| constant | value | fitted on |",
        "|---|---:|---|",
    ]
    for name, value in c.items():
        src = "; ".join(used.get(name, [])) or f"assumed ({ASSUMED_WHY[name]})"
        lines.append(f"| {name} | {value:.4g} | {src} |")
    lines += ["", "## The runs, phase by phase", ""]
    for r in payload["rows"]:
        if r["kind"] == "learn" and "parts" in r:
            imitation = f", imitation {r['imitation_s']:.0f} s" if r["imitation_s"] else ""
            lines += [f"**{r['folder']}** ({r['tree']}, measured {r['measured_s']:.0f} s{imitation})", ""]
            lines += phase_table(r["parts"])
    lines += make_train_report(payload.get("make_train") or {})
    lines += ["## How the rows were counted, and what the model leaves out", ""] + [f"- {x}" for x in CAVEATS]
    return "\n".join(lines) + "\n"


def make_train_report(mt: dict) -> list[str]:
    """The `make_train` section: each recipe's total and phases on each GPU, the designs, the counts."""
    if not mt.get("recipes"):
        return []
    gpus = MAKE_TRAIN_GPUS
    lines = [
        "## `make train` on one GPU, from counts of the working tree",
        "",
        f"Target (issue 48): <= {mt['target_s']:.0f} s on one H100/H200. Each recipe is read from the config "
        "files as `make train` lays them (`agents.config.recipe`), each phase predicted from counts of the "
        "working tree at the run's own batch (`gpu_counts.py --what learn`; the commands: its docstring).",
        "",
        "| recipe | tree | envs x steps | iterations | " + " | ".join(gpus) + " |",
        "|---|---|---|---:|" + "---:|" * len(gpus),
    ]
    for name, e in mt["recipes"].items():
        sh = e["shape"]
        cells = " | ".join(
            f"**{e['gpus'][g]['seconds']:.1f} s**"
            + (" (<= target)" if e["gpus"][g]["seconds"] <= mt["target_s"] else " (over)")
            for g in gpus
        )
        lines.append(
            f"| {name}: {e['what']} | {e['tree']} | {sh['envs']:,} x {sh['steps']} | {sh['iterations']} | {cells} |"
        )
    lines += [
        "",
        f"A prediction, not a bound: where a run's predicted / measured falls as the rows above do (within "
        f"+-{TOLERANCE:.0%}), a prediction of P seconds is a measurement between P / {1 + TOLERANCE:.2f} and "
        f"P / {1 - TOLERANCE:.2f}.",
    ]
    for name, e in mt["recipes"].items():
        sh = e["shape"]
        im = sh.get("imitation")
        lines += ["", f"### {name}, phase by phase", ""]
        if im:
            lines += [
                f"Demonstrations {im['demo_envs']:,} envs x {im['demo_steps']} steps, DAgger {im['dagger_rounds']} x "
                f"{im['dagger_steps']} steps; cloning {' + '.join(map(str, im['epochs']))} epochs over "
                f"{', '.join(f'{f:,}' for f in im['frames'])} frames, {im['minibatch_steps']:,} a minibatch"
                + (
                    f" (min_accuracy_gain {im['min_accuracy_gain']}: every epoch counted, an upper bound)"
                    if im["min_accuracy_gain"] > 0
                    else ""
                )
                + f"; PPO {sh['epochs']} epochs x {sh['minibatches']} minibatches, iteration counts "
                f"{e['ppo_source']}; "
                + (
                    f"evaluations every {sh['eval_interval']:,} env steps."
                    if sh["eval_interval"] > 0
                    else "no evaluations (run.eval_interval 0), so no planners' reference episodes."
                ),
                "",
            ]
        for g in gpus:
            parts = e["gpus"][g]["parts"]
            ppo = parts["PPO iterations"]
            lines += [f"{g}: {e['gpus'][g]['seconds']:.1f} s", ""] + phase_table(parts)
            lines += [
                f"Of the PPO iterations' {ppo['launches']:.1f} s of launches, the rollout's (policy and env "
                f"steps) are {ppo['rollout launches']:.1f} s.",
                "",
            ]
        lines += ["Counts behind it:", ""]
        lines += [f"- {k}: {v:,.2f}" if v < 100 and v != int(v) else f"- {k}: {v:,.0f}" for k, v in e["counts"].items()]
    if mt["designs"]:
        lines += [
            "",
            "### Designs for the GPU recipe",
            "",
            "Each a change over the recipe as configured, read through the config as a run reads it "
            "(overrides) or a launch mode (`launch_replayed_us`, assumed); shape changes of the PPO iteration "
            "are predicted from the small-shape fit and the per-minibatch share.",
            "",
            "| design | overrides | PPO launch | cloning launch | "
            + " | ".join(gpus)
            + f" | cloning ({gpus[0]}) | PPO ({gpus[0]}) |",
            "|---|---|---|---|" + "---:|" * (len(gpus) + 2),
        ]
        for name, d in mt["designs"].items():
            h = d[gpus[0]]
            cells = " | ".join(f"{d[g]['seconds']:.1f} s" for g in gpus)
            lines.append(
                f"| {name} | {' '.join(d['overrides']) or '-'} | {d['launch']} | {d['clone_launch']} | {cells} | "
                f"{h.get('imitation: cloning', 0):.1f} s | {h['PPO iterations']:.1f} s |"
            )
        lines.append("")
    return lines


ASSUMED_WHY = {
    "launch_replayed_us": "no committed row replayed a CUDA graph: every captured run logged "
    "'skipping cudagraphs due to mutated inputs'",
    "mm_efficiency": "the update's GEMMs are 128 wide; never the largest term of any row here",
    "sync_us": "a CUDA round trip with an idle GPU; no row separates a planner call's syncs from its ops",
}


CAVEATS = [
    "Counts are of the tree each row ran (`git worktree add` of the commit its README names, "
    "`benchmarks/gpu_counts.py` run there), on the CPU with torch 2.13: the GPU ran torch 2.11.",
    "Env rows: kernels per step from a 256-env count (at 64 and 256 envs the default and next-step "
    "variants launch the same kernels; the sparse variant's reset kernels grow with the resets a step has: "
    "52 at 64 envs, 134 at 256, as at thousands), bytes per env-step times the envs. The H200's env rows "
    "exist only in its call-1 log (its JSON was cut at its limit): parsed from there.",
    "Bytes are `OpCounter`'s: operands counted whole, a gather's whole source, no cache; `bw_fraction` "
    "absorbs that. One fraction fits the default step to +24..30 % and the next-step bf16 step to -20 %: "
    "the count weighs their traffic differently from the GPU.",
    "Training iterations: a whole `train_iteration` with its two metric reads counted at 16x18, 32x18 "
    "and 16x36 envs x steps (the trainer's also at 32x36, predicted by the fit to the byte), "
    "kernels = a + b x steps, bytes and FLOPs = p + r x steps + q x envs x steps.",
    "Captured rows ran `train.compile` + `train.compile_rollout` with CUDA graphs skipped ('mutated "
    "inputs', every log): inductor's fused kernels launched one by one. They are modelled as the "
    "eager count at `launch_compiled_us`, fitted on them; `launch_replayed_us` (a graph's replay) is "
    "assumed and only used for the designs of the `make train` section.",
    "Imitation: the planner's calls are counted at the run's demonstration batch (256 envs), every 10th "
    "call of a 200-step stretch from reset; DAgger's states are the untrained actor's (the cloned "
    "actor's would differ); the cloning minibatch is counted on random frames of the real shapes. "
    "CPU-only checks in cross-entropy count a few host syncs a minibatch that CUDA does not make.",
    "Evaluations: two counted episodes of the actor per interval plus one for the logged image; the "
    "planners' reference episodes once per process. Rendering, event files and checkpoints are host "
    "work not counted: they are in `process_s`.",
    "`make train` (working tree): the planner is counted over the run's own demonstration stretch from "
    "reset (64 steps of 2,048 envs in the GPU recipe, every 10th call), and its DAgger calls are taken "
    "to cost the same; its counted bytes (18 GB a call at 2,048 envs: whole gather sources) make its "
    "memory term as large as its launches, an upper bound. `process_s` (21 s, fitted on a 512-env run) "
    "is taken as the same at 2,048 envs: building 2,048 environments and the larger checkpoints are not "
    "measured on a GPU. Cloning with `imitation.min_accuracy_gain` > 0 stops when accuracy stops rising, "
    "which counts cannot tell: every configured epoch is predicted (an upper bound), and the designs "
    "show fewer. The iteration's two metric reads are host reads the CPU count does not see "
    "(`.tolist()` of a CPU tensor dispatches no op): 2 x 10 us an iteration, left out.",
    "The 2026-11-27 H100 loan ran host-bound work slower than the other loans (its eager training "
    "1.6x the model; README). Its rows are shown with the fleet constants, and the note gives the ratio "
    "with that loan's launch costs scaled by its own eager training row.",
]


def phase_table(parts: dict) -> list[str]:
    rows = ["| phase | seconds | launches | memory | matmul | syncs |", "|---|---:|---:|---:|---:|---:|"]
    for name, t in parts.items():
        cells = " | ".join(f"{t[k]:.1f}" for k in TERMS)
        rows.append(f"| {name} | {cells} |")
    rows.append("")
    return rows


def merge(folder: Path, counts: dict | None = None) -> dict:
    """`gpu_counts` outputs (``folder/*.json``) folded into ``counts`` (``{"env"|"trainer"|"learn":
    {tree: counts}}``; by default empty): each file replaces its tree's entry. A count of the working
    tree goes under ``today-<name>`` (a file named ``*-today-<name>.json``, e.g. ``learn-today-gpu.json``)
    or ``today`` (``*-today.json``); where the folder has any, every older count of the working tree
    is dropped (it was of an earlier tree)."""
    out: dict[str, dict] = {k: dict(v) for k, v in (counts or {"env": {}, "trainer": {}, "learn": {}}).items()}
    files = sorted(folder.glob("*.json"))
    if any(re.search(r"-today(-[\w.-]+)?$", f.stem) for f in files):
        for section in out.values():
            for tree in [t for t in section if t == "today" or t.startswith("today-")]:
                del section[tree]
    for f in files:
        d = json.loads(f.read_text())
        m = re.search(r"-(today(?:-[\w.-]+)?)$", f.stem)
        tree = m.group(1) if m else d["commit"]
        out[d["what"]][tree] = d["counts"] | ({"commit": d["commit"]} if m else {})
    return out


def run(counts: dict, results: Path = RESULTS_DIR) -> dict[str, Any]:
    rows = measured_rows(results)
    c, used = fit(rows, counts)
    return {
        "benchmark": "gpu_model",
        "constants": dataclasses.asdict(c),
        "fitted_on": used,
        "trees": sorted({r["tree"] for r in rows}),
        "rows": evaluate_rows(rows, counts, c),
        "leave_one_out": leave_one_out(rows, counts, used),
        "make_train": make_train(counts, c),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--merge", type=Path, help="fold benchmarks.gpu_counts outputs (DIR/*.json) into COUNTS first")
    args = parser.parse_args(argv)
    if args.merge:
        old = json.loads(COUNTS.read_text()) if COUNTS.exists() else None
        COUNTS.write_text(json.dumps(merge(args.merge, old), indent=1) + "\n")
    payload = run(json.loads(COUNTS.read_text()))
    OUT.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(report(payload))
    print(report(payload))


if __name__ == "__main__":
    main()
