"""The env's state in the rules' terms (what `UAVSwarmEnv.state` shows and checkpoints hold), its
conversion from and to the packed state record, and the checks on a state handed to
`UAVSwarmEnv.load_state_dict`.

A state the env did not write would otherwise fail deep inside a step: an index out of bounds (a
device-side assert on a GPU), a coverage divided by zero, a global state gone negative, a UAV
inside an obstacle. Every check runs once per load, never in the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.memory import SEEN, codes
from uavsim.memory import restore as restore_memory
from uavsim.rng import MAX_KEY
from uavsim.rules import BLOCKED, COVERED, FREE

if TYPE_CHECKING:
    from uavsim.dynamics import Layout

STATE_KEYS = (
    "cells",
    "pos",
    "t",
    "episode",
    "covered",
    "free",
    "pool_blocked",
    "pool_covered",
    "ep_reward",
    "ep_collisions",
    "ep_near_misses",
    "reset_pending",
)
MEMORY_KEY = "memory"  # also in the state when EnvConfig.comm_radius is not None: [B, N, H * W] uint8 codes


def state_keys(cfg: EnvConfig) -> tuple[str, ...]:
    """The state's keys for ``cfg``: `STATE_KEYS`, and `MEMORY_KEY` with onboard memory."""
    return STATE_KEYS if cfg.comm_radius is None else (*STATE_KEYS, MEMORY_KEY)


class StateOwner(Protocol):
    """What the checks read of the env a state is loaded into: `uavsim.env.UAVSwarmEnv`, which
    imports this module, so it is named here by what it offers, not imported."""

    config: EnvConfig
    seed: int
    num_envs: int
    env_index: torch.Tensor
    device: torch.device
    autoreset_mode: str

    def state_spec(self) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]: ...


def rules_state(
    lay: Layout, v: dict[str, torch.Tensor], pending: torch.Tensor, keys: tuple[str, ...] | None = None
) -> dict[str, torch.Tensor]:
    """The state of record views ``v`` (and next_step's ``pending`` flags) keyed by `state_keys`; only
    ``keys`` where given: decoding the memories is most of a whole read (~120 ms at 1,024 environments of the
    default preset on a 2-core AVX512-BF16 Zen 4 EPYC, where the cells and positions take ~1 ms)."""
    b, n = pending.shape[0], lay.cfg.num_uavs
    fields = {
        "cells": lambda: lay.decode(v["grid"]),
        "pos": lambda: lay.positions(v["cell"]),
        # the record keeps (t, covered) and (max_steps, free) side by side in one dtype, wider than either's
        # where they differ (`Layout`): the state gives each in its own (`state_spec`)
        "t": lambda: v["t"].to(lay.t_dtype),
        "episode": lambda: v["episode"],
        "covered": lambda: v["covered"].to(lay.count_dtype),
        "free": lambda: v["free"].to(lay.count_dtype),
        "pool_blocked": lambda: v["pools"][:, 0],
        "pool_covered": lambda: v["pools"][:, 1],
        "ep_reward": lambda: v["ep_reward"],
        "ep_collisions": lambda: v["ep_counts"][:, 0],
        "ep_near_misses": lambda: v["ep_counts"][:, 1],
        "reset_pending": lambda: pending,
    }
    if lay.memory is not None:  # the map cells of each UAV's memory (its border is always known blocked)
        fields[MEMORY_KEY] = lambda: codes(lay, v["memory"]).reshape(b, n, -1)
    not_text = [k for k in keys or () if not isinstance(k, str)]
    if not_text:
        raise TypeError(f"state keys are strings, got {not_text[0]!r}; this env's state has {', '.join(fields)}")
    unknown = [k for k in keys or () if k not in fields]
    if unknown:
        raise ValueError(f"no state key {unknown[0]!r}; this env's state has {', '.join(fields)}")
    return {k: fields[k]() for k in (keys if keys is not None else fields)}


