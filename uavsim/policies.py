"""Scripted baselines, vectorized over the batch: a random policy and a greedy frontier policy
(`uavsim.coordinated.CoordinatedFrontierPolicy`, the coordinated frontier planner, builds on it).

All take the env and return ``actions [B, N] int64`` on its device, so every learned result has a
reference point evaluated on the very same episodes.
"""

from __future__ import annotations

from typing import Any

import torch

from uavsim import rules
from uavsim.checks import check_int
from uavsim.env import UAVSwarmEnv
from uavsim.rules import BLOCKED, FREE


def _check_env(env: Any) -> UAVSwarmEnv:
    if not isinstance(env, UAVSwarmEnv):
        raise TypeError(f"env must be a UAVSwarmEnv, got {type(env).__name__}")
    return env


def _generator(env: UAVSwarmEnv, seed: Any) -> torch.Generator:
    generator = torch.Generator(device=env.device)
    generator.manual_seed(check_int("seed", seed, -(2**63), 2**64))  # the range torch's manual_seed takes
    return generator


class RandomPolicy:
    """Uniform random actions from its own ``torch.Generator`` (never the global RNG)."""

    def __init__(self, env: UAVSwarmEnv, seed: int = 0):
        self.device = _check_env(env).device
        self.generator = _generator(env, seed)

    def __call__(self, env: UAVSwarmEnv) -> torch.Tensor:
        if _check_env(env).device != self.device:  # the generator draws on one device only
            raise ValueError(f"this RandomPolicy draws on {self.device}, got an env on {env.device}")
        return torch.randint(
            0, env.num_actions, (env.num_envs, env.num_uavs), generator=self.generator, device=env.device
        )


class GreedyFrontierPolicy:
    """Each UAV steps towards its nearest uncovered free cell, by path length around obstacles.

    A distance field to the uncovered free cells is relaxed through free cells (the env's move set,
    unit cost per move); each UAV then takes a move that shortens its path to the nearest
    uncovered cell (hover when nothing is reachable). Among equally short moves it prefers a cell
    no other UAV occupies now, then breaks ties at random: otherwise UAVs that once share a cell
    would move as one forever, which would make this baseline a strawman. There is no other
    coordination, which is the weakness a learned team should beat.

    The tie-breaks are one generator's draws over the whole batch, so an environment's moves depend on the
    batch's size and its row (`agents.evaluate` plays a map set in one batch from row 0; the committed
    baselines are those). The coordinated planner hashes each environment's index instead.

    Args:
        env: the env it plays (any env of the same layout; checked at every call).
        seed: its tie-breaks' generator seed.
        check_every: relaxation rounds between checks that the field stopped changing.
    """

    CROWD_COST = 0.5  # < 1: never trades a longer path for a free cell, only breaks ties
    NOISE = 0.25  # < CROWD_COST: random tie-breaks among equally good moves

    def __init__(self, env: UAVSwarmEnv, seed: int = 0, check_every: int = 8):
        cfg = _check_env(env).config
        self.check_every = check_int("check_every", check_every, 1)
        self.layout = self._layout(env)  # checked at every call: the tables below hold only for it
        self.hp, self.wp = cfg.grid_height + 2 * cfg.pad, cfg.grid_width + 2 * cfg.pad
        self.moves = env._moves  # [A, 2]
        self.move_offsets = self.moves[:, 0] * self.wp + self.moves[:, 1]  # [A] in padded flat cells
        self.shifts = rules.move_table(cfg)[1:].tolist()  # host copy for torch.roll: no device read per call
        self.generator = _generator(env, seed)

    @staticmethod
    def _layout(env: UAVSwarmEnv) -> dict[str, Any]:
        """What the tables built in ``__init__`` depend on: the padded grid and the move set."""
        cfg = env.config
        return {
            "grid_height": cfg.grid_height,
            "grid_width": cfg.grid_width,
            "pad": cfg.pad,
            "moves": cfg.moves,
            "device": env.device,
        }

    def _check_same_layout(self, env: Any) -> None:
        """Python-level comparisons only: no device sync per call."""
        got = self._layout(_check_env(env))
        if got != self.layout:
            built = ", ".join(f"{k}={v}" for k, v in self.layout.items() if got[k] != v)
            called = ", ".join(f"{k}={v}" for k, v in got.items() if self.layout[k] != v)
            raise ValueError(
                f"this {type(self).__name__} was built for an env with {built}, called with {called}: "
                "build one policy per env layout"
            )

    def distance_field(self, cells: torch.Tensor, probes: torch.Tensor | None = None) -> torch.Tensor:
        """Moves to the nearest uncovered free cell, by synchronous relaxation: after ``k`` rounds
        every finite value is exact and every cell within ``k`` moves of the frontier has one.

        Args:
            cells: ``[B, Hp * Wp]`` uint8 codes (``env.state["cells"]``).
            probes: ``[B, N, A]`` int64 flat padded cells; with them it stops once every ``[b, n]`` row
                holds a finite value (the row's smallest is then final: all a greedy move needs).

        Returns:
            ``[B, Hp * Wp]`` float32 moves (inf: unreachable).
        """
        b = cells.shape[0]
        grid = cells.view(b, self.hp, self.wp)
        blocked = grid == BLOCKED
        inf = torch.tensor(float("inf"), device=cells.device)
        dist = torch.where(grid == FREE, 0.0, inf)
        for i in range(self.hp * self.wp):  # a path visits each cell at most once
            if probes is not None and i % self.check_every == 0:
                seen = dist.view(b, -1).gather(1, probes.view(b, -1)).view_as(probes)
                if bool(seen.isfinite().any(2).all()):
                    break
            best = dist
            for dr, dc in self.shifts:  # the border is blocked, so roll never wraps a path
                best = torch.minimum(best, torch.roll(dist, shifts=(dr, dc), dims=(1, 2)) + 1)
            best = torch.where(blocked, inf, best)
            if i % self.check_every == 0 and torch.equal(best, dist):
                break
            dist = best
        return dist.view(b, -1)

    def __call__(self, env: UAVSwarmEnv) -> torch.Tensor:
        """``[B, N]`` int64 actions on the env's device; a ValueError for an env of another layout."""
        self._check_same_layout(env)
        cells, pos = env.read_state("cells", "pos")
        here = env._flat(pos)  # [B, N]
        targets = here[:, :, None] + self.move_offsets  # [B, N, A]
        b, n, a = targets.shape
        dist = self.distance_field(cells, targets)
        cost = dist.gather(1, targets.view(b, -1)).view_as(targets)  # blocked targets stay inf
        # Other UAVs on each target cell (a UAV's own cell counts only the others there).
        occupied = (targets[:, :, :, None] == here[:, None, None, :]).sum(3) - (self.move_offsets == 0).long()
        noise = torch.rand(cost.shape, generator=self.generator, device=cost.device) * self.NOISE
        return (cost + self.CROWD_COST * (occupied > 0) + noise).argmin(dim=2)  # all inf -> 0, hover
