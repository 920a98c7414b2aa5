"""Benchmarks: each module is an entry point (`python -m benchmarks.NAME`) writing `results/`."""

from __future__ import annotations

import codecs
import sys


def tolerate_narrow_consoles(streams=None) -> None:
    """Let `streams` (stdout and stderr) print what their encoding lacks as `?` rather than raise.

    The tables say `≤`, `→` and `µs`; on Windows a redirected stdout (`> log.txt`) takes the locale's
    code page (cp1252 has no `≤`), and a benchmark that had written its files would end in a
    UnicodeEncodeError. UTF-8 streams are left as they are."""
    for stream in (sys.stdout, sys.stderr) if streams is None else streams:
        encoding = getattr(stream, "encoding", None)
        if encoding and codecs.lookup(encoding).name != "utf-8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


tolerate_narrow_consoles()