def state_spec(lay: Layout, num_envs: int) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """``{key: (dtype, shape)}`` of each tensor of `rules_state` for ``num_envs`` environments."""
    b, n, p2, f = num_envs, lay.cfg.num_uavs, lay.cfg.state_pool**2, lay.record.fields
    spec = {
        "cells": (torch.uint8, (b, lay.cells)),
        "pos": (torch.int16, (b, n, 2)),
        "t": (lay.t_dtype, (b,)),
        "episode": (torch.int32, (b,)),
        "covered": (lay.count_dtype, (b,)),
        "free": (lay.count_dtype, (b,)),
        "pool_blocked": (f["pools"].dtype, (b, p2)),
        "pool_covered": (f["pools"].dtype, (b, p2)),
        "ep_reward": (torch.float32, (b, n)),
        "ep_collisions": (f["ep_counts"].dtype, (b,)),
        "ep_near_misses": (f["ep_counts"].dtype, (b,)),
        "reset_pending": (torch.bool, (b,)),
    }
    if lay.memory is not None:
        spec[MEMORY_KEY] = (torch.uint8, (b, n, lay.cfg.grid_height * lay.cfg.grid_width))
    return spec


def state_record(lay: Layout, s: dict[str, torch.Tensor]) -> torch.Tensor:
    """A new state record ``[B, record bytes]`` holding the (checked) state ``s`` of `rules_state`."""
    buf = lay.record.empty(s["t"].shape[0], lay.device)
    v = lay.record.views(buf)
    v["cell"].copy_(lay.cells_of(s["pos"]))
    v["grid"].copy_(lay.encode(s["cells"], v["cell"]))
    v["pools"][:, 0].copy_(s["pool_blocked"])
    v["pools"][:, 1].copy_(s["pool_covered"])
    v["ep_counts"][:, 0].copy_(s["ep_collisions"])
    v["ep_counts"][:, 1].copy_(s["ep_near_misses"])
    for k in ("t", "episode", "covered", "free", "ep_reward"):
        v[k].copy_(s[k])
    v["max_steps"].fill_(lay.cfg.max_steps)
    if "reward_row" in v:
        v["reward_row"].copy_(s["free"])
    if lay.memory is not None:  # with its per-block counts, derived from it
        restore_memory(lay, v, s[MEMORY_KEY])
    return buf


def checked_state(env: StateOwner, lay: Layout, d: Any) -> dict[str, torch.Tensor]:
    """The state tensors of `d` (a `state_dict()` output) once they fit `env` (whose layout is
    ``lay``): its identity, each tensor's dtype and shape (`UAVSwarmEnv.state_spec`), value ranges,
    and the running counts against the map.

    Raises:
        TypeError, ValueError: what does not fit, named.
    """
    if not isinstance(d, dict):
        raise TypeError(f"env state must be the dict from state_dict(), got {type(d).__name__}")
    mine = {
        "config": env.config.to_dict(),
        "seed": env.seed,
        "num_envs": env.num_envs,
        "first_env_index": int(env.env_index[0]),
    }
    for key, value in mine.items():
        theirs = d.get(key)
        if theirs == value:
            continue
        if key == "config" and isinstance(theirs, dict):  # 24 fields each: name the ones that differ
            differ = sorted(set(theirs) | set(value), key=str)
            differ = [
                f"{k}: checkpoint {theirs.get(k, '(none)')!r}, this env {value.get(k, '(none)')!r}"
                for k in differ
                if theirs.get(k, "(none)") != value.get(k, "(none)")
            ]
            raise ValueError(f"env state mismatch in the config: {'; '.join(differ)}")
        raise ValueError(f"env state mismatch in {key!r}: checkpoint has {theirs!r}, this env has {value!r}")
    state = d.get("state")
    keys = state_keys(env.config)
    if not isinstance(state, dict) or set(state) != set(keys):
        raise ValueError(f"env state must hold the tensors {sorted(keys)}")
    for k, (dtype, shape) in env.state_spec().items():
        v = state[k]
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != shape or v.dtype != dtype:
            raise ValueError(
                f"env state {k!r}: expected {dtype} {shape}, "
                f"got {getattr(v, 'dtype', type(v).__name__)} {tuple(getattr(v, 'shape', ()))}"
            )
    state = {k: state[k].to(env.device) for k in keys}
    _check_ranges(env, state)
    bad = [k for k, ok in _counts_agree(env, lay, state).items() if not ok]
    if bad:
        raise ValueError(
            f"env state {bad} disagree with the map in 'cells' (counts of free and covered cells, "
            "per-block pools, a blocked border, UAVs on free cells with their footprints covered) "
            "or are not finite / negative: not a state this env wrote"
        )
    return state


