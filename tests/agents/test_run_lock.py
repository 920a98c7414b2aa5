"""One trainer per run directory (`agents.run.run_lock`): a second trainer while the first still runs is refused;
a lock whose process is gone, or this process's own, is not in the way; another host's is named and passed."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from agents import train_mappo
from agents.run import paths, run_lock
from tests.agents.conftest import TINY


@pytest.fixture
def other_trainer():
    """A live process of this host, standing in for a trainer that still runs."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def write_lock(run_dir, pid: int, started: float, host: str | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": host or run_lock._this_process()["host"], "started": started}
    (run_dir / run_lock.LOCK_NAME).write_text(json.dumps(holder))


def test_a_second_trainer_on_a_run_directory_in_use_is_refused(tmp_path, other_trainer, capsys):
    run = tmp_path / "run"
    write_lock(run, other_trainer.pid, psutil.Process(other_trainer.pid).create_time())
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 2
    err = capsys.readouterr().err
    assert f"run.dir {run} is in use by a trainer that still runs (pid {other_trainer.pid}, started " in err
    assert "would overwrite its checkpoints" in err and not list(run.glob("checkpoints/*"))
    assert json.loads((run / run_lock.LOCK_NAME).read_text())["pid"] == other_trainer.pid  # not taken over


def test_a_resume_into_a_run_directory_in_use_is_refused(tmp_path, other_trainer, capsys):
    run = tmp_path / "run"
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    assert not (run / run_lock.LOCK_NAME).exists()  # released at the end
    write_lock(run, other_trainer.pid, psutil.Process(other_trainer.pid).create_time())
    assert train_mappo.main(["--resume", str(run), "train.total_env_steps=64"]) == 2
    assert "is in use by a trainer that still runs" in capsys.readouterr().err


def test_stale_locks_are_passed_and_the_lock_is_released_however_the_run_ends(tmp_path, other_trainer, monkeypatch):
    run = tmp_path / "run"
    # a reused pid (alive, another start time) and a dead one: both stale
    write_lock(run, other_trainer.pid, psutil.Process(other_trainer.pid).create_time() - 1000.0)
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    assert not (run / run_lock.LOCK_NAME).exists()

    real = train_mappo.train_iteration
    seen = []

    def interrupted(learner, *args, **kwargs):
        seen.append(json.loads((run / run_lock.LOCK_NAME).read_text()))  # held while it trains
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mappo, "train_iteration", interrupted)
    assert train_mappo.main(["--resume", str(run), "train.total_env_steps=64"]) == 130
    assert seen and seen[0]["pid"] == run_lock._this_process()["pid"]
    assert not (run / run_lock.LOCK_NAME).exists()
    monkeypatch.setattr(train_mappo, "train_iteration", real)
    write_lock(run, 2**22 + 7, 1.0)  # a pid no process has
    assert run_lock.trainer_in(run) is None


def test_another_hosts_lock_is_named_and_passed(tmp_path, capsys):
    run = tmp_path / "run"
    write_lock(run, 4321, 1.0, host="node-b")
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    assert "was written by a trainer on host 'node-b' (pid 4321)" in capsys.readouterr().err
    assert not (run / run_lock.LOCK_NAME).exists()


@pytest.mark.parametrize("stale", [False, True])
def test_a_lock_another_trainer_takes_while_this_one_claims_is_respected(tmp_path, other_trainer, monkeypatch, stale):
    # two trainers starting together both find the folder free (no lock, or a killed run's): the one that comes
    # second must not take the first's lock (stale: it is moved aside, seen to be a running trainer's, put back)
    run = tmp_path / "run"
    run.mkdir()
    if stale:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        write_lock(run, gone.pid, 1.0)  # a killed run's lock
    checks = []
    real = run_lock.trainer_in

    def looked_before_the_other_took_it(run_dir):
        checks.append(run_dir)
        if len(checks) == (2 if stale else 1):  # this trainer found it free; the other one claims it right then
            write_lock(run, other_trainer.pid, psutil.Process(other_trainer.pid).create_time())
            return None
        return real(run_dir)

    monkeypatch.setattr(run_lock, "trainer_in", looked_before_the_other_took_it)
    with pytest.raises(ValueError, match=f"is in use by a trainer that still runs \\(pid {other_trainer.pid}"):
        run_lock.claim(run)
    assert json.loads((run / run_lock.LOCK_NAME).read_text())["pid"] == other_trainer.pid
    assert sorted(p.name for p in run.iterdir()) == [run_lock.LOCK_NAME]  # no temporary or moved file left


def test_a_claimed_lock_is_whole_and_this_process_s(tmp_path):
    path, note = run_lock.claim(tmp_path)
    assert note is None and json.loads(path.read_text()) == run_lock._this_process()
    assert sorted(p.name for p in tmp_path.iterdir()) == [run_lock.LOCK_NAME]
    run_lock.release(path)
    assert not path.exists()


def test_runs_of_one_seed_started_in_the_same_second_get_their_own_default_directories(tmp_path, monkeypatch):
    # a sweep: several configs of one seed launched at once; the second found the first's directory in use
    monkeypatch.setattr(paths.time, "strftime", lambda fmt: "20261205-084451")
    made = [paths.new_run_dir(0, tmp_path / "runs") for _ in range(3)]
    assert [p.name for p in made] == [
        "mappo-0-20261205-084451",
        "mappo-0-20261205-084451-2",
        "mappo-0-20261205-084451-3",
    ]
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


def test_a_run_that_fails_to_start_leaves_no_default_directory(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise ValueError("not enough memory for this many environments")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train_mappo, "build_learner", fail)
    assert train_mappo.main([*TINY, "train.total_env_steps=32"]) == 2
    assert not list((tmp_path / "runs").iterdir())


def test_a_default_directory_that_cannot_be_made_is_a_clear_error(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the runs folder would be", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot make the run directory .*mappo-0-.*set run.dir=DIR"):
        paths.new_run_dir(0, blocker)
