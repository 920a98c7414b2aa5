"""User maps: obstacle layouts read from files, played instead of random rectangles (`EnvConfig.maps`).

A map is a ``grid_height x grid_width`` bool array, True where a cell is an obstacle. Formats, by
extension (case-insensitive):

    .txt   a text grid: ``#`` obstacle, ``.`` free, one row per line (UTF-8); blank lines and
           trailing whitespace are ignored, every other character is an error
    .npy   a 2-D bool or integer array (NumPy ``save``, no pickles); nonzero = obstacle
    .png   a pixel darker than mid-grey is an obstacle: luminance (Pillow's ``L``, 0-255) below
           `DARK_BELOW`; transparent pixels are laid over white first (free)

A map set is one such file, a folder (its files with those extensions, sorted by name; other files
are ignored), or a sequence of files, in the order given. `load_map_set` checks every map against
the task and raises a ``ValueError`` naming the file and what was expected:

* the file reads in its format, with a known extension;
* its size is the config's ``grid_height x grid_width`` (the config defines the size, so every map
  of a set has that one size);
* the launch area (the ``launch_size`` square in the top-left corner, where the UAVs start on
  distinct cells) is free: the rules keep it free of obstacles, and a map is played as it is;
* the free cells that UAVs can cover (those within ``sensor_radius`` of a cell reachable from the
  launch area by the task's moves) reach ``target_coverage`` of the free cells, as the env
  computes coverage (float32): otherwise no episode on that map could ever end by reaching it.

NumPy only (Pillow for PNG), like `uavsim.reference`: the batched env copies the set to its device
as ``[M, H, W]`` and picks map ``below(hash(seed, env, episode, draw 0), M)`` at each start
(`uavsim.rules`, "Episode start").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from uavsim import rules
from uavsim.config import EnvConfig
from uavsim.rng import MAX_KEY, below, hash32

DARK_BELOW = 128  # PNG: a pixel with luminance below this (0-255) is an obstacle
MAX_SIDE = 4096  # no grid is larger (`EnvConfig`): a larger image is refused before it is decoded
FORMATS = (".txt", ".npy", ".png")
OBSTACLE, FREE = "#", "."  # text grids

MapSource = str | Path | Sequence[str | Path]


@dataclass(frozen=True)
class MapSet:
    """Checked maps: ``blocked [M, H, W]`` bool (True: obstacle) and the file each came from."""

    blocked: np.ndarray
    files: tuple[Path, ...]

    @property
    def free_cells(self) -> np.ndarray:
        """``[M]`` int64 free cells of each map."""
        return (~self.blocked).reshape(len(self.files), -1).sum(1)

    def __len__(self) -> int:
        return len(self.files)


def read_map(path: str | Path) -> np.ndarray:
    """One map file as a 2-D bool array (True: obstacle), whatever its size.

    Raises:
        ValueError: a missing or unreadable file, an unknown extension, or content that is not a map
            in its format (named, with what was expected).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"map file {path}: unknown extension {path.suffix!r}, expected one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise ValueError(f"map file {path} does not exist (or is not a file)")
    reader = {".txt": _read_text, ".npy": _read_npy, ".png": _read_png}[suffix]
    try:
        blocked = reader(path)
    except OSError as err:
        raise ValueError(f"map file {path} cannot be read: {err}") from None
    if blocked.ndim != 2 or 0 in blocked.shape:
        raise ValueError(f"map file {path}: expected a 2-D map with at least one cell, got shape {blocked.shape}")
    return blocked


