"""Shared fixtures for the placement tests: a per-test time limit, and the helpers' import path."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

# The dp_map tests pass factories from placement_helpers to spawned workers, which import it by
# name; spawn hands the children this process's sys.path, so putting the folder here is enough.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

DEFAULT_LIMIT_S = 60


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): fail the test if it runs longer (default 60 s)")


@pytest.fixture(autouse=True)
def _time_limit(request):
    """Fail a test that runs past its limit instead of letting it hang CI (SIGALRM, main thread)."""
    marker = request.node.get_closest_marker("time_limit")
    limit = int(marker.args[0]) if marker else DEFAULT_LIMIT_S

    def expire(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} exceeded its {limit} s time limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
