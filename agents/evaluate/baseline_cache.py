"""The scripted baselines' results on a set of maps, kept on disk so that evaluating another checkpoint
on the same maps does not play them again.

A baseline's episodes depend on the task, the maps and the code, never on the checkpoint, and the
coordinated planner costs most of an evaluation. One `.npz` file per key holds what `evaluate_all`
uses of a baseline: its per-map results (`run_episodes`: every metric and the coverage curve,
float64 as played) and, where it is drawn (`RECORDED`), the frames of its first episode. The key
(`baseline_key`) is everything those depend on: the baseline, the env config, the maps' contents
(with `maps` set), the env seed and number of maps (episode 0 of environments 0 .. episodes-1), the
device type, the torch and NumPy versions, and a digest of the simulator's source and of the code
that plays and draws the episodes (`source_digest`), so that a code change misses. A file is
written to a temporary name and moved into place (a crash leaves no half file); one that cannot be
read, or holds another key or the wrong shapes, is played again with a warning and replaced.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import uuid
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import uavsim
from agents.evaluate.stats import METRICS
from agents.run.paths import dir_problem, remove_orphaned_temporaries
from agents.run.resume import owning_run_dir
from uavsim.config import EnvConfig
from uavsim.maps import load_map_set

FORMAT = 1  # of the files: raise it when what a file holds changes
CACHE_NAME = ".baseline-cache"  # the default folder, beside the run directories

Played = tuple[dict[str, np.ndarray], list[np.ndarray] | None]  # (run_episodes' results, first-episode frames)


def default_cache_dir(checkpoint: Path) -> Path:
    """`.baseline-cache` beside the run directory that holds `checkpoint` (`runs/.baseline-cache` for
    `runs/NAME/checkpoints/ckpt_*.pt`), or beside a checkpoint kept outside a run: every run of a
    folder shares it, and it goes where the runs go (scratch space, not a home quota). A run inside
    another run (`agents.average`'s `RUN/averaged-lastK/`) shares the outer run's folder's."""
    checkpoint = checkpoint.resolve()  # `agents.evaluate .` from inside a run: `.`'s parent is `.`
    run = owning_run_dir(checkpoint)
    if run is None:
        return checkpoint.parent / CACHE_NAME
    while run.parent != run and (run.parent / "checkpoints").is_dir():  # the parent is a run directory itself
        run = run.parent
    return run.parent / CACHE_NAME


@functools.cache
def source_digest() -> str:
    """SHA-256 of the simulator's source (every `.py` file of the `uavsim` package, by relative path)
    and of `agents/evaluate/episodes.py`, which plays and draws the episodes."""
    h = hashlib.sha256()
    package = Path(uavsim.__file__).parent
    files = [(f"uavsim/{p.relative_to(package).as_posix()}", p) for p in package.rglob("*.py")]
    files.append(("agents/evaluate/episodes.py", Path(__file__).with_name("episodes.py")))
    for name, path in sorted(files):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def maps_digest(env_cfg: EnvConfig) -> str | None:
    """SHA-256 of the maps `env_cfg.maps` plays (their cells, in order), None without a map set: a
    map file edited in place changes the episodes, not the config."""
    if env_cfg.maps is None:
        return None
    blocked = load_map_set(env_cfg.maps, env_cfg).blocked
    return hashlib.sha256(repr(blocked.shape).encode() + np.packbits(blocked).tobytes()).hexdigest()


def baseline_key(name: str, env_cfg: EnvConfig, episodes: int, seed: int, device: torch.device) -> dict:
    """Everything the baseline `name`'s episodes on `episodes` maps of `seed` depend on (JSON)."""
    return {
        "format": FORMAT,
        "baseline": name,
        "env": env_cfg.to_dict(),
        "maps_digest": maps_digest(env_cfg),
        # episode 0 of environments 0 .. episodes-1: random and greedy draw from one generator over
        # the batch, so their results on fewer maps of the same seed are no prefix of these
        "seed": seed,
        "episodes": episodes,
        # the env steps bit for bit alike on either, but that generator is the device's: CUDA's
        # (Philox) draws other numbers than the CPU's (Mersenne Twister)
        "device": torch.device(device).type,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "source": source_digest(),
        "metrics": list(METRICS),  # what each file holds besides the coverage curve and the frames
    }


@dataclass
class BaselineCache:
    """Baselines' results in `folder`, one `.npz` per key; `served` says, per baseline fetched,
    where its results came from (for the printed report)."""

    folder: Path
    served: dict[str, str] = field(default_factory=dict)

    def path(self, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.folder / f"{key['baseline']}-{digest[:24]}.npz"

    def fetch(self, key: dict, need_frames: bool, play: Callable[[], Played]) -> Played:
        """The results stored under `key` (with frames if `need_frames`), else `play()`'s, stored."""
        path, name = self.path(key), key["baseline"]
        problem = None
        if path.is_file():
            try:
                stored = read_entry(path, key, need_frames)
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
                stored, problem = None, f"{path} unreadable ({type(err).__name__}: {err})"
                warnings.warn(f"baseline cache: {problem}; playing {name} again", stacklevel=2)
            if stored is not None:
                self.served[name] = f"from the cache ({path})"
                return stored
            problem = problem or f"{path} holds no frames"
        raw, frames = play()
        try:
            write_entry(path, key, raw, frames)
            stored_as = f"stored in {path}"
        except OSError as err:
            warnings.warn(
                f"baseline cache: cannot write {path} ({err}); {name} is played again next time", stacklevel=2
            )
            stored_as = f"not stored: {err}"
        self.served[name] = f"played ({problem + '; ' if problem else ''}{stored_as})"
        return raw, frames

    def lines(self) -> list[str]:
        """One printed line per baseline fetched."""
        return [f"baseline {name:11s} {where}" for name, where in self.served.items()]


def read_entry(path: Path, key: dict, need_frames: bool) -> Played | None:
    """The results in `path`; None if it lacks the frames asked for.

    Raises:
        ValueError: it holds another key, or arrays of the wrong names, types or shapes.
        OSError, KeyError, EOFError, zipfile.BadZipFile, zlib.error: it is no readable `.npz`.
    """
    with contextlib.ExitStack() as closing:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):  # a `.npy` loads as one array
            raise ValueError("it holds no .npz archive")
        closing.enter_context(z)
        if json.loads(str(z["key"])) != json.loads(json.dumps(key)):
            raise ValueError("it holds another key")
        episodes, steps = key["episodes"], key["env"]["max_steps"] + 1
        raw = {k: z[k] for k in (*METRICS, "coverage_curve")}
        frames = z["frames"] if "frames" in z.files else None
    for k, v in raw.items():
        want = (episodes, steps) if k == "coverage_curve" else (episodes,)
        if v.dtype != np.float64 or v.shape != want:
            raise ValueError(f"{k} is {v.dtype} {v.shape}, expected float64 {want}")
    if frames is not None and (frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3):
        raise ValueError(f"frames are {frames.dtype} {frames.shape}, expected uint8 [T, H, W, 3]")
    if need_frames and frames is None:
        return None
    return raw, (list(frames) if need_frames else None)


def write_entry(path: Path, key: dict, raw: dict[str, np.ndarray], frames: list[np.ndarray] | None) -> None:
    """`raw` (and `frames`) under `key` in `path`, written to a temporary file first and moved into
    place, so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {**raw, "key": np.array(json.dumps(key, sort_keys=True))}
    if frames is not None:
        arrays["frames"] = np.stack(frames)
    # a name of its own (not mkstemp: its files are owner-only, and a runs folder may be shared by a group)
    tmp = path.with_name(f".{path.stem}-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    file = open(tmp, "xb")  # outside the try: a name another writer took is not ours to remove
    try:
        with file:
            np.savez_compressed(file, **arrays)  # the frames: mostly flat colours, ~150 kB for 60 frames of 256x256
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    # `.<stem>-<pid>-<uuid>.tmp` of writers killed mid-write
    orphans = path.parent.glob(f".{path.stem}-*-*.tmp")
    remove_orphaned_temporaries(orphans, lambda tmp: tmp.name[len(path.stem) + 2 :].split("-", 1)[0])


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    """`--baseline-cache DIR` and `--no-baseline-cache`."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--baseline-cache",
        default=None,
        metavar="DIR",
        help=f"where the baselines' results are kept between evaluations (default: {CACHE_NAME} beside the run "
        "directory); they depend on the task, maps, device type and code, not on the checkpoint",
    )
    group.add_argument("--no-baseline-cache", action="store_true", help="play the baselines, neither read nor write")


def cache_from_args(args: argparse.Namespace, checkpoint: Path) -> BaselineCache | None:
    """The cache `args` ask for (None with `--no-baseline-cache`) for `checkpoint`'s evaluation.

    Raises:
        ValueError: `--baseline-cache DIR` cannot be used as a folder (the default one may be read-only:
            its results are read, and a baseline it lacks is played with a warning that it cannot be stored).
    """
    if args.no_baseline_cache:
        return None
    if args.baseline_cache is None:
        return BaselineCache(default_cache_dir(checkpoint))
    problem = dir_problem(args.baseline_cache)
    if problem:
        raise ValueError(f"--baseline-cache: {problem}")
    return BaselineCache(Path(args.baseline_cache))