def _check_ranges(env: StateOwner, state: dict[str, torch.Tensor]) -> None:
    """Ranges a step relies on to index its tables."""
    cfg, pos = env.config, state["pos"]
    checks = {
        "cells": bool(((state["cells"] >= FREE) & (state["cells"] <= BLOCKED)).all()),
        "pos": bool(
            (
                (pos[..., 0] >= 0)
                & (pos[..., 0] < cfg.grid_height)
                & (pos[..., 1] >= 0)
                & (pos[..., 1] < cfg.grid_width)
            ).all()
        ),
        # max_steps only where the ended episode waits for its restart (next_step): a step would advance it past
        "t": bool(((state["t"] >= 0) & (state["t"] < cfg.max_steps + state["reset_pending"].long())).all()),
        "episode": bool(((state["episode"] >= 0) & (state["episode"].long() < MAX_KEY)).all()),
        "covered": bool(((state["covered"] >= 0) & (state["covered"] <= state["free"])).all()),
        # only next_step autoreset leaves an ended episode waiting for the next step
        "reset_pending": env.autoreset_mode == "next_step" or not bool(state["reset_pending"].any()),
    }
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        raise ValueError(
            f"env state holds values out of range in {bad} (cells codes in [{FREE}, {BLOCKED}], "
            f"pos on the {cfg.grid_height}x{cfg.grid_width} grid, t in [0, {cfg.max_steps}) "
            f"({cfg.max_steps} awaiting a next_step restart), "
            "episode in [0, 2**31), covered in [0, free], no reset pending unless "
            "autoreset_mode='next_step'): not a state this env wrote"
        )


def _counts_agree(env: StateOwner, lay: Layout, state: dict[str, torch.Tensor]) -> dict[str, bool]:
    """What the step keeps as running counts must equal what the map says (a wrong `free` would
    divide coverage by zero; a wrong pool would corrupt the global state); UAVs stand on free
    cells, and their footprints are covered (the step covers only the cells a move brings in)."""
    cfg, p, b = env.config, env.config.pad, state["cells"].shape[0]
    grid = state["cells"].view(b, cfg.grid_height + 2 * p, cfg.grid_width + 2 * p)
    inside = grid[:, p : p + cfg.grid_height, p : p + cfg.grid_width].reshape(b, -1)
    border = grid.clone()
    border[:, p : p + cfg.grid_height, p : p + cfg.grid_width] = BLOCKED
    blocked, covered = (inside == BLOCKED).to(torch.int32), (inside == COVERED).to(torch.int32)
    block_of_cell = torch.as_tensor(rules.block_of_cell(cfg), device=inside.device)
    pools = torch.zeros(2, b, cfg.state_pool**2, dtype=torch.int32, device=inside.device)
    pools[0].index_add_(1, block_of_cell, blocked)
    pools[1].index_add_(1, block_of_cell, covered)
    cell = lay.padded_cells_of(state["pos"])  # [B, N] padded flat cells (`UAVSwarmEnv._flat`)
    foot = torch.as_tensor(rules.footprint_offsets(cfg), device=cell.device)
    footprints = cell[:, :, None] + foot[:, 0] * (cfg.grid_width + 2 * p) + foot[:, 1]
    flat = state["cells"]
    most = state["t"].long() * cfg.num_uavs
    agree = {
        "cells (border)": bool((border == BLOCKED).all()),
        "free": bool((state["free"] == inside.shape[1] - blocked.sum(1)).all() and (state["free"] > 0).all()),
        "covered": bool((state["covered"] == covered.sum(1)).all()),
        "pool_blocked": bool((state["pool_blocked"] == pools[0]).all()),
        "pool_covered": bool((state["pool_covered"] == pools[1]).all()),
        "pos (on a blocked cell)": bool((flat.gather(1, cell) != BLOCKED).all()),
        "cells (a free cell in a footprint)": bool((flat.gather(1, footprints.view(b, -1)) != FREE).all()),
        "ep_reward": bool(torch.isfinite(state["ep_reward"]).all()),
        # at most one of each per UAV and step
        "ep_collisions": bool(((state["ep_collisions"] >= 0) & (state["ep_collisions"] <= most)).all()),
        "ep_near_misses": bool(((state["ep_near_misses"] >= 0) & (state["ep_near_misses"] <= most)).all()),
    }
    if MEMORY_KEY in state:  # a remembered cell is unknown, or its truth, or free where it is covered now
        truth = (SEEN + (inside == COVERED).to(torch.uint8) + 3 * (inside == BLOCKED).to(torch.uint8))[:, None]
        memory = state[MEMORY_KEY]
        ok = (memory == 0) | (memory == truth) | ((memory == SEEN) & (truth == SEEN + 1))
        agree[MEMORY_KEY] = bool(ok.all())
    return agree
