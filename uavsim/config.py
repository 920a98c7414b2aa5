"""`EnvConfig`: the frozen, validated constants of the coverage task (see `uavsim.rules`)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

# Rewards and penalties are float32 in both implementations: a larger value would overflow to inf.
FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class EnvConfig:
    """Physics and task constants. Every field is checked in `__post_init__`; nothing is clamped.

    Grid cells are addressed (row, col) with row 0 at the top. The launch area is the
    `launch_size` x `launch_size` square in the top-left corner, kept free of obstacles.
    `maps`: None for random rectangles, or a map set to play instead (a map file or a folder of them,
    `uavsim.maps`; checked when an env loads it): `num_obstacles`, `num_walls` and their sizes are then
    unused. The wall lengths are checked only when `num_walls` > 0.
    Besides the obvious ranges: `num_obstacles` <= the number of cells, `max_steps` < 2**31, and
    (coverage_reward + time_penalty + collision_penalty + near_miss_penalty) x max_steps within
    float32, so that no reward and no episode return can overflow.
    """

    grid_height: int = 32
    grid_width: int = 32
    num_uavs: int = 10
    num_obstacles: int = 40
    max_steps: int = 200
    obstacle_min_size: int = 1  # side length of an obstacle rectangle, in cells (inclusive range)
    obstacle_max_size: int = 4
    # walls: one cell thick, horizontal or vertical, drawn after the rectangles (uavsim.rules); long
    # walls make corridors and rooms that the small rectangles never do
    num_walls: int = 0
    wall_min_length: int = 8
    wall_max_length: int = 16
    launch_size: int = 4
    sensor_radius: int = 2  # a UAV covers free cells with dr^2 + dc^2 <= sensor_radius^2
    obs_radius: int = 3  # egocentric window is (2 * obs_radius + 1)^2 cells
    moves: int = 4  # 4: hover + N/S/W/E; 8: hover + the 8 neighbours
    coverage_reward: float = 10.0  # team reward per step = coverage_reward * newly covered fraction ...
    time_penalty: float = 0.01  # ... - time_penalty, for every UAV
    collision_penalty: float = 0.1  # individual: a move into an obstacle or off the map
    near_miss_penalty: float = 0.05  # individual: ending a step in the same cell as another UAV
    target_coverage: float = 0.95  # terminated when covered / free cells >= this
    state_pool: int = 8  # the global state pools each map to state_pool x state_pool blocks
    maps: str | None = None  # a map file or folder (uavsim.maps) instead of random obstacles
    # None: no onboard memory; else each UAV remembers what its window saw and merges its memory with
    # the UAVs within this Chebyshev distance (cells) once per step (uavsim.memory; 0: its own only)
    comm_radius: int | None = None
    # append which moves lead toward the nearest uncovered free cell the window shows (uavsim.window_paths)
    window_paths: bool = False
    # 0: window_paths searches the observation window; R > 0: the UAV's onboard memory within R cells
    # of it, its cells not known blocked or covered as the goals (paths around walls longer than the window)
    path_radius: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                    raise TypeError(f"EnvConfig.{f.name} must be an int, got {type(value).__name__} {value!r}")
                object.__setattr__(self, f.name, int(value))  # NumPy integers become plain ints
            if f.type == "float":
                if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy floats too
                    raise TypeError(f"EnvConfig.{f.name} must be a float, got {type(value).__name__} {value!r}")
                try:
                    value = float(value)
                except OverflowError:  # an int beyond any float
                    value = math.inf
                if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
                    raise ValueError(
                        f"EnvConfig.{f.name} must be finite in float32 (|x| <= {FLOAT32_MAX:.4g}), got {value!r}"
                    )
                object.__setattr__(self, f.name, float(value))
        if not isinstance(self.window_paths, bool | np.bool_):
            got = f"{type(self.window_paths).__name__} {self.window_paths!r}"
            raise TypeError(f"EnvConfig.window_paths must be a bool, got {got}")
        object.__setattr__(self, "window_paths", bool(self.window_paths))
        if isinstance(self.maps, os.PathLike):
            object.__setattr__(self, "maps", os.fspath(self.maps))  # kept as a string: YAML configs and --env
        if self.comm_radius is not None:
            if not isinstance(self.comm_radius, numbers.Integral) or isinstance(self.comm_radius, bool):
                raise TypeError(
                    f"EnvConfig.comm_radius must be an int or None, got {type(self.comm_radius).__name__} "
                    f"{self.comm_radius!r}"
                )
            object.__setattr__(self, "comm_radius", int(self.comm_radius))
        if self.maps is not None and not isinstance(self.maps, str):
            raise TypeError(f"EnvConfig.maps must be a path (str) or None, got {type(self.maps).__name__}")
        self._check_ranges()

    def _check_ranges(self) -> None:
        def need(ok: bool, name: str, expected: str) -> None:
            if not ok:
                raise ValueError(f"EnvConfig.{name} must be {expected}, got {getattr(self, name)!r}")

        def count_fits(name: str) -> None:
            need(getattr(self, name) >= 0, name, ">= 0")
            cells = self.grid_height * self.grid_width
            need(getattr(self, name) <= cells, name, f"<= the number of cells ({cells})")

        def sizes_fit(low: str, high: str, what: str) -> None:  # an inclusive range of side lengths
            need(getattr(self, low) >= 1, low, ">= 1")
            need(getattr(self, high) >= getattr(self, low), high, f">= {low} ({getattr(self, low)})")
            side = min(self.grid_height, self.grid_width)
            need(getattr(self, high) <= side, high, f"<= the smaller grid side ({side}) so {what} fit on the map")

        need(self.grid_height >= 2, "grid_height", ">= 2")
        need(self.grid_width >= 2, "grid_width", ">= 2")
        # 4096 x 4096 keeps every flat cell index and every hash product inside int64 exactly.
        need(self.grid_height <= 4096, "grid_height", "<= 4096")
        need(self.grid_width <= 4096, "grid_width", "<= 4096")
        need(self.num_uavs >= 1, "num_uavs", ">= 1")
        # more rectangles or walls than cells only costs memory (4 draws each, per environment and reset)
        count_fits("num_obstacles")
        need(self.max_steps >= 1, "max_steps", ">= 1")
        need(self.max_steps < 2**31, "max_steps", "< 2**31 (step counts are compared on the device as int64)")
        if (
            self.num_obstacles > 0
        ):  # as for walls: sizes of nothing drawn (a map set's, a narrow corridor's) need not fit
            sizes_fit("obstacle_min_size", "obstacle_max_size", "obstacles")
        count_fits("num_walls")
        if self.num_walls > 0:
            sizes_fit("wall_min_length", "wall_max_length", "walls")
        need(self.launch_size >= 1, "launch_size", ">= 1")
        need(
            self.launch_size <= min(self.grid_height, self.grid_width),
            "launch_size",
            f"<= the smaller grid side ({min(self.grid_height, self.grid_width)})",
        )
        need(
            self.num_uavs <= self.launch_size**2,
            "num_uavs",
            f"<= the launch area's {self.launch_size**2} cells (launch_size={self.launch_size})",
        )
        need(self.sensor_radius >= 0, "sensor_radius", ">= 0")
        need(
            self.sensor_radius < max(self.grid_height, self.grid_width),
            "sensor_radius",
            f"< the larger grid side ({max(self.grid_height, self.grid_width)})",
        )
        need(self.obs_radius >= 1, "obs_radius", ">= 1")
        need(
            self.obs_radius < max(self.grid_height, self.grid_width),
            "obs_radius",
            f"< the larger grid side ({max(self.grid_height, self.grid_width)})",
        )
        need(self.moves in (4, 8), "moves", "4 or 8")
        need(self.coverage_reward >= 0, "coverage_reward", ">= 0")
        need(self.time_penalty >= 0, "time_penalty", ">= 0")
        need(self.collision_penalty >= 0, "collision_penalty", ">= 0")
        need(self.near_miss_penalty >= 0, "near_miss_penalty", ">= 0")
        need(0 < self.target_coverage <= 1, "target_coverage", "in (0, 1]")
        # A UAV's reward per step lies within +-(the sum of the four); its episode return, a float32
        # sum of max_steps rewards, must stay finite.
        per_step = self.coverage_reward + self.time_penalty + self.collision_penalty + self.near_miss_penalty
        # float32 rounds each reward and each partial sum by up to 2**-24 of it: a relative margin of the adds' count
        rounding = 1 + (self.max_steps + 4) * 2.0**-23
        need(
            per_step * self.max_steps * rounding <= FLOAT32_MAX,
            "coverage_reward",
            f"such that (coverage_reward + time_penalty + collision_penalty + near_miss_penalty) x max_steps "
            f"<= {FLOAT32_MAX:.4g}, or an episode's return overflows float32 (the sum is {per_step:.4g}, "
            f"max_steps {self.max_steps})",
        )
        need(self.maps is None or self.maps.strip() != "", "maps", "None or a map file or folder (uavsim.maps)")
        need(self.comm_radius is None or self.comm_radius >= 0, "comm_radius", "None or >= 0 (cells)")
        need(self.path_radius >= 0, "path_radius", ">= 0 (0: window_paths searches the observation window)")
        if self.path_radius > 0:  # a search of the onboard memory
            need(self.window_paths, "path_radius", "0 without window_paths (it sets how far the paths search)")
            need(self.comm_radius is not None, "path_radius", "0 without onboard memory (comm_radius None)")
            need(self.path_radius >= self.obs_radius, "path_radius", f">= obs_radius ({self.obs_radius}) or 0")
            need(self.path_radius <= 31, "path_radius", "<= 31 (a row of the search is one int64 bit set)")
        elif self.window_paths:  # the search of the window, as wide as it
            need(
                self.obs_radius <= 31,
                "obs_radius",
                "<= 31 with window_paths (a row of the search is one int64 bit set)",
            )
        need(self.state_pool >= 1, "state_pool", ">= 1")
        need(
            self.state_pool <= min(self.grid_height, self.grid_width),
            "state_pool",
            f"<= the smaller grid side ({min(self.grid_height, self.grid_width)})",
        )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> EnvConfig:
        """Build from a mapping of field names to values.

        Raises:
            ValueError: an unknown key (named), or a value out of range.
            TypeError: not a mapping, or a value of the wrong type.
        """
        if not isinstance(values, Mapping):
            raise TypeError(f"EnvConfig.from_dict expects a mapping, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known, key=repr)  # repr: keys of several types do not compare
        if unknown:
            raise ValueError(f"unknown EnvConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> EnvConfig:
        return self.from_dict({**self.to_dict(), **changes})

    # Derived values: computed, never configured.
    @property
    def num_actions(self) -> int:
        return self.moves + 1

    @property
    def window(self) -> int:
        return 2 * self.obs_radius + 1

    @property
    def pad(self) -> int:
        """Border of blocked cells around the map: wide enough for every window and footprint."""
        return max(1, self.obs_radius, self.sensor_radius)

    @property
    def window_obs_dim(self) -> int:
        """The window's share of the local observation, its first values: blocked, covered and UAV
        count channels of the ``window x window`` cells."""
        return 3 * self.window**2

    @property
    def memory_obs_dim(self) -> int:
        """The memory's share of the local observation: known blocked and known covered per pooled
        block, then the heading to the nearest block not known to be done (`uavsim.heading`)."""
        return 0 if self.comm_radius is None else 2 * self.state_pool**2 + 3

    @property
    def paths_obs_dim(self) -> int:
        """With ``window_paths``: for each move, whether it gets closer to the nearest uncovered free
        cell of the window (or, with ``path_radius``, of the memory near the UAV), then that distance
        (`uavsim.window_paths`)."""
        return self.moves + 1 if self.window_paths else 0

    @property
    def local_obs_dim(self) -> int:
        return self.window_obs_dim + 3 + self.memory_obs_dim + self.paths_obs_dim

    @property
    def state_dim(self) -> int:
        return 2 * self.state_pool**2 + 2 * self.num_uavs + 2
