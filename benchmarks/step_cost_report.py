"""The Markdown report of `benchmarks.step_cost`: its counts, the before-and-after table, the
model's ceilings, the top ops, the fused counts and the graph breaks of one results payload."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from benchmarks.common import cpu_label


def _kib(b: float) -> str:
    return f"{b / 1024:.1f}"


def _rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def table(payload: dict[str, Any], *, baseline: str, gpus: Collection[str], envs: Sequence[int]) -> str:
    """The report of ``payload``. From `benchmarks.step_cost` (which imports this module): ``baseline``
    names the counts before the redesign (`BASELINE`'s folder), ``gpus`` and ``envs`` are the model's
    GPUs and environment counts in their order (`GPUS`, `PROJECTED_ENVS`)."""
    s, m = payload["settings"], payload["machine"]
    lines = [
        f"# Step cost model ({'quick' if payload['quick'] else 'full'})",
        "",
        f"Counted on {cpu_label(m)}, "
        f"torch {m['torch']}, {m['date']}: default task, "
        f"{s['num_envs']} environments, {s['steps']} calls per path, episodes staggered to end after "
        f"{s['episode_length']} steps. Counts are deterministic (benchmarks/op_count.py states the rules).",
        "",
        "| path | kernels per call (min-max) | KiB per env-step (max) | host syncs per call | graph breaks |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, p in payload["paths"].items():
        lines.append(
            f"| {name} | {p['kernels_per_call']:.1f} ({p['kernels_min']}-{p['kernels_max']}) "
            f"| {_kib(p['bytes_per_env_step'])} ({_kib(p['bytes_per_env_step_max'])}) "
            f"| {p['host_syncs_per_call']:.2f} | {p['graph_breaks']['breaks']} |"
        )
    if payload.get("baseline"):
        lines += [
            "",
            f"## Before and after ({baseline}: the env before its redesign, same counting)",
            "",
            "The GPU-safe paths (prepared) are set against the GPU path before them, `env.step[dense]`.",
            "",
            "| path | before | kernels per call, before | after | KiB per env-step, before | after |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for name, p in payload["paths"].items():
            was = "env.step[dense]" if name.startswith("env.step[prepared") else name
            b = payload["baseline"].get(was)
            if b:
                lines.append(
                    f"| {name} | {was} | {b['kernels_per_call']:.1f} | {p['kernels_per_call']:.1f} "
                    f"| {_kib(b['bytes_per_env_step'])} | {_kib(p['bytes_per_env_step'])} |"
                )
    lines += [
        "",
        f"## Model: ceiling in env-steps/s = min(bandwidth / bytes per env-step, envs / (kernels x "
        f"{s['launch_us']} us))",
        "",
        "A model, not a measurement: every counted byte crosses DRAM once at peak bandwidth, kernels run "
        "one after another with a fixed eager launch cost. (The PPO minibatch is left out: its batch is "
        "the config's, not the environments'.)"
        + (
            f" Counted at {s['num_envs']:,} environments: operands of a fixed size (tables) add their bytes / "
            f"{s['num_envs']:,} to each env-step, so these ceilings are low for larger batches; count at 1,024 or "
            "more environments for them."
            if s["num_envs"] < 1024
            else ""
        ),
        "",
    ]
    lines += ["| path | GPU | " + " | ".join(f"{e:,} envs" for e in envs) + " |", "|---|---|" + "---:|" * len(envs)]
    for name, p in payload["paths"].items():
        for gpu in gpus:
            cells = [r for r in p.get("projection", []) if r["gpu"] == gpu]
            if cells:
                lines.append(
                    f"| {name} | {gpu} | "
                    + " | ".join(f"{_rate(r['ceiling'])} ({r['bound_by'][0]})" for r in cells)
                    + " |"
                )
    lines += ["", "(b) bound by bandwidth, (l) by kernel launches.", "", "## Top ops by bytes", ""]
    for name, p in payload["paths"].items():
        ops = ", ".join(
            f"{o['op'].removeprefix('aten.')} {_kib(o['bytes_per_env_step'])} KiB x{o['calls_per_call']:g}"
            for o in p["top_ops"]
        )
        lines.append(f"- **{name}**: {ops}")
    if payload.get("fused"):
        lines += [
            "",
            "## Captured and fused: inductor's own count (benchmarks/fused_count.py)",
            "",
            "The same call compiled whole (`torch.compile(fullgraph=True)`, as `train.compile_rollout` "
            "compiles it on CUDA within the rollout step; the eager form compiled alike is what it "
            "compiles for a CPU's bf16), "
            "counted by inductor's scheduler on this CPU: each fused kernel's buffers read and "
            "written once. Other rules than the eager count above (temporaries inside a kernel never "
            "reach memory), so compare the two only as eager against captured.",
            "",
            "| path | eager kernels | fused kernels | eager KiB per env-step | fused KiB per env-step |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, f in payload["fused"].items():
            e = payload["paths"].get(f.get("eager_path", name), {})
            lines.append(
                f"| {name} | {e.get('kernels_per_call', float('nan')):.1f} | {f['kernels_per_call']} "
                f"| {_kib(e.get('bytes_per_env_step', float('nan')))} | {_kib(f['bytes_per_env_step'])} |"
            )
    captured = {name: p for name, p in payload["paths"].items() if "launches_per_call" in p}
    if captured:
        lines += [
            "",
            "## Captured: host launches under CUDA graphs (benchmarks/graph_audit.py)",
            "",
            "The rollout step and the PPO minibatch as `train.compile_rollout` and `train.compile` capture "
            "them on CUDA, traced on this CPU with the trainer's static addresses (AOT autograd's functional "
            "graphs, counted by the eager rules: more kernels than eager, since each in-place write becomes "
            "an out-of-place op and a copy back, which inductor fuses again). The host launches each graph "
            "once, first copies in the graph's inputs that are new at each call, and launches the rest of "
            "the call eagerly. Skips: what CUDA graph trees would skip.",
            "",
            "| path | kernels per call | graph replays | input copies | other eager launches "
            "| host launches per call | skips |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, p in captured.items():
            graphs = p["graph_replays_per_call"] + p["input_copies_per_call"]
            lines.append(
                f"| {name} | {p['kernels_per_call']:.1f} | {p['graph_replays_per_call']:.1f} "
                f"| {p['input_copies_per_call']:.1f} | {p['launches_per_call'] - graphs:.1f} "
                f"| **{p['launches_per_call']:.1f}** | {len(p['graph_skips'])} |"
            )
    lines += ["", "## Graph breaks (torch._dynamo.explain)", ""]
    for name, p in payload["paths"].items():
        g = p["graph_breaks"]
        lines.append(
            f"- **{name}**: {g['graphs']} graph(s), {g['breaks']} break(s)"
            + (": " + "; ".join(g["reasons"]) if g["reasons"] else "")
        )
    return "\n".join(lines) + "\n"