def _read_text(path: Path) -> np.ndarray:
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is not a cell
    except UnicodeDecodeError as err:
        raise ValueError(f"map file {path} is not UTF-8 text: {err}") from None
    rows: list[str] = []
    # one row per line: str.splitlines() would also break rows at \v, \f, \x1c-\x1e, \x85 and \u2028-\u2029
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = line.rstrip()
        if not line:
            continue  # blank lines are layout, not rows
        bad = next((i for i, ch in enumerate(line) if ch not in (OBSTACLE, FREE)), None)
        if bad is not None:
            raise ValueError(
                f"map file {path}, line {number}, column {bad + 1}: {line[bad]!r} is not a map cell, "
                f"expected {OBSTACLE!r} (obstacle) or {FREE!r} (free)"
            )
        if rows and len(line) != len(rows[0]):
            raise ValueError(
                f"map file {path}, line {number}: a row of {len(line)} cells, expected {len(rows[0])} (the first row's)"
            )
        rows.append(line)
    if not rows:
        raise ValueError(f"map file {path} holds no rows of {OBSTACLE!r} and {FREE!r}")
    return np.array([[ch == OBSTACLE for ch in row] for row in rows], dtype=bool)


def _read_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as err:  # not a .npy file, an object array, an empty or cut file
        raise ValueError(f"map file {path} is not a NumPy .npy array: {err or type(err).__name__}") from None
    if not isinstance(array, np.ndarray):  # an .npz archive under a .npy name
        array.close()
        raise ValueError(f"map file {path} is not a NumPy .npy array (NumPy reads an .npz archive)")
    if not (array.dtype == bool or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"map file {path}: expected a bool or integer array (nonzero: obstacle), got {array.dtype}")
    return array != 0


def _read_png(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError  # Pillow comes with imageio

    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                raise ValueError(f"map file {path} is not a PNG image (Pillow reads it as {image.format})")
            if max(image.size) > MAX_SIDE:  # read from the header, before decoding
                raise ValueError(f"map file {path} is {image.size[0]}x{image.size[1]} pixels: grids are <= {MAX_SIDE}")
            image.load()
            if image.mode.startswith("I"):  # 16-bit grey: convert() clips to 255 where it should scale
                values = np.asarray(image)
                luminance = values.astype(np.float64) * (255 / 65535)
                if isinstance(image.info.get("transparency"), int):  # the transparent grey value: free
                    luminance[values == image.info["transparency"]] = 255
            else:
                if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
                    rgba = image.convert("RGBA")  # transparent: free, as on a white page
                    image = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba)
                luminance = np.asarray(image.convert("L"))
    except (UnidentifiedImageError, SyntaxError, Image.DecompressionBombError) as err:  # SyntaxError: broken chunks
        raise ValueError(f"map file {path} is not a readable PNG image: {err}") from None
    return luminance < DARK_BELOW


def maps_value(text: str) -> str | None:
    """A ``maps=`` value from a command line: the path as written (not YAML: ``#``, ``: `` and quotes in a path
    would be read as syntax), stripped; ``null``, ``~`` or nothing: no map set (generated maps)."""
    text = text.strip()
    return None if text in ("", "null", "~") else text  # YAML's nulls (its "None" is a string, a folder's name)


def _name(path: Path) -> str:
    return path.name


def map_files(source: MapSource) -> list[Path]:
    """The files of a map set: a file, a folder's map files (sorted by name), or a sequence of files."""
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()  # `~/maps` in a config or a `key=` argument, which no shell expands
        if path.is_dir():
            # by name in code-point order on every OS (Windows paths compare without case: another map order,
            # so other maps for a seed); a broken link is kept, for `read_map` to name, not dropped
            files = sorted((p for p in path.iterdir() if not p.is_dir() and p.suffix.lower() in FORMATS), key=_name)
            if not files:
                raise ValueError(f"map folder {path} holds no map files (expected {', '.join(FORMATS)})")
            return files
        if not path.exists():
            raise ValueError(f"map set {path} does not exist: expected a map file or a folder of them")
        return [path]
    files = [Path(p).expanduser() for p in source]
    if not files:
        raise ValueError("a map set needs at least one map file, got an empty list")
    return files


def load_map_set(source: MapSource, cfg: EnvConfig) -> MapSet:
    """Read and check the maps of ``source`` (see `map_files`) for the task ``cfg``.

    Raises:
        ValueError: the first problem found, naming the file (module docstring).
    """
    files = map_files(source)
    if len(files) >= MAX_KEY:
        raise ValueError(f"a map set holds fewer than 2**31 maps, got {len(files)}")
    blocked = np.stack([check_map(read_map(f), f, cfg) for f in files])
    return MapSet(blocked, tuple(files))


