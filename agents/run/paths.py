"""Output paths checked before any work starts: a run directory, a results folder or a JSON file
that cannot be written should fail in the first second, not after an hour of training or
measuring."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def dir_problem(path: str | Path) -> str | None:
    """Why `path` cannot be used as an output directory (created if missing), or None."""
    try:
        return _dir_problem(Path(path))
    except OSError as err:  # a folder on the way that cannot even be looked into (no search permission)
        return f"{path} cannot be used: {err.strerror or err}"


def _dir_problem(p: Path) -> str | None:
    if p.exists() and not p.is_dir():
        return f"{p} exists and is not a directory"
    existing = p
    while not existing.exists():  # the nearest existing ancestor is where the folders get created
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{p} cannot be created: {existing} is not a directory"
    try:  # a real write, not os.access: root passes every permission check, yet /proc refuses it
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=existing))
    except OSError as err:
        return f"{p} cannot be written: {existing}: {err.strerror or err}"
    return None


def file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be written as an output file (its folder created if missing), or None."""
    p = Path(path)
    try:
        if p.is_dir():
            return f"{p} is a directory, expected a file path"
    except OSError as err:
        return f"{p} cannot be used: {err.strerror or err}"
    return dir_problem(p.parent)
