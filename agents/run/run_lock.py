"""One trainer per run directory: a second one there (a `--resume` started while the first still runs, after a
"crash" that was not one) would overwrite the first's checkpoints and log a second history beside its own.

The trainer's main process writes `RUN/train.lock` (its pid, host and start time) when it starts writing into a
run directory and deletes it when it ends (an error or Ctrl-C too). A lock whose process is gone (killed, a power
cut: nothing deletes it) is stale and ignored; so is one this process wrote itself (a second `train` call in one
process, as the tests make). On another host the holder cannot be seen: the trainer says so and goes on (a run
resumed on another machine after a crash must not be refused by the lock its crash left). psutil, not
`os.kill(pid, 0)`, tells whether a pid runs: on Windows signal 0 is CTRL_C_EVENT.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import psutil

LOCK_NAME = "train.lock"


def _this_process() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": psutil.Process().create_time()}


def _read(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none, or a torn write: nothing to respect
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


def _same_process(a: dict, b: dict) -> bool:
    return a.get("host") == b.get("host") and a.get("pid") == b.get("pid") and a.get("started") == b.get("started")


def _running(holder: dict) -> bool:
    """Whether the lock's process still runs on this host (its pid alive with the same start time: not a reused pid)."""
    try:
        return abs(psutil.Process(holder["pid"]).create_time() - float(holder.get("started", 0))) < 1.0
    except (psutil.Error, TypeError, ValueError):
        return False


def trainer_in(run_dir: Path) -> str | None:
    """Why `run_dir` cannot be trained into now (another trainer on this host holds it), or None."""
    holder = _read(Path(run_dir) / LOCK_NAME)
    me = _this_process()
    if holder is None or _same_process(holder, me) or holder.get("host") != me["host"] or not _running(holder):
        return None
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["started"])))
    return (
        f"run.dir {run_dir} is in use by a trainer that still runs (pid {holder['pid']}, started {started}): a second "
        f"one would overwrite its checkpoints; wait for it or stop it first, or train into another run.dir"
    )


def claim(run_dir: Path) -> tuple[Path, str | None]:
    """Write this process's lock into `run_dir` (which exists). Returns `(lock path, note)`: the note says when
    the lock found there was another host's, whose trainer this host cannot see. Raises ValueError where
    `trainer_in` names one (checked again: another trainer may have started since)."""
    problem = trainer_in(run_dir)
    if problem:
        raise ValueError(problem)
    path, me = Path(run_dir) / LOCK_NAME, _this_process()
    holder = _read(path)
    note = None
    if holder is not None and holder.get("host") != me["host"]:
        note = (
            f"note: {path} was written by a trainer on host {holder.get('host')!r} (pid {holder.get('pid')}); "
            "if it still runs there, two trainers now write into this run directory"
        )
    if not _create(path, me):  # a lock is there: stale, another host's, or this process's
        problem = trainer_in(run_dir)  # or a trainer's that claimed it since the check above
        if problem:
            raise ValueError(problem)
        _move_aside(path, me, run_dir)  # of two trainers taking over one stale lock, one moves it: both create
        if not _create(path, me):
            raise ValueError(trainer_in(run_dir) or f"run.dir {run_dir}: another trainer claimed it at this moment")
    return path, note


def _move_aside(path: Path, me: dict, run_dir: Path) -> None:
    """Delete the lock at `path`, found stale, by renaming it first: a rename of one file succeeds once. If what
    was renamed is a running trainer's lock (it took the stale one over since this process looked), put it back."""
    aside = path.with_name(f".{LOCK_NAME}.old-{os.getpid()}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return  # another trainer moved it first
    holder = _read(aside)
    if holder is not None and not _same_process(holder, me) and holder.get("host") == me["host"] and _running(holder):
        os.replace(aside, path)
        raise ValueError(trainer_in(run_dir) or f"run.dir {run_dir}: another trainer claimed it at this moment")
    aside.unlink(missing_ok=True)


def _create(path: Path, me: dict) -> bool:
    """Write `me` as the lock at `path` if none is there; False if one is. A whole temporary file linked into
    place: creating is atomic (of two trainers starting together, one wins) and no one reads a half-written lock
    (where the file system has hard links)."""
    tmp = path.with_name(f".{LOCK_NAME}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(me), encoding="utf-8")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links (FAT): an exclusive create, written at once (empty for a
        try:  # moment, in which a second trainer starting would take it for a torn, stale one)
            with open(path, "x", encoding="utf-8") as f:
                f.write(json.dumps(me))
            return True
        except FileExistsError:
            return False
    finally:
        tmp.unlink(missing_ok=True)


def release(path: Path | None) -> None:
    """Delete the lock at `path` if it is still this process's (never another trainer's)."""
    if path is None:
        return
    holder = _read(path)
    if holder is not None and _same_process(holder, _this_process()):
        path.unlink(missing_ok=True)