def check_map(blocked: np.ndarray, path: Path, cfg: EnvConfig) -> np.ndarray:
    """``blocked`` if it is a playable map of the task ``cfg``, else a ValueError naming ``path``."""
    h, w, ls = cfg.grid_height, cfg.grid_width, cfg.launch_size
    if blocked.shape != (h, w):
        raise ValueError(
            f"map file {path} is {blocked.shape[0]}x{blocked.shape[1]} cells (rows x columns), expected the "
            f"env's grid_height x grid_width = {h}x{w} (set grid_height={blocked.shape[0]} "
            f"grid_width={blocked.shape[1]} to play it)"
        )
    in_launch = np.argwhere(blocked[:ls, :ls])
    if len(in_launch):
        cells = ", ".join(f"({r}, {c})" for r, c in in_launch[:4].tolist()) + (" ..." if len(in_launch) > 4 else "")
        raise ValueError(
            f"map file {path} has obstacles in the launch area at (row, col) {cells}: the top-left "
            f"{ls}x{ls} square (launch_size={ls}), where the {cfg.num_uavs} UAVs start, must be free"
        )
    free = int((~blocked).sum())
    coverable = int(coverable_cells(blocked, cfg).sum())
    reachable = np.float32(coverable) / np.float32(free)  # as the env computes coverage
    if reachable < np.float32(cfg.target_coverage):
        raise ValueError(
            f"map file {path}: only {coverable} of its {free} free cells can be covered from the launch area "
            f"({float(reachable):.4f} < target_coverage={cfg.target_coverage}): the rest lie out of reach of "
            f"every path the UAVs can take, so no episode could reach the target; open the walled-off areas "
            f"or lower target_coverage"
        )
    return blocked


def coverable_cells(blocked: np.ndarray, cfg: EnvConfig) -> np.ndarray:
    """``[H, W]`` bool: the free cells within a UAV's footprint from some cell it can reach from the
    launch area (by the task's moves; a move only needs its target cell free, as in the rules)."""
    h, w, ls = cfg.grid_height, cfg.grid_width, cfg.launch_size
    moves = [(int(dr), int(dc)) for dr, dc in rules.move_table(cfg)[1:]]
    reached = np.zeros((h, w), dtype=bool)
    reached[:ls, :ls] = True  # the launch area is free (checked before)
    todo = deque((r, c) for r in range(ls) for c in range(ls))
    while todo:  # breadth-first search: O(cells x moves), fine for maps of any allowed size
        r, c = todo.popleft()
        for dr, dc in moves:
            y, x = r + dr, c + dc
            if 0 <= y < h and 0 <= x < w and not reached[y, x] and not blocked[y, x]:
                reached[y, x] = True
                todo.append((y, x))
    covered = np.zeros_like(reached)
    for dr, dc in rules.footprint_offsets(cfg).tolist():  # cell (y, x) is covered from (y - dr, x - dc)
        if abs(dr) >= h or abs(dc) >= w:  # a sensor wider than a side: this offset covers no cell
            continue
        covered[max(0, dr) : h + min(0, dr), max(0, dc) : w + min(0, dc)] |= reached[
            max(0, -dr) : h + min(0, -dr), max(0, -dc) : w + min(0, -dc)
        ]
    return covered & ~blocked


def map_indices(seed: int, env_index: np.ndarray, episode: np.ndarray | int, num_maps: int) -> np.ndarray:
    """Which map of a set of ``num_maps`` environments ``env_index`` play in ``episode`` (NumPy int64),
    as both envs choose it (`uavsim.rules`, "Episode start")."""
    keys = [np.asarray(x, dtype=np.uint64) for x in (seed, env_index, episode, rules.MAP_DRAW)]
    return below(hash32(*keys), np.uint64(num_maps)).astype(np.int64)
