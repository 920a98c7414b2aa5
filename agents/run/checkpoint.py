"""Checkpoint files: atomic writes, a checksum, the last K kept, clear errors on bad files.

A checkpoint is `RUN_DIR/checkpoints/ckpt_<env_steps>.pt`:

    MAGIC (8 bytes) | SHA-256 of the payload (32 bytes) | payload (a `torch.save` of a dict)

It is written to a temporary file in the same directory, flushed and fsync'ed, then renamed over
the final name, so a crash mid-write never leaves a half-written checkpoint under a real name and
the previous checkpoints stay intact; on POSIX the folder is fsync'ed too, so that the rename
itself survives a power cut (Windows cannot open a folder for that). Ctrl-C (SIGINT) waits until
the write and the rename are done, and any other failure deletes the temporary file. Loading
checks the magic, the length and the checksum before unpickling (with `weights_only=True`:
tensors, numbers, strings and containers only), then the payload's structure (counters, config
sections, state dicts, ranks) and that every floating-point weight is finite.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import torch

from agents.run.paths import remove_orphaned_temporaries, write_text_atomically

MAGIC = b"UAVCKPT1"
FORMAT_VERSION = 2  # 2: the action noise is a counter (agents.algo.action_noise), not a generator state
_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
REQUIRED_KEYS = (
    "format_version",
    "config",
    "env_steps",
    "iteration",
    "actor",
    "critic",
    "value_norm",
    "optimizer",
    "scaler",
    "env",
    "rng",
)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (missing, corrupt, truncated or mismatched)."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoints of a run, oldest first (by env steps)."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(
    run_dir: str | Path, payload: dict[str, Any], keep: int, beside: dict[str, str] | None = None
) -> Path:
    """Write `payload` as `ckpt_<env_steps>.pt` atomically; a Ctrl-C waits until all is done, so the
    files agree with the newest checkpoint.

    Args:
        run_dir: the run directory (the file goes into its `checkpoints/`).
        payload: the checkpoint (`agents.run.learner_state.learner_state`), with every `REQUIRED_KEYS`.
        keep: checkpoints kept; older ones are deleted.
        beside: text files to (re)write in `run_dir` with it (`{"config.yaml": ...}`), also atomically.

    Returns:
        The checkpoint's path.

    Raises:
        ValueError: `payload` lacks a required key.
    """
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise ValueError(f"checkpoint payload lacks {missing}")
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    path = d / f"ckpt_{int(payload['env_steps']):012d}.pt"
    tmp = d / f".{path.name}.tmp-{os.getpid()}"
    with _sigint_deferred():
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + hashlib.sha256(data).digest() + data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_folder(d)
        for name, text in (beside or {}).items():
            write_text_atomically(Path(run_dir) / name, text)
        for old in list_checkpoints(run_dir)[:-keep]:
            old.unlink(missing_ok=True)
        _remove_orphaned_temporaries(d)
    return path


def _fsync_folder(d: Path) -> None:
    """Make the entries just renamed into `d` durable (POSIX: fsync the folder itself). Windows has
    no `O_DIRECTORY` and refuses to open a folder (PermissionError), so there it is skipped: the
    file's content was fsync'ed before the rename, so a crash still never leaves a half-written
    checkpoint under a real name."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows
        return
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _sigint_deferred():
    """Hold a Ctrl-C (SIGINT) that arrives inside the block and deliver it at the end, so that a
    checkpoint being written is finished first. Only the main thread can set signal handlers;
    elsewhere the block runs as is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:  # None: set outside Python
        yield
        return
    caught = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(signal.SIGINT, caught[0])
    elif caught and previous == signal.SIG_DFL:
        # the default action, delivered again: raise() ends the process as SIGINT would (POSIX:
        # killed by SIGINT; Windows: the C runtime's exit). os.kill(own pid, SIGINT) would not do
        # on Windows, where it calls TerminateProcess with exit code 2 at once.
        signal.raise_signal(signal.SIGINT)


def _remove_orphaned_temporaries(d: Path) -> None:
    """Delete `.<name>.tmp-<pid>` files of writers killed mid-write. Only the main process of a run writes
    checkpoints."""
    remove_orphaned_temporaries(d.glob(".ckpt_*.pt.tmp-*"), lambda tmp: tmp.name.rsplit("-", 1)[-1])


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint file.

    Args:
        path: the checkpoint file.
        map_location: where its tensors are loaded.

    Returns:
        The payload.

    Raises:
        CheckpointError: missing, not a checkpoint, corrupt or truncated, another format version, or a
            payload of the wrong structure or with non-finite weights; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    raw = path.read_bytes()
    head = len(MAGIC) + 32
    if len(raw) < head or raw[: len(MAGIC)] != MAGIC:
        raise CheckpointError(f"checkpoint {path} is not a uavsim checkpoint (bad header; truncated?)")
    digest, data = raw[len(MAGIC) : head], raw[head:]
    if hashlib.sha256(data).digest() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated (checksum mismatch, {len(raw)} bytes)")
    try:
        payload = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 -- any unpickling failure means an unusable file
        raise CheckpointError(f"checkpoint {path} could not be read: {type(err).__name__}: {err}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(payload).__name__}, expected a dict")
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing}")
    if payload["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {payload['format_version']!r}, "
            f"this code reads version {FORMAT_VERSION}"
        )
    problem = _payload_problem(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path}: {problem}")
    return payload


_COUNTERS = {"env_steps": 0, "iteration": 0, "bad_iterations": 0, "world_size": 1}  # key -> least value
_NETWORKS = ("actor", "critic", "value_norm")


def _payload_problem(payload: dict[str, Any]) -> str | None:
    """What is wrong with a payload's structure or values (the checksum only proves that the file
    is what was written), or None. Shapes are checked where the learner loads them."""
    config = payload["config"]
    if not isinstance(config, dict) or not all(
        isinstance(config.get(s), dict) for s in ("env", "model", "train", "run")
    ):
        return "config must be a dict with env, model, train and run sections"
    for key, least in _COUNTERS.items():
        value = payload.get(key, least)
        if type(value) is not int or value < least:  # noqa: E721 -- bool is not a count
            return f"{key} must be an int >= {least}, got {value!r}"
    for key in _NETWORKS:
        tensors = payload[key]
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            return f"{key} must be a dict of tensors (a state_dict)"
        bad = [name for name, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
        if bad:
            return f"{key} holds non-finite values in {bad}: the run that wrote it had diverged"
    optimizer = payload["optimizer"]
    if not isinstance(optimizer, dict) or not {"state", "param_groups"} <= optimizer.keys():
        return "optimizer must be an optimizer state_dict (with state and param_groups)"
    ranks = payload.get("ranks")
    if ranks is not None and (
        not isinstance(ranks, list)
        or len(ranks) != payload.get("world_size", 1)
        or not all(isinstance(r, dict) and {"env", "rng"} <= r.keys() for r in ranks)
    ):
        return "ranks must list one {env, rng} state per rank (world_size of them)"
    return None


def resolve_checkpoint(path_or_run: str | Path) -> Path:
    """A checkpoint file itself, or the newest checkpoint of a run directory.

    Raises:
        CheckpointError: a run directory without checkpoints, or neither a file nor a directory.
    """
    p = Path(path_or_run)
    if p.is_file():
        return p
    if p.is_dir():
        found = list_checkpoints(p)
        if not found and p.name == "checkpoints" and list_checkpoints(p.parent):  # RUN/checkpoints: RUN's
            found = list_checkpoints(p.parent)
        if not found:
            raise CheckpointError(
                f"run directory {p} has no checkpoints in {checkpoint_dir(p)}: nothing to resume, evaluate or "
                "export (a run stopped before its first run.checkpoint_interval has none); start it again "
                f"with its command and run.dir={p}"
            )
        return found[-1]
    raise CheckpointError(f"{p} is neither a checkpoint file nor a run directory")


def load_latest(path_or_run: str | Path, map_location: str | torch.device = "cpu") -> tuple[Path, dict]:
    """`(path, payload)` of `resolve_checkpoint(path_or_run)`, loaded to `map_location`.

    Raises:
        CheckpointError: as `load_checkpoint`, naming the newest readable checkpoint before it, if
            any, so the user can resume from it explicitly.
    """
    path = resolve_checkpoint(path_or_run)
    try:
        return path, load_checkpoint(path, map_location)
    except CheckpointError as err:
        good = _newest_readable([c for c in list_checkpoints(path.parent.parent) if c.name < path.name])
        hint = (
            f"; the newest readable checkpoint before it is {good}: move the unreadable file aside "
            f"(e.g. mv {path} {path}.bad) and run this again"
            if good is not None
            else ""
        )
        raise CheckpointError(f"{err}{hint}") from None


def _newest_readable(candidates: list[Path]) -> Path | None:
    for c in reversed(candidates):
        try:
            load_checkpoint(c)
            return c
        except CheckpointError:
            continue
    return None
