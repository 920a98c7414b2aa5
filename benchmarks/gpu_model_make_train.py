"""The GPU model's prediction of `make train` on one H100 SXM and one H200: each of `RECIPES` read
through `agents.config` as the run reads it, phase by phase from counts of the working tree at the
run's own batch, and the GPU recipe's designs (`DESIGNS`). What it stands on: `benchmarks.gpu_model`'s
docstring.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.gpu_model_arithmetic import (
    Constants,
    cloning,
    evaluation_parts,
    iteration_counts,
    iteration_fit,
    per_call,
    scaled,
    total,
    work_seconds,
)

PRESET = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"  # `make train`'s preset
# What `make train` runs on one GPU, each predicted from a count of the working tree (`gpu_counts`
# output ``learn-today-<name>.json``, merged under ``today-<name>``): the run.recipe it resolves to
# and the overrides after it.
RECIPES = {
    "gpu": {"recipe": "gpu", "overrides": [], "what": "the GPU recipe: configs/recipe_gpu.yaml over the preset"},
    "preset-256": {
        "recipe": "preset",
        "overrides": ["env.num_envs=256", "train.update_epochs=3"],
        "what": "the preset alone at 256 envs, as CUDA ran it before the recipe (212 s predicted on 954f86d, "
        "before the planner's one host read a call; 3 update epochs, the preset's then)",
    },
}
MAKE_TRAIN_GPUS = ("H100 SXM", "H200")
TARGET_S = 60.0  # issue 48: `make train` on one H100/H200 in <= 60 s
# Designs predicted for the GPU recipe: config overrides over it (read through the config, as a run
# would), and how the PPO iterations and the cloning minibatches launch.
DESIGNS = {
    "as configured (PPO and cloning eager)": {},
    "PPO iterations replayed as CUDA graphs": {"launch": "replayed"},
    "cloning at every epoch of the preset (20 + 10 + 10: the recipe's bound before its caps)": {
        "overrides": ["imitation.epochs=20", "imitation.dagger_epochs=10"]
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
