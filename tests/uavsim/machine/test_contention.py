"""The start-up warning when other processes keep a multi-threaded run's cores busy."""

import pytest

from uavsim.machine import contention


@pytest.fixture(autouse=True)
def no_policy(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # tests/conftest.py sets one for the suite


def sampled_never():
    raise AssertionError("sampled the load where the answer did not depend on it")


def test_warns_a_multi_threaded_run_beside_busy_cores():
    text = contention.contention_warning(2, lambda: 1.0, cores=2)
    assert text.startswith("warning: other processes keep 1.0 of this run's cores busy; its 2 torch threads")
    assert "OMP_WAIT_POLICY=PASSIVE" in text and "run.torch_threads=1" in text


def test_quiet_on_idle_cores():
    assert contention.contention_warning(2, lambda: contention.BUSY_CORES - 0.01, cores=2) is None


@pytest.mark.parametrize(
    "threads, cores, busy, warns",
    [
        (2, 64, 3.0, False),  # 2 threads (a container's quota, or set) on a 64-core host: 59 cores stay idle
        (2, 64, 62.9, True),  # the others leave it less than its 2 cores
        (4, 4, 1.0, True),
        (4, 8, 4.9, True),  # 0.9 cores into its 4
        (4, 8, 3.0, False),
    ],
)
def test_a_run_with_fewer_threads_than_cores_warns_only_when_the_others_leave_it_too_few(threads, cores, busy, warns):
    assert (contention.contention_warning(threads, lambda: busy, cores=cores) is not None) == warns


def test_one_thread_or_a_chosen_policy_needs_no_sample(monkeypatch):
    assert contention.contention_warning(1, sampled_never) is None
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert contention.contention_warning(4, sampled_never) is None


def test_the_sample_counts_the_cores_of_this_process(monkeypatch):
    monkeypatch.setattr(contention.psutil, "cpu_percent", lambda interval, percpu: [100.0, 50.0, 100.0])
    monkeypatch.setattr(contention.psutil.Process, "cpu_affinity", lambda self: [0, 1], raising=False)
    assert contention.others_busy_cores(0.0) == pytest.approx(1.5)
