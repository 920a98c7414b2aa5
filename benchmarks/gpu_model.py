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

The constants are fitted on named rows (see `gpu_model_fit.fit`) and each row's prediction is
printed beside its measurement with the ratio predicted / measured; a row outside +-35 % names its
largest term.

The parts: `benchmarks.gpu_model_arithmetic` (a piece of work's seconds, a run's phases),
`benchmarks.gpu_model_fit` (the measured rows, the fit, the check of every row) and
`benchmarks.gpu_model_make_train` (`make train`'s prediction); this module merges counts and writes
the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR
from benchmarks.gpu_model_arithmetic import TERMS
from benchmarks.gpu_model_fit import COUNTS, TOLERANCE, evaluate_rows, fit, key, leave_one_out, measured_rows
from benchmarks.gpu_model_make_train import MAKE_TRAIN_GPUS, make_train

OUT = RESULTS_DIR / "gpu_model"  # .md and .json


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
    "Counts taken before 2026-12-03 counted the reads of Adam's step counter (a CPU tensor on CUDA too) as "
    "host syncs, 6 a cloning minibatch; `OpCounter` leaves them out since.",
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
    "1.5x the model; README). Its rows are shown with the fleet constants, and the note gives the ratio "
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
        d = json.loads(f.read_text(encoding="utf-8"))
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
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0]
        + f" Writes {OUT.relative_to(RESULTS_DIR.parent.parent).as_posix()}.json and .md (the model the docs cite), "
        f"over the last; --merge updates {COUNTS.relative_to(RESULTS_DIR.parent.parent).as_posix()}."
    )
    parser.add_argument("--merge", type=Path, help="fold benchmarks.gpu_counts outputs (DIR/*.json) into COUNTS first")
    args = parser.parse_args(argv)
    if args.merge:
        if not args.merge.is_dir():
            parser.error(f"--merge {args.merge}: not a folder of benchmarks.gpu_counts outputs")
        old = json.loads(COUNTS.read_text(encoding="utf-8")) if COUNTS.exists() else None
        try:
            merged = merge(args.merge, old)
        except (KeyError, ValueError, TypeError) as err:  # a JSON that is no gpu_counts output
            parser.error(f"--merge {args.merge}: a file there is not a benchmarks.gpu_counts output ({err!r})")
        COUNTS.write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
    payload = run(json.loads(COUNTS.read_text(encoding="utf-8")))
    OUT.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    OUT.with_suffix(".md").write_text(report(payload), encoding="utf-8")
    print(report(payload))


if __name__ == "__main__":
    main()
