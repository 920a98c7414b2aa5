"""Average the weights of a run's last checkpoints into one policy (stochastic weight averaging).

    python -m agents.average RUN_DIR --last 5             # RUN_DIR/averaged-last5/
    python -m agents.evaluate RUN_DIR/averaged-last5 ...  # and agents.export, like any run

Why: late in a run PPO still moves the policy from update to update, and where one checkpoint
lands is partly luck. The mean of the last few checkpoints' weights sits between them (Izmailov
et al. 2018, "Averaging Weights Leads to Wider Optima"); it needs checkpoints close together, so
train with a short `run.checkpoint_interval` and a `run.keep_checkpoints` of at least K, e.g.
`run.checkpoint_interval=100000 run.keep_checkpoints=6`. Measure before deploying it: on
`configs/size_agnostic.yaml` it did not beat the final checkpoint (docs/training.md).

The output is a run directory of its own (`config.yaml` and one checkpoint) holding the newest
checkpoint with its actor's and critic's floating-point weights replaced by the mean over the last
K; everything else (counters, value normalizer, optimizer, environment state) is the newest's.
`averaged.json` beside it names the checkpoints averaged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from agents.run import checkpoint as ckpt

AVERAGED = ("actor", "critic")  # the networks; the clone anchor and the optimizer are not a policy


def average_weights(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of `states` (state dicts with one set of keys and shapes), computed in
    float64 and cast back; integer tensors (counters) are the last state's."""
    last = states[-1]
    for i, state in enumerate(states[:-1]):
        if state.keys() != last.keys() or any(state[k].shape != last[k].shape for k in last):
            raise ValueError(f"checkpoint {i} of the average has other weights than the newest: not the same network")
    return {
        k: torch.stack([s[k].double() for s in states]).mean(0).to(v.dtype) if v.is_floating_point() else v
        for k, v in last.items()
    }


def average_run(run_dir: str | Path, last: int, out: str | Path | None = None) -> Path:
    """Write the average of `run_dir`'s `last` newest checkpoints as a run directory; returns it.

    Args:
        run_dir: a training run's directory.
        last: how many of its newest checkpoints to average (>= 1).
        out: the directory written (default: `RUN_DIR/averaged-lastK`); it must hold no checkpoint.

    Raises:
        ValueError: `last` < 1, fewer checkpoints than `last`, checkpoints of other networks, tasks or
            seeds, or an unusable `out` (empty, a file, or a folder that holds files).
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(f"--last must be an integer >= 1, got {last!r}")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a run directory")
    if run_dir.name == "checkpoints" and ckpt.list_checkpoints(run_dir.parent):  # RUN/checkpoints names RUN
        run_dir = run_dir.parent
    found = ckpt.list_checkpoints(run_dir)
    if len(found) < last:
        raise ValueError(
            f"{run_dir} keeps {len(found)} checkpoint(s), fewer than --last {last}: train with "
            f"run.keep_checkpoints >= {last} (and a run.checkpoint_interval a few updates long)"
        )
    paths = found[-last:]
    payloads = [ckpt.load_checkpoint(p) for p in paths]
    newest = payloads[-1]
    for path, payload in zip(paths, payloads):
        for key in ("model", "env", "seed"):  # one run's: its networks, task and seed (a resume keeps them)
            if payload["config"][key] != newest["config"][key]:
                raise ValueError(f"{path} has another {key} config than {paths[-1]}: not one run's checkpoints")
    for net in AVERAGED:
        newest[net] = average_weights([p[net] for p in payloads])
    if out is not None and not str(out).strip():  # an unset shell variable: it wrote into the current directory
        raise ValueError("--out is empty: name the run directory to write")
    out = Path(out) if out is not None else run_dir / f"averaged-last{last}"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, expected a run directory to write")
    if out.exists() and ckpt.list_checkpoints(out):
        raise ValueError(f"{out} already holds checkpoints: remove it or pass another --out")
    if out.is_dir() and any(out.iterdir()):  # its config.yaml would be replaced by the run's
        raise ValueError(f"--out {out} is a folder that holds files: name a new or empty one")
    config = run_dir / "config.yaml"
    beside = {"config.yaml": config.read_text(encoding="utf-8")} if config.is_file() else None
    written = ckpt.save_checkpoint(out, newest, keep=1, beside=beside)
    sources = {"averaged": [str(p.resolve()) for p in paths], "env_steps": [p["env_steps"] for p in payloads]}
    (out / "averaged.json").write_text(json.dumps(sources, indent=1) + "\n", encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agents.average", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run_dir", help="the training run's directory")
    p.add_argument("--last", type=int, default=5, help="how many of its newest checkpoints to average (default: 5)")
    p.add_argument("--out", default=None, help="the run directory written (default: RUN_DIR/averaged-lastK)")
    args = p.parse_args(argv)
    try:
        written = average_run(args.run_dir, args.last, args.out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the output could not be written (permissions, disk full)
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {written}: the mean of the last {args.last} checkpoints' actor and critic")
    return 0


if __name__ == "__main__":
    sys.exit(main())
