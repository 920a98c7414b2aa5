"""Shared set-up for the placement tests: a per-test time limit, and the helpers' import path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The dp_map tests pass factories from placement_helpers (and examples/toy_models) to spawned
# workers, which import them by name; spawn hands the children this process's sys.path, so
# putting the folders here is enough.
_HERE = Path(__file__).resolve().parent
for _folder in (_HERE.parents[1] / "examples", _HERE):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

DEFAULT_LIMIT_S = 60


def pytest_collection_modifyitems(config, items):
    """Give each placement test without its own ``@pytest.mark.timeout(s)`` a 60 s limit, so that a
    hung worker pool fails its test instead of hanging CI. pytest-timeout enforces it (SIGALRM on
    POSIX, a timer thread on Windows); the hook sees the whole session's items, hence the filter."""
    for item in items:
        if item.path.resolve().is_relative_to(_HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_LIMIT_S))
