"""Export the trained actor as a standalone file for a flight computer: one UAV's inputs -> logits.

    python -m agents.export RUN_DIR_OR_CKPT --format onnx          # RUN_DIR/actor.onnx + actor.onnx.json
    python -m agents.export RUN_DIR_OR_CKPT --format torchscript   # RUN_DIR/actor.pt + actor.pt.json
    python -m agents.export RUN --env path_radius=12   # the sidecar describes the task as played onboard

The file maps a batch of rows, each one UAV's inputs as the actor consumes them, to that UAV's
action logits, fp32, with a dynamic batch dimension (feed 1 row onboard, many in a test):

    local       [batch, L] float32   the UAV's local observation (uavsim.rules)
    agent_id    [batch]    int64     its index 0 .. N-1 in the swarm  (model.agent_id, model.agent_roles)
    heading     [batch, 3] float32   to the nearest uncovered block          (model.actor_shared_map)
    pooled_map  [batch, 2 P^2] float32  the global state's first 2 P^2 entries (model.actor_shared_map)
    hidden      [batch, H] float32   the GRU state, zeros at an episode's start (model.recurrent)
 -> logits      [batch, A] float32   (and next_hidden [batch, H] float32 for a recurrent actor)

Inputs absent from a config are absent from the file. The sidecar JSON (`actor.onnx.json` beside the
file) lists the inputs in order with their shapes and dtypes, the action names, the observation's
layout, and the checkpoint and the SHA-256 of its config. Running it needs only onnxruntime (or
torch for TorchScript) and NumPy: docs/export.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from agents.algo.networks import Actor
from agents.evaluate.setup import fitted_task, played_env
from agents.run.learner_state import trained_actor
from agents.run.paths import file_problem, write_text_atomically
from agents.run.resume import owning_run_dir
from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.rules import action_names, move_table

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}  # format -> the default file's suffix
ONNX_OPSET = 17  # a settled opset (ONNX 1.12), not the newest: a flight computer's onnxruntime may be old
EXPORT_EXTRA = 'pip install -e ".[export]" in this repository (or: pip install onnx onnxruntime)'
_NOT_AN_EXPORT = re.compile(r"^ckpt_\d+\.pt$")  # a checkpoint's name: a TorchScript export must not take it


class OneUAVActor(nn.Module):
    """`actor` as one UAV runs it: its inputs as separate tensors (`input_names`, in order), every
    row independent (no state shared between rows), outputs `output_names`."""

    def __init__(self, actor: Actor, agent_id: bool):
        super().__init__()
        self.actor = actor
        self.input_names = ["local"] + ["agent_id"] * agent_id
        self.input_names += ["heading", "pooled_map"] if actor.map_dim else []
        self.input_names += ["hidden"] if actor.recurrent else []
        self.output_names = ["logits", "next_hidden"] if actor.recurrent else ["logits"]

    def forward(self, *inputs: torch.Tensor):
        named = dict(zip(self.input_names, inputs))
        # Each row carries its own copy of the shared map (state_repeat=1): one UAV, one row.
        # Without `model.agent_id` or `model.agent_roles` the actor reads no id (None is never looked at).
        return self.actor(
            named["local"],
            named.get("agent_id"),
            named.get("pooled_map"),
            heading=named.get("heading"),
            hidden=named.get("hidden"),
        )


def agent_id_meaning(env_cfg: EnvConfig, roles: int) -> str:
    """What the `agent_id` input holds: the index, and with `model.agent_roles` what the file does with it."""
    if not roles:
        return f"the UAV's index in the swarm, 0 .. {env_cfg.num_uavs - 1}"
    return f"the UAV's index in the swarm, 0 .. N-1 for any team size N (the file reads its role, index mod {roles})"


def tensor_specs(wrapped: OneUAVActor, env_cfg: EnvConfig) -> tuple[list[dict], list[dict]]:
    """`(inputs, outputs)`: per tensor of the file, in order, its name, shape ("batch" first),
    dtype and meaning, as the sidecar lists them."""
    actor = wrapped.actor
    p = env_cfg.state_pool
    first = actor.net.first
    roles = first.num_agents if first.wrap_ids else 0
    known = {
        "local": (["batch", env_cfg.local_obs_dim], "float32", "the UAV's local observation: see observation.local"),
        "agent_id": (["batch"], "int64", agent_id_meaning(env_cfg, roles)),
        "heading": (
            ["batch", 3],
            "float32",
            "(d_row / (H - 1), d_col / (W - 1), distance / diagonal) from the UAV's cell to the centre of "
            "the nearest block that still holds uncovered free cells (agents/algo/heading.py); zeros when none",
        ),
        "pooled_map": (
            ["batch", actor.map_dim],
            "float32",
            f"the swarm's shared map: blocked cells / cells per block ({p}x{p} blocks, row-major), then "
            "covered cells / cells per block: the global state's first entries (uavsim.rules)",
        ),
        "hidden": (["batch", actor.hidden_size], "float32", "the GRU state: zeros at an episode's start"),
        "logits": (["batch", env_cfg.num_actions], "float32", "unnormalized log-probabilities of the actions"),
        "next_hidden": (["batch", actor.hidden_size], "float32", "the GRU state to feed at the next step"),
    }

    def spec(name: str) -> dict:
        shape, dtype, what = known[name]
        return {"name": name, "shape": shape, "dtype": dtype, "what": what}

    return [spec(n) for n in wrapped.input_names], [spec(n) for n in wrapped.output_names]


def example_inputs(inputs: list[dict], rows: int) -> tuple[torch.Tensor, ...]:
    """Zeros of each input's shape with `rows` rows (the tracer's example)."""
    return tuple(torch.zeros([rows, *spec["shape"][1:]], dtype=getattr(torch, spec["dtype"])) for spec in inputs)


def observation_layout(env_cfg: EnvConfig) -> dict:
    """Where each part of a local observation `[L]` sits (the layout `uavsim.rules` states)."""
    window, r = env_cfg.window, env_cfg.obs_radius
    cells = window * window
    channels = ("blocked", "covered", "other_uavs")
    meaning = {
        "blocked": "1 where the cell is an obstacle or off the map, else 0",
        "covered": "1 where the cell is covered, else 0",
        "other_uavs": "how many other UAVs are in the cell",
    }
    parts = [
        {"name": c, "start": i * cells, "shape": [window, window], "what": meaning[c]} for i, c in enumerate(channels)
    ]
    parts += [
        {"name": "row", "start": 3 * cells, "shape": [], "what": "the UAV's row / (grid_height - 1)"},
        {"name": "col", "start": 3 * cells + 1, "shape": [], "what": "the UAV's column / (grid_width - 1)"},
        {"name": "time", "start": 3 * cells + 2, "shape": [], "what": "the episode's step / max_steps"},
    ]
    if env_cfg.comm_radius is not None:  # the UAV's onboard memory (docs/environment.md, "Onboard memory")
        pool, start = env_cfg.state_pool, 3 * cells + 3
        blocks = f"per block of the map's {pool}x{pool} blocks (rows then columns)"
        parts += [
            {
                "name": "known_blocked",
                "start": start,
                "shape": [pool, pool],
                "what": f"cells known blocked / cells, {blocks}",
            },
            {
                "name": "known_covered",
                "start": start + pool * pool,
                "shape": [pool, pool],
                "what": f"cells known covered / cells, {blocks}",
            },
            {
                "name": "memory_heading",
                "start": start + 2 * pool * pool,
                "shape": [3],
                "what": "to the nearest block not known done: d_row / (H - 1), d_col / (W - 1), (dist / diagonal)^2",
            },
        ]
    if env_cfg.window_paths:  # docs/environment.md, "Window paths"
        start, rounds = env_cfg.local_obs_dim - env_cfg.paths_obs_dim, rules.window_path_rounds(env_cfg)
        goal, area = "the window's nearest uncovered free cell", "in the window"
        if env_cfg.path_radius:  # the search runs over the UAV's memory around it
            goal = f"the nearest cell its memory within {env_cfg.path_radius} cells does not know covered or blocked"
            area = "in that square"
        parts += [
            {
                "name": "path_closer",
                "start": start,
                "shape": [env_cfg.moves],
                "what": f"per move (actions 1 ..): 1 if it leads closer to {goal}",
            },
            {
                "name": "path_distance",
                "start": start + env_cfg.moves,
                "shape": [],
                "what": f"moves to that cell / {rounds + 1} (1: none within {rounds} moves {area})",
            },
        ]
    return {
        "size": env_cfg.local_obs_dim,
        "window": f"{window}x{window} cells centred on the UAV: rows dr = -{r} .. {r}, then columns dc = -{r} .. {r}",
        "parts": parts,
    }


def sidecar(wrapped: OneUAVActor, env_cfg: EnvConfig, fmt: str, out: Path, path: Path, payload: dict) -> dict:
    """What onboard code needs to know to feed the file `out` (exported from checkpoint `path`)."""
    inputs, outputs = tensor_specs(wrapped, env_cfg)
    moves = move_table(env_cfg)
    config_text = json.dumps(payload["config"], sort_keys=True, default=str)
    return {
        "format": fmt,
        "file": out.name,
        "inputs": inputs,
        "outputs": outputs,
        "actions": [
            {"index": a, "name": name, "d_row": int(moves[a][0]), "d_col": int(moves[a][1])}
            for a, name in enumerate(action_names(env_cfg))
        ],
        "policy": "the most likely action is argmax(logits); a sampled one is drawn from softmax(logits)",
        "observation": {"local": observation_layout(env_cfg)},
        "onnx_opset": ONNX_OPSET if fmt == "onnx" else None,
        "checkpoint": str(path.resolve()),  # whole: where the command ran is not recorded
        "env_steps": payload["env_steps"],
        "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
        "env": env_cfg.to_dict(),
        "model": dict(payload["config"]["model"]),
        "torch": torch.__version__,
    }


def sidecar_path(out: Path) -> Path:
    """The sidecar of the exported file `out`: `actor.onnx` -> `actor.onnx.json` (each format's file its own: a
    shared `actor.json` described whichever was exported last)."""
    return out.with_name(out.name + ".json")


def export_actor(
    source: str | Path, fmt: str = "onnx", out: str | Path | None = None, env: Sequence[str] = ()
) -> tuple[Path, Path]:
    """Write the actor of the checkpoint `source` names (a file, or a run directory's newest) as a
    `fmt` file, and its sidecar JSON beside it.

    Args:
        source: a checkpoint file or a run directory.
        fmt: `onnx` or `torchscript`.
        out: the file to write (None: `actor.onnx` / `actor.pt` in the run directory, or beside a
            checkpoint kept outside a run).
        env: ``KEY=VALUE`` overrides of the run's env config, as `agents.evaluate`'s ``--env``: the
            task the actor plays onboard (e.g. ``path_radius=12``), which the sidecar's observation
            layout describes; the actor must fit it (`agents.config.actor_fit.check_actor_fits`).

    Returns:
        `(file, sidecar)`.

    Raises:
        ValueError: an unknown format, no onnx package for `onnx`, an `out` that cannot be written
            or would be its own sidecar, an `env` item that is bad or that the actor cannot play;
            CheckpointError (a ValueError): no checkpoint at `source`, or one that cannot be used.
        TypeError: an `env` value of the wrong type.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401 -- checked before the work: it checks and annotates the file
        except ImportError:
            raise ValueError(f"--format onnx needs the onnx package: {EXPORT_EXTRA}") from None
    path, payload, cfg, actor = trained_actor(
        source, task=lambda saved: fitted_task(saved, env, None) if played_env(saved, env) else saved
    )
    out = Path(out) if out is not None else (owning_run_dir(path) or path.parent) / f"actor{FORMATS[fmt]}"
    if out.suffix == ".json":  # the sidecars' suffix: a model file so named would pass for one
        raise ValueError(f"--out {out}: a .json name is a sidecar's; expected a file name ending in {FORMATS[fmt]}")
    other = {suffix: name for name, suffix in FORMATS.items() if name != fmt}
    if out.suffix in other:  # the file would pass for the other format's (onnxruntime fails on a TorchScript zip)
        raise ValueError(
            f"--out {out}: a {out.suffix} name for --format {fmt}; expected a name ending in {FORMATS[fmt]}"
        )
    side = sidecar_path(out)
    problem = file_problem(out) or file_problem(side)
    if problem:
        raise ValueError(f"--out: {problem}")
    if (
        out.resolve() == path.resolve()
        or _NOT_AN_EXPORT.match(out.name)
        or (out.is_file() and out.suffix != FORMATS[fmt])
    ):
        raise ValueError(f"--out {out}: an existing file that is not an exported actor (the checkpoint?); name another")
    env_cfg = cfg.env_config()
    has_id = cfg.model.id_width(env_cfg.num_uavs) > 0
    wrapped = OneUAVActor(actor.float(), has_id).eval()  # fp32 whatever the run trained in
    info = sidecar(wrapped, env_cfg, fmt, out, path, payload)
    info["env_overrides"] = played_env(cfg, env)  # the observation layout is the run's env with these
    example = example_inputs(info["inputs"], rows=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")  # both files whole, or neither changed
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.13 calls the TorchScript tracer and the TorchScript-based ONNX exporter deprecated;
            # they still work, and for one step of plain ops they need nothing more (docs/export.md)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            if fmt == "onnx":
                _write_onnx(wrapped, example, tmp, info)
            else:
                torch.jit.trace(wrapped, example).save(str(tmp))
        write_text_atomically(side, json.dumps(info, indent=2))
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out, side


def _write_onnx(wrapped: OneUAVActor, example: tuple[torch.Tensor, ...], out: Path, info: dict) -> None:
    import onnx

    names = wrapped.input_names + wrapped.output_names
    # The TorchScript-based exporter (dynamo=False): 0.25 s against the dynamo exporter's 3 s for
    # this graph on a 2-core CPU, and no onnxscript to install
    torch.onnx.export(
        wrapped,
        example,
        str(out),
        dynamo=False,
        input_names=wrapped.input_names,
        output_names=wrapped.output_names,
        dynamic_axes={name: {0: "batch"} for name in names},
        opset_version=ONNX_OPSET,
    )
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    model.doc_string = "uavsim MAPPO actor: one UAV's inputs -> action logits; see the sidecar JSON"
    for key in ("checkpoint", "config_sha256"):
        model.metadata_props.add(key=key, value=str(info[key]))
    model.metadata_props.add(key="sidecar", value=json.dumps(info))  # the file alone still says what to feed
    # the exporter leaves a recurrent actor's next_hidden [batch, ?]: inference gives it the hidden input's width
    onnx.save(onnx.shape_inference.infer_shapes(model), str(out))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agents.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint", help="a run directory (its newest checkpoint) or a checkpoint file")
    p.add_argument("--format", default="onnx", help=f"{' or '.join(FORMATS)} (default: onnx)")
    p.add_argument(
        "--out", default=None, help="the file (default: RUN_DIR/actor.onnx or actor.pt; the sidecar JSON beside it)"
    )
    p.add_argument(
        "--env",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="the task played onboard, as agents.evaluate's --env (e.g. path_radius=12): the sidecar describes it",
    )
    args = p.parse_args(argv)
    existed = args.out is not None and Path(args.out).is_file()
    try:
        out, side = export_actor(args.checkpoint, args.format, args.out, args.env)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the files could not be written (a name too long, permissions, disk full)
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{'replaced' if existed else 'wrote'} {out} and {side}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
