"""Workers' output shown in the parent, each line prefixed with its worker: ``[cuda:0] loading...``.

A worker's stdout and stderr are pipes that a thread in the parent reads (portable: no signals,
no terminal tricks). Each complete line, and each carriage-return refresh of a progress bar, is
written whole to the parent's ``sys.stdout`` / ``sys.stderr`` under one lock, so lines of
different workers never cut into each other. Everything the worker writes is caught, a crashing
interpreter's last words (written by C code straight to the file descriptor) included.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

_WRITE_LOCK = threading.Lock()  # one line at a time, whichever worker wrote it
_CHUNK = 65536


def split_segments(buffer: bytes) -> tuple[list[tuple[bytes, str]], bytes]:
    """``([(text, ending), ...], rest)``: the complete segments of ``buffer`` and its unfinished tail.

    A segment ends at ``\\n``, ``\\r\\n`` (both given back as ``"\\n"``) or a lone ``\\r`` (a progress
    bar's refresh, given back as ``"\\r"``). A ``\\r`` at the very end stays in ``rest``: the
    ``\\n`` of a ``\\r\\n`` may be in the next chunk.
    """
    out = []
    start = 0
    n = len(buffer)
    i = 0
    while i < n:
        c = buffer[i]
        if c == 0x0A:  # \n
            out.append((buffer[start:i], "\n"))
            start = i + 1
        elif c == 0x0D:  # \r
            if i + 1 == n:
                break
            if buffer[i + 1] == 0x0A:
                out.append((buffer[start:i], "\n"))
                i += 1
            else:
                out.append((buffer[start:i], "\r"))
            start = i + 1
        i += 1
    return out, buffer[start:]


def _write(stream_name: str, text: str) -> None:
    target = getattr(sys, stream_name)  # looked up at each write: pytest and notebooks swap it
    if target is None:  # pythonw: no console
        return
    with _WRITE_LOCK:
        try:
            target.write(text)
            target.flush()
        except (OSError, ValueError):  # a closed or broken stream must not kill the pump
            pass


def pump(source: BinaryIO, prefix: str, stream_name: str, on_eof: Callable[[], Any] | None = None) -> None:
    """Copy ``source`` (a worker's pipe) to the parent's ``sys.<stream_name>``, each segment prefixed.

    Returns at end of file (the worker exited), writing an unfinished last line with a newline;
    calls ``on_eof`` then, so that a loop waiting for the worker wakes up.
    """
    rest = b""
    try:
        while True:
            try:
                chunk = source.read(_CHUNK)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            segments, rest = split_segments(rest + chunk)
            lines = []
            for text, ending in segments:
                if text or ending == "\n":  # an empty \r segment is a bar's leading carriage return
                    lines.append(f"{prefix}{text.decode('utf-8', 'replace')}{ending}")
            if lines:
                _write(stream_name, "".join(lines))
        rest = rest.rstrip(b"\r")
        if rest:
            _write(stream_name, prefix + rest.decode("utf-8", "replace") + "\n")
    finally:
        try:
            source.close()
        except OSError:
            pass
        if on_eof is not None:
            on_eof()


def start_pumps(proc: Any, label: str, on_eof: Callable[[], Any] | None = None) -> list[threading.Thread]:
    """Start the threads that show ``proc``'s stdout and stderr prefixed with ``[label] ``."""
    threads = []
    for name in ("stdout", "stderr"):
        t = threading.Thread(
            target=pump,
            args=(getattr(proc, name), f"[{label}] ", name, on_eof),
            name=f"dp-output-{label}-{name}",
            daemon=True,
        )
        t.start()
        threads.append(t)
    return threads
