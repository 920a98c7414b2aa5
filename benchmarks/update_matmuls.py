"""The PPO update's matrix products at the default minibatch, on one thread and on all of them.

    python -m benchmarks.update_matmuls            # writes benchmarks/results/
    python -m benchmarks.update_matmuls --quick

What bounds our training iteration on the CPU (see ``train_throughput --profile``) is partly these
products. Each is timed as autograd issues it for one linear layer ``y = x W^T`` of the default
networks, at the default minibatch of ``M`` agent-steps (``num_steps x num_envs x num_uavs /
num_minibatches`` of ``benchmarks/trainer_config.yaml``, `benchmarks.common.TRAINER_CONFIG`):

    forward  ``x [M, in] @ W^T``      the layer's output
    dgrad    ``dy [M, out] @ W``      the gradient of its input (hidden and head layers)
    wgrad    ``dy^T @ x``             the gradient of its weight: inner dimension M

for the first layer's local-observation part, the agent id's one-hot part, a hidden layer, the
policy head and the value head; fp32 and bf16; median of timed repeats after warm-up. The
figures are microseconds per product and GFLOP/s (2 x rows x inner x columns per product).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from agents.run.machine_defaults import CPU_NUM_ENVS
from benchmarks.common import (
    RESULTS_DIR,
    TRAINER_CONFIG,
    cpu_label,
    machine_info,
    setup_host,
    write_results,
)
from benchmarks.out_paths import OUT_DIR_HELP, out_dir_arg


def layer_shapes(minibatch: int) -> dict[str, tuple[int, int]]:
    """`(in, out)` of each timed layer of the trainer config's networks."""
    from agents.config import load_config

    cfg = load_config(TRAINER_CONFIG, [f"env.num_envs={CPU_NUM_ENVS}"])
    env, hidden = cfg.env_config(), cfg.model.hidden_size
    return {
        "first layer, local obs": (env.local_obs_dim, hidden),
        "first layer, agent id": (env.num_uavs, hidden),
        "hidden layer": (hidden, hidden),
        "policy head": (hidden, env.num_actions),
        "value head": (hidden, 1),
    }


def default_minibatch() -> int:
    from agents.config import load_config

    return load_config(TRAINER_CONFIG, [f"env.num_envs={CPU_NUM_ENVS}"]).minibatch_size


def time_us(fn, repeats: int) -> float:
    for _ in range(max(3, repeats // 10)):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def products(m: int, n_in: int, n_out: int, dtype: torch.dtype, gen: torch.Generator) -> dict[str, tuple[Any, float]]:
    """The layer's products as autograd issues them, each with its FLOP count."""
    x = torch.randn(m, n_in, generator=gen).to(dtype)
    w = torch.randn(n_out, n_in, generator=gen).to(dtype)
    dy = torch.randn(m, n_out, generator=gen).to(dtype)
    flops = 2.0 * m * n_in * n_out
    return {
        "forward": (lambda: torch.mm(x, w.t()), flops),
        "dgrad": (lambda: torch.mm(dy, w), flops),
        "wgrad": (lambda: torch.mm(dy.t(), x), flops),
    }


def measure(args) -> dict[str, Any]:
    setup_host(args.threads)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for layer, (n_in, n_out) in layer_shapes(args.minibatch).items():
            for kind, (fn, flops) in products(args.minibatch, n_in, n_out, dtype, gen).items():
                if kind == "dgrad" and layer.startswith("first layer"):
                    continue  # observations need no gradient
                row = {
                    "dtype": dtype_name,
                    "layer": layer,
                    "product": kind,
                    "rows": args.minibatch,
                    "in": n_in,
                    "out": n_out,
                }
                for threads in sorted({1, args.threads}):
                    torch.set_num_threads(threads)
                    us = time_us(fn, args.repeats)
                    row[f"us_{threads}t"], row[f"gflops_{threads}t"] = us, flops / us / 1e3
                torch.set_num_threads(args.threads)
                rows.append(row)
                print(
                    f"{dtype_name} {layer:24s} {kind:7s} "
                    + "  ".join(f"{t}t {row[f'us_{t}t']:8.1f} us" for t in sorted({1, args.threads}))
                )
    return {
        "benchmark": "update_matmuls",
        "machine": machine_info(),
        "quick": args.quick,
        "settings": {"minibatch": args.minibatch, "threads": args.threads, "repeats": args.repeats},
        "results": rows,
    }


def table(payload: dict[str, Any]) -> str:
    m, s = payload["machine"], payload["settings"]
    threads = sorted({1, s["threads"]})
    lines = [
        f"# The update's matrix products ({'quick' if payload['quick'] else 'full'})",
        "",
        f"CPU: {cpu_label(m)}; torch {m['torch']}; {m['date']}; minibatch "
        f"{s['minibatch']} agent-steps; median of {s['repeats']} repeats",
        "",
        "| dtype | layer | product | shape | "
        + " | ".join(f"µs, {t} thread(s) | GFLOP/s, {t}" for t in threads)
        + " |",
        "|---|---|---|---|" + "---:|---:|" * len(threads),
    ]
    for r in payload["results"]:
        shape = {
            "forward": f"[{r['rows']},{r['in']}] @ [{r['in']},{r['out']}]",
            "dgrad": f"[{r['rows']},{r['out']}] @ [{r['out']},{r['in']}]",
            "wgrad": f"[{r['out']},{r['rows']}] @ [{r['rows']},{r['in']}]",
        }[r["product"]]
        cells = " | ".join(f"{r[f'us_{t}t']:.0f} | {r[f'gflops_{t}t']:.0f}" for t in threads)
        lines.append(f"| {r['dtype']} | {r['layer']} | {r['product']} | {shape} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small minibatch, few repeats (CI smoke)")
    parser.add_argument("--minibatch", type=int, default=None, help="rows (default: the trainer config's minibatch)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out-dir", type=out_dir_arg, default=RESULTS_DIR, help=OUT_DIR_HELP)
    args = parser.parse_args(argv)
    if args.minibatch is None:
        args.minibatch = 256 if args.quick else default_minibatch()
    if args.repeats is None:
        args.repeats = 5 if args.quick else 200
    for name in ("minibatch", "threads", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    payload = measure(args)
    return write_results("update_matmuls", payload, table(payload), None, args.out_dir)


if __name__ == "__main__":
    main()
