"""Starting workers: ``startup_timeout``, ``stagger``, and ``python=`` (another interpreter)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import placement_helpers as h
import pool_helpers as ph
import pytest

from agents.placement import WorkerDiedWarning, WorkerInitError, WorkerPool, dp_map


def test_a_hung_make_worker_is_reported_with_its_device_and_the_rest_finish(tmp_path):
    make = functools.partial(ph.make_hang_once, str(tmp_path))
    # the limit counts from the process's start (its imports too): roomy, for a loaded machine
    with pytest.warns(WorkerDiedWarning, match=r"on cpu:[01] .*startup_timeout=20s"):
        out = dp_map(make, range(6), ["cpu", "cpu"], startup_timeout=20, threads_per_worker=1, progress=False)
    assert out == list(range(6))


def test_every_worker_hung_is_a_worker_init_error_naming_the_device():
    with pytest.warns(WorkerDiedWarning, match="startup_timeout"):
        with pytest.raises(WorkerInitError, match=r"worker 0 on cpu:0:\nnot ready within startup_timeout=2s"):
            dp_map(ph.make_hang, [1], ["cpu"], startup_timeout=2, progress=False)


def test_staggered_workers_load_one_after_another(tmp_path):
    make = functools.partial(ph.make_loading_log, str(tmp_path))
    with WorkerPool(make, ["cpu", "cpu", "cpu"], threads_per_worker=1, stagger=True) as pool:
        pids, deadline = set(), time.monotonic() + 50  # the limit only stops a broken pool
        while len(pids) < 3 and time.monotonic() < deadline:  # until all three have loaded and answered
            pids |= {pid for _, pid in pool.map(range(6), progress=False)}
            time.sleep(0.05)
    assert len(pids) == 3
    assert not list(tmp_path.glob("overlap-*"))  # no worker loaded while another was loading


def test_bad_start_arguments_are_refused():
    with pytest.raises(ValueError, match="startup_timeout"):
        WorkerPool(h.make_identity, ["cpu"], startup_timeout=0)
    with pytest.raises(TypeError, match="stagger"):
        WorkerPool(h.make_identity, ["cpu"], stagger="yes")
    with pytest.raises(TypeError, match="python"):
        WorkerPool(h.make_identity, ["cpu"], python=3)


def test_python_this_interpreter_runs_the_workers():
    [env] = dp_map(ph.make_environment, [0], ["cpu"], python=sys.executable, progress=False)
    assert Path(env["executable"]).resolve() == Path(sys.executable).resolve()


def test_python_that_is_missing_or_not_python_is_a_clear_error(tmp_path):
    missing = tmp_path / "nowhere" / "python"
    with pytest.raises(ValueError, match=rf"python='{_re(missing)}' does not exist"):
        WorkerPool(h.make_identity, ["cpu"], python=missing)
    text = tmp_path / "notes.txt"
    text.write_text("not an interpreter\n")
    with pytest.raises(ValueError, match=rf"python='{_re(text)}' cannot be run"):
        dp_map(h.make_identity, [1], ["cpu"], python=str(text))


@pytest.mark.timeout(180)
def test_python_of_another_venv_needs_this_package_there(tmp_path):
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # a bare venv cannot import torch: refused, saying why
    with pytest.raises(ValueError, match=rf"python='{_re(python)}' cannot run the workers: .*No module named"):
        WorkerPool(h.make_identity, ["cpu"], python=python)
    # give it this environment's packages (as a venv with them installed would have): it runs
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "parent_env.pth").write_text("\n".join(ours) + "\n")
    [env] = dp_map(ph.make_environment, [0], ["cpu"], python=python, progress=False)
    assert Path(env["prefix"]).resolve() == venv.resolve()


def _re(path: Path) -> str:
    import re

    return re.escape(str(path))
