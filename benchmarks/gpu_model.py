"""A run-level GPU model: wall clock on an H100 / H200 from counts taken on the CPU, beside every GPU row.

    python -m benchmarks.gpu_model                 # writes benchmarks/results/gpu_model.{md,json}
    python -m benchmarks.gpu_model --merge DIR     # first folds gpu_counts outputs (DIR/*.json) into COUNTS

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
evaluations and the planners' reference episodes computed once (`agents.evaluate`).

The constants are fitted on named rows (see `fit`) and each row's prediction is printed beside its
measurement with the ratio predicted / measured; a row outside +-35 % names its largest term.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
        minibatches = sum(e * (f // im["minibatch_steps"]) for e, f in zip(im["epochs"], im["frames"]))
        parts["imitation: planner calls"] = scaled(demo, im["demo_steps"])
        parts["imitation: DAgger steps"] = scaled(dagger, im["dagger_rounds"] * im["dagger_steps"])
        parts["imitation: cloning"] = total(
            {
                "mb": scaled(per_call(im["clone_minibatch"], gpu, c), minibatches),
                "epochs": work_seconds(0, sum(im["epochs"]), 0, 0, gpu, c),
            }
        )
    one = iteration(lc["iteration"], envs, steps, gpu, c, launch)
    rollout = work_seconds(iteration_fit(lc["iteration"])["kernels_per_step"] * steps, 0, 0, 0, gpu, c, launch)
    parts["PPO iterations"] = scaled(one, iterations)
    parts["PPO iterations"]["rollout launches"] = rollout["launches"] * iterations  # a share of its launches
    evals = int(env_steps // eval_interval)
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


def today(counts: dict, c: Constants) -> dict[str, Any]:
    """`make train`'s default preset on one H100 with today's tree and recipe, and design variants."""
    lc = counts["learn"].get("today")
    if lc is None:
        return {}
    run = {"envs": 256, "steps": 64, "env_steps": 1998848, "eval_interval": 500000}
    gpu = "H100 SXM"
    f = iteration_fit(lc["iteration"])
    im = lc["imitation"]
    out = {"tree": lc.get("commit"), "run": run, "gpu": gpu, "scenarios": {}}
    out["counts"] = {
        "rollout kernels per step": f["kernels_per_step"],
        "update (and GAE) kernels per iteration": f["kernels_fixed"],
        "planner call + env step: kernels": im["demo_call"]["kernels"],
        "planner call + env step: host syncs": im["demo_call"]["syncs"],
        "planner calls (demonstrations + DAgger)": im["demo_steps"] + im["dagger_rounds"] * im["dagger_steps"],
        "cloning minibatches": sum(e * (n // im["minibatch_steps"]) for e, n in zip(im["epochs"], im["frames"])),
        "cloning minibatch kernels": im["clone_minibatch"]["kernels"],
    }
    wide = {"envs": 4096, "steps": 8}  # a GPU recipe's PPO shape (issue 48, item 1): 61 iterations
    designs = {
        "today (eager)": {},
        "PPO iterations replayed as CUDA graphs": {"launch": "replayed"},
        "planner at <= 1 host sync per call": {"planner_syncs": 1.0},
        "both": {"launch": "replayed", "planner_syncs": 1.0},
        "PPO at 4,096 envs x 8 steps, eager (imitation as today)": wide,
        "PPO at 4,096 envs x 8 steps, replayed (imitation as today)": wide | {"launch": "replayed"},
    }
    for name, kw in designs.items():
        shape = {"envs": kw.get("envs", run["envs"]), "steps": kw.get("steps", run["steps"])}
        rest = {k: v for k, v in kw.items() if k not in shape}
        parts = learn_run(
            lc, **shape, env_steps=run["env_steps"], eval_interval=run["eval_interval"], gpu=gpu, c=c, **rest
        )
        out["scenarios"][name] = {"seconds": total(parts)["seconds"], "parts": parts}
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
    t = payload.get("today") or {}
    if t:
        lines += [
            f"## `make train` on one H100, today's recipe (tree {t['tree']}, {t['run']['envs']} envs, eager)",
            "",
            "| design | predicted |",
            "|---|---:|",
        ]
        lines += [f"| {name} | {s['seconds']:.0f} s |" for name, s in t["scenarios"].items()]
        parts = t["scenarios"]["today (eager)"]["parts"]
        ppo = parts["PPO iterations"]
        lines += ["", "Today's recipe, phase by phase:", ""] + phase_table(parts)
        lines += [
            f"Of the PPO iterations' {ppo['launches']:.0f} s of launches, the rollout's (env and policy "
            f"steps) are {ppo['rollout launches']:.0f} s and the update's (GAE, epochs x minibatches) the rest. "
            "Counts behind it (today's tree):",
            "",
        ]
        lines += [f"- {k}: {v:,.0f}" for k, v in t["counts"].items()] + [""]
    lines += ["## How the rows were counted, and what the model leaves out", ""] + [f"- {x}" for x in CAVEATS]
    return "\n".join(lines) + "\n"


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


def merge(folder: Path) -> dict:
    """`gpu_counts` outputs (``folder/*.json``) as ``{"env"|"trainer"|"learn": {tree: counts}}``;
    a count of the working tree (a file named ``*-today.json``) goes under ``today``."""
    out: dict[str, dict] = {"env": {}, "trainer": {}, "learn": {}}
    for f in sorted(folder.glob("*.json")):
        d = json.loads(f.read_text())
        tree = "today" if f.stem.endswith("-today") else d["commit"]
        out[d["what"]][tree] = d["counts"] | ({"commit": d["commit"]} if tree == "today" else {})
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
        "today": today(counts, c),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--merge", type=Path, help="fold benchmarks.gpu_counts outputs (DIR/*.json) into COUNTS first")
    args = parser.parse_args(argv)
    if args.merge:
        COUNTS.write_text(json.dumps(merge(args.merge), indent=1) + "\n")
    payload = run(json.loads(COUNTS.read_text()))
    OUT.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(report(payload))
    print(report(payload))


if __name__ == "__main__":
    main()
