"""The GPU model checked against the committed GPU rows: the rows read from ``results/gpu-*`` (env
steps, training iterations, whole runs), each predicted from the counts of the tree that ran it,
the constants fitted on named rows (`fit`), each row's ratio predicted / measured and what a miss
names, and every fitting row left out in turn (`leave_one_out`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import RESULTS_DIR
from benchmarks.gpu_model_arithmetic import (
    TERMS,
    Constants,
    env_step,
    iteration,
    iteration_counts,
    learn_run,
    total,
)
from benchmarks.step_cost import GPUS

COUNTS = RESULTS_DIR / "gpu_model_counts.json"  # the counts of each tree (`benchmarks.gpu_counts`)
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

ASSUMED = {"launch_replayed_us": 2.0, "mm_efficiency": 0.25, "sync_us": 10.0}
PLANNER_FIT_RUN = "gpu-nvidia-h200-2026-11-26"  # its imitation phase fits launch_planner_us
PROCESS_FIT_RUNS = ("gpu-nvidia-h100-2026-11-26", "gpu-nvidia-h200-2026-11-26")  # the first left in fits process_s


def gpu_of(name: str) -> str:
    """`GPUS` key of a device name ('NVIDIA H100 80GB HBM3' -> 'H100 SXM')."""
    for key in GPUS:
        if key.split()[0] in name:
            return key
    raise ValueError(f"no GPU of the model matches {name!r} (known: {sorted(GPUS)})")


# -- the measured rows ---------------------------------------------------------------------------
def newest_runs(files: list[Path]) -> list[Path]:
    """Of results files of one benchmark and day, the newest: ``x.json`` and the later runs' ``x-2.json``,
    ``x-3.json`` (`benchmarks.out_paths.free_stem`) measured one thing; fitting all would weigh it twice."""
    newest: dict[str, tuple[int, Path]] = {}
    for f in files:
        m = re.fullmatch(r"(.*?)(?:-(\d+))?", f.stem)
        base, k = m.group(1), int(m.group(2) or 1)
        if k < 2 or not (f.parent / f"{base}{f.suffix}").exists():  # "-26" of a date is not a run's number
            base, k = f.stem, 1
        if base not in newest or k > newest[base][0]:
            newest[base] = (k, f)
    return sorted(f for _, f in newest.values())


def env_rows(folder: Path) -> list[dict[str, Any]]:
    """The env benchmarks' GPU rows at `ENV_SIZES` (ours, VMAS beside ours, the compiled step): from
    their JSON files, or, where a folder has none, from its logs' lines."""
    rows = []
    files = newest_runs(sorted(folder.glob("env_throughput-*nvidia-*.json")))
    for f in files:
        d = json.loads(f.read_text(encoding="utf-8"))
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
            text = log.read_text(errors="replace", encoding="utf-8")
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
    for f in newest_runs(sorted(folder.glob("train_throughput-nvidia-*.json"))):
        d = json.loads(f.read_text(encoding="utf-8"))
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
            raise ValueError(f"{folder.name}: no tree named in gpu_model_fit.TREES; add the commit its README names")
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
            cfg = yaml.safe_load((folder / "learn" / "config.yaml").read_text(encoding="utf-8"))
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


# -- the rows checked --------------------------------------------------------------------------
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
