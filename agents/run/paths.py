"""Output paths checked before any work starts: a run directory, a results folder or a JSON file
that cannot be written should fail in the first second, not after an hour of training or
measuring."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def new_run_dir(seed: int, root: Path = Path("runs")) -> Path:
    """A new, empty `root/mappo-SEED-TIME` (a run without `run.dir`), made here (then `-2`, `-3`, ... if taken): this
    run's alone, even when jobs of one seed start in the same second (a sweep), where the second would find it in use.

    Raises:
        ValueError: it cannot be made (a read-only working directory, say).
    """
    base = f"mappo-{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, k = root / base, 1
    try:
        root.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                path.mkdir()  # atomic: of two processes making one name, one fails
                return path
            except FileExistsError:
                k += 1
                path = root / f"{base}-{k}"
    except OSError as err:
        where = f"{root} is a file" if root.is_file() else (err.strerror or str(err))  # not the run's name: its folder
        raise ValueError(f"cannot make the run directory {path}: {where}; set run.dir=DIR") from None


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


def write_text_atomically(path: Path, text: str) -> None:
    """`path` holds `text` (UTF-8) whole, or what it held before: written beside it, then moved over it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_orphaned_temporaries(temporaries: Iterable[Path], pid_of: Callable[[Path], str]) -> None:
    """Delete the temporary files that a process killed mid-write left behind: those of `temporaries` whose
    writer's pid (`pid_of(path)`, the digits in its name) is not this process and no longer runs."""
    import psutil  # here: `benchmarks.out_paths` imports this module before anything is installed

    for tmp in temporaries:
        pid = pid_of(tmp)
        # psutil, not os.kill(pid, 0): on Windows signal 0 is CTRL_C_EVENT, sent to the pid's console group
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            with contextlib.suppress(OSError):  # another process removed it first
                tmp.unlink()
