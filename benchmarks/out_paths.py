"""Where a benchmark writes: its output paths checked before it measures, and result names that never
overwrite an earlier run's. Torch-free, so that `benchmarks.check_wheels` runs before torch is installed."""

from __future__ import annotations

import argparse
from pathlib import Path

OUT_DIR_HELP = (
    "folder of the results: NAME-MACHINE-DATE[-quick|-subset][-2...].json and .md (and .png where it plots); "
    "default: benchmarks/results"
)


def out_dir_arg(value: str) -> Path:
    """argparse `type` for `--out-dir`: a folder that can be written, checked before measuring."""
    from agents.run.paths import dir_problem

    problem = dir_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(value)


def out_file_arg(value: str) -> Path:
    """argparse `type` for `--out FILE`: a file path that can be written (its folder made if missing),
    checked before measuring, so that minutes of work are not lost to a path found bad at the end."""
    from agents.run.paths import file_problem

    problem = file_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(value)


def free_stem(out_dir: Path, stem: str, suffixes: tuple[str, ...]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ...: the first whose files (``suffixes``) are all new in
    ``out_dir``. A second run on a day (other settings, or the same again) never overwrites the first's
    files, which the docs may cite; the newer is said by its name."""
    k, candidate = 1, stem
    while any((out_dir / f"{candidate}{suffix}").exists() for suffix in suffixes):
        k += 1
        candidate = f"{stem}-{k}"
    return candidate
