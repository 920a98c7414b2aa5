"""``journal=``: results recorded as they finish; a rerun, even after the parent was killed, resumes."""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import placement_helpers as h
import pool_helpers as ph
import psutil
import pytest

from agents.placement import Journal, WorkerPool, dp_map
from agents.placement.journal import job_key_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def computed(log: Path) -> collections.Counter:
    """How many times each item was computed, from the workers' log."""
    return collections.Counter(int(x) for x in log.read_text().split()) if log.exists() else collections.Counter()


def test_a_rerun_skips_the_finished_items_and_returns_all(tmp_path):
    log, journal = tmp_path / "log", tmp_path / "run.journal"
    with WorkerPool(ph.make_logged_square, ["cpu", "cpu"], threads_per_worker=1) as pool:
        first = pool.map([(x, str(log), 0) for x in range(6)], journal=journal, progress=False)
        items = [(x, str(log), 0) for x in range(10)]  # the same call, over more items
        again = pool.map(items, batch_size=3, journal=journal, progress=False)
        streamed = list(pool.imap(items, journal=journal, progress=False))
    assert first == [x * x for x in range(6)] and again == streamed == [x * x for x in range(10)]
    assert computed(log) == collections.Counter(range(10))  # each item computed once over the three runs


def test_a_journal_that_holds_everything_starts_no_worker(tmp_path):
    log, journal = tmp_path / "log", tmp_path / "run.journal"
    items = [(x, str(log), 0) for x in range(4)]
    dp_map(ph.make_logged_square, items, ["cpu"], journal=journal, progress=False)
    pid_log = tmp_path / "pids"
    make = functools.partial(ph.make_pid_logged_square, str(pid_log))
    with pytest.raises(ValueError, match="job_key"):  # another make_worker (a partial of another function)
        dp_map(make, items, ["cpu"], journal=journal, progress=False)
    assert dp_map(ph.make_logged_square, items, ["cpu"], journal=journal, progress=False) == [0, 1, 4, 9]
    with Journal(journal, job_key_for(ph.make_logged_square)) as opened:  # an open journal: the caller's to close
        assert dp_map(ph.make_logged_square, items, ["cpu"], journal=opened, progress=False) == [0, 1, 4, 9]
        assert len(opened) == 4
        # an open journal of another job is refused as a path is (it answered the other job's items)
        with pytest.raises(ValueError, match=r"run\.journal was opened for job_key .*make_logged_square"):
            dp_map(make, items, ["cpu"], journal=opened, progress=False)
        with WorkerPool(make, ["cpu"]) as pool, pytest.raises(ValueError, match="was opened for job_key"):
            pool.map(items + [(4, str(log), 0)], journal=opened, progress=False)
    assert computed(log) == collections.Counter(range(4)) and not pid_log.exists()


def test_a_journal_written_for_other_items_is_a_clear_error_and_the_pool_goes_on(tmp_path):
    journal = tmp_path / "run.journal"
    with WorkerPool(h.make_identity, ["cpu"], threads_per_worker=1) as pool:
        assert pool.map(["a", "b"], journal=journal, progress=False) == ["a", "b"]
        with pytest.raises(ValueError, match=r"journal .*run.journal was written for other items: item 1 differs"):
            pool.map(["a", "c"], journal=journal, progress=False)
        assert pool.map(["x"], progress=False) == ["x"]  # a refused journal leaves the pool usable


PARENT = """
import sys
import pool_helpers as ph
from agents.placement import dp_map

if __name__ == "__main__":
    log, journal, pids = sys.argv[1:4]
    items = [(x, log, 0.4) for x in range(16)]
    make = __import__("functools").partial(ph.make_pid_logged_square, pids)
    dp_map(make, items, ["cpu", "cpu"], prefetch=1, batch_size=2, threads_per_worker=1, journal=journal, progress=False)
"""


@pytest.mark.timeout(240)
def test_a_parent_killed_mid_run_loses_at_most_the_items_in_flight(tmp_path):
    log, journal, pids = tmp_path / "log", tmp_path / "run.journal", tmp_path / "pids"
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    parent = subprocess.Popen([sys.executable, str(script), str(log), str(journal), str(pids)], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 150  # only stops a broken run from hanging the test
        while sum(computed(log).values()) < 6 and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parent.poll() is None, "the parent ended before it could be killed"
        assert sum(computed(log).values()) >= 6
    finally:
        parent.kill()  # SIGKILL on POSIX, TerminateProcess on Windows: no clean-up runs
        parent.wait()
    before = computed(log)
    workers = [int(p) for p in pids.read_text().split()]
    # the orphaned workers see their connection close and exit (not holding a GPU forever)
    deadline = time.monotonic() + 60
    while any(_running(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(p) for p in workers)

    items = [(x, str(log), 0.4) for x in range(16)]  # the same items as the killed run
    make = functools.partial(ph.make_pid_logged_square, str(pids))
    out = dp_map(make, items, ["cpu", "cpu"], prefetch=1, batch_size=2, journal=journal, progress=False)
    assert out == [x * x for x in range(16)]
    after = computed(log)
    assert set(after) == set(range(16))
    recomputed = [x for x in before if after[x] > 1]
    # in flight when killed: at most workers x prefetch x batch_size = 2 x 1 x 2 items; of the 6 or
    # more items computed by then, the others came back from the journal
    assert len(recomputed) <= 4, (before, after)
    assert sum(after.values()) - sum(before.values()) <= 16 - (sum(before.values()) - 4)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
