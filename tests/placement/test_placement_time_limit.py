"""The placement tests' time limit (conftest.py) is attached, and pytest-timeout enforces it."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_placement_test_without_its_own_limit_gets_the_default(request):
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout (the dev extra) enforces the limits"
    assert request.node.get_closest_marker("timeout").args == (60,)


@pytest.mark.timeout(45)
def test_its_own_limit_wins(request):
    assert request.node.get_closest_marker("timeout").args == (45,)


def test_a_test_past_its_limit_fails_instead_of_hanging(tmp_path):
    (tmp_path / "test_hangs.py").write_text(
        "import time, pytest\n\n@pytest.mark.timeout(1)\ndef test_hangs():\n    time.sleep(60)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 1 and "Timeout" in proc.stdout, proc.stdout[-2000:]
