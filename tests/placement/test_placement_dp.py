"""dp_map / WorkerPool on CPU workers: ordering, dynamic dispatch, retries, deaths, timeouts."""

from __future__ import annotations

import collections
import copy
import itertools
import pickle
import signal
import time
import warnings

import numpy as np
import placement_helpers as h
import pytest
import torch

from agents.placement import DPMapError, ItemFailure, WorkerDiedWarning, WorkerInitError, WorkerPool, dp_map
from agents.placement.pool import arguments
from agents.placement.pool.arguments import visible_device_token
from agents.placement.pool.errors import stream_failure
from agents.placement.pool.scheduler import FAIL_PULL

CPU2 = ["cpu", "cpu"]


def test_results_in_input_order_although_completed_out_of_order():
    out = dp_map(h.make_square, range(40), CPU2, progress=False)
    assert [v for v, _ in out] == [x * x for x in range(40)]
    done_at = [t for _, t in out]
    # the workers did finish items out of input order, so the ordering came from dp_map
    assert any(later < earlier for earlier, later in zip(done_at, done_at[1:]))


def describe_until_every_worker_answered(pool, workers=2, limit_s=50):
    """``make_describe`` results of maps repeated until ``workers`` pids answered. Items go to the
    workers that are up: on a loaded machine one may start seconds after the other and take every
    item of a map meanwhile (the limit only stops a broken pool from looping forever)."""
    out, deadline = [], time.monotonic() + limit_s
    while len({pid for _, pid, _, _ in out}) < workers and time.monotonic() < deadline:
        out += pool.map(range(8), progress=True)
        time.sleep(0.05)
    return out


def test_workers_see_their_device_threads_and_no_gpu():
    with WorkerPool(h.make_describe, CPU2, threads_per_worker=1) as pool:
        out = describe_until_every_worker_answered(pool)
    assert {(dev, threads, visible) for dev, _, threads, visible in out} == {("cpu", 1, "")}
    assert len({pid for _, pid, _, _ in out}) == 2


def test_one_worker_and_no_items():
    assert dp_map(h.make_identity, [], ["cpu"]) == []  # starts no worker at all
    assert dp_map(h.make_identity, ["a", {"b": 1}, None], ["cpu"], progress=False) == ["a", {"b": 1}, None]


def test_slow_worker_gets_fewer_items(tmp_path):
    with WorkerPool(h.make_slow_on_second_worker, CPU2, threads_per_worker=1) as pool:
        # both workers must be up before the timed map: on a loaded machine one may start seconds
        # after the other and take every item meanwhile, whichever of them is the slow one
        for attempt in range(50):
            warm = pool.map([(x, str(tmp_path / f"warm{attempt}.pid")) for x in range(4)], progress=False)
            if len({pid for _, pid in warm}) == 2:
                break
        items = [(x, str(tmp_path / "slow.pid")) for x in range(60)]
        out = pool.map(items, progress=False)
    assert [x for x, _ in out] == list(range(60))
    slow_pid = int((tmp_path / "slow.pid").read_text())
    counts = collections.Counter(pid for _, pid in out)
    assert len(counts) == 2
    # the slow worker is 10x slower; fixed round-robin would have given it 30 of the 60
    assert counts[slow_pid] < 20


def test_a_stream_failure_pickles_and_copies_with_its_own_message():
    failure = ItemFailure(index=3, device="cpu", attempts=2, error="ValueError: bad", traceback="Traceback ...")
    with pytest.raises(DPMapError) as info:
        stream_failure(failure, "raise")
    for again in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value)):
        assert type(again) is DPMapError and again.failures == again.results == [failure]
        assert str(again) == str(info.value) and "the iteration stops here" in str(again)


@pytest.mark.parametrize("on_error", ["raise", "collect"])
def test_failing_item_retried_on_the_other_worker_then_reported(tmp_path, on_error):
    items = [(x, {5}, str(tmp_path)) for x in range(10)]
    if on_error == "raise":
        with pytest.raises(DPMapError) as info:
            dp_map(h.make_fail_on, items, CPU2, on_error="raise", progress=False)
        failures, results = info.value.failures, info.value.results
        assert "item 5" in str(info.value) and "ValueError: bad item 5" in str(info.value)
        again = pickle.loads(pickle.dumps(info.value))  # it crosses a process boundary (a job in a process pool)
        assert (again.failures, again.results, str(again)) == (failures, results, str(info.value))
    else:
        results = dp_map(h.make_fail_on, items, CPU2, on_error="collect", progress=False)
        failures = [r for r in results if isinstance(r, ItemFailure)]
    assert [f.index for f in failures] == [5]
    assert failures[0].attempts == 2 and failures[0].error == "ValueError: bad item 5"
    assert "Traceback" in failures[0].traceback and "placement_helpers.py" in failures[0].traceback
    assert [r[0] for i, r in enumerate(results) if i != 5] == [x for x in range(10) if x != 5]
    tries = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("5-"))
    assert len(tries) == 2 and tries[0] != tries[1]  # the retry ran in the other worker process


def test_transient_failure_succeeds_on_retry(tmp_path):
    items = [(x, str(tmp_path)) for x in range(6)]
    assert dp_map(h.make_fail_first_attempt, items, CPU2, progress=False) == list(range(6))
    assert (tmp_path / "failed-3").exists()


def test_no_retry_means_first_failure_is_final(tmp_path):
    items = [(x, str(tmp_path)) for x in range(6)]
    out = dp_map(h.make_fail_first_attempt, items, CPU2, retries=0, on_error="collect", progress=False)
    assert isinstance(out[3], ItemFailure) and out[3].attempts == 1
    assert [out[i] for i in (0, 1, 2, 4, 5)] == [0, 1, 2, 4, 5]


POSIX_ONLY = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"),
    reason="death by a POSIX signal (Windows ends a crashed process with an exit code: the 'exit' case)",
)


@pytest.mark.parametrize(
    ("how", "named"),
    [
        pytest.param("SIGKILL", "signal SIGKILL", marks=POSIX_ONLY),
        pytest.param("SIGSEGV", "signal SIGSEGV", marks=POSIX_ONLY),
        ("exit", "exit code 3"),
    ],
    ids=["SIGKILL", "SIGSEGV", "exit"],
)
def test_worker_killed_mid_item_loses_and_duplicates_nothing(tmp_path, how, named):
    items = [(x, 4, how, str(tmp_path)) for x in range(16)]
    with pytest.warns(WorkerDiedWarning, match=rf"{named}.*item 4"):
        out = dp_map(h.make_die_once, items, CPU2, progress=False)
    assert out == list(range(16))  # every item exactly once, in order
    assert (tmp_path / "killed").exists()


def test_item_that_kills_every_worker_is_reported_and_the_rest_finish():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = dp_map(h.make_always_die, range(8), CPU2, on_error="collect", progress=False)
    assert isinstance(out[0], ItemFailure) and out[0].attempts == 2
    assert "died while running this item" in out[0].error and h.DEATH_TEXT in out[0].traceback
    assert out[1:] == list(range(1, 8))
    assert sum(issubclass(w.category, WorkerDiedWarning) for w in caught) == 2


def test_map_ends_when_no_worker_is_left():
    with pytest.warns(WorkerDiedWarning, match="not restarted"):
        out = dp_map(h.make_always_die, range(4), ["cpu"], restarts=0, on_error="collect", progress=False)
    assert all(isinstance(r, ItemFailure) for r in out)
    assert "died while running" in out[0].error
    assert all("no live worker" in r.error for r in out[1:])


def test_a_bad_item_does_not_use_up_the_restarts_of_a_working_worker():
    # one worker, the default restarts=1 and retries=1: item 0 kills it twice; it had answered items before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerDiedWarning)
        with WorkerPool(h.make_always_die, ["cpu"]) as pool:
            out = pool.map([1, 2, 0, 3, 4], on_error="collect", progress=False)
            assert isinstance(out[2], ItemFailure) and "died while running" in out[2].error
            assert [out[i] for i in (0, 1, 3, 4)] == [1, 2, 3, 4]  # it was given up with "no live worker"
            again = pool.map([0, 5], on_error="collect", progress=False)  # a trainer's next call, the same pool
            assert isinstance(again[0], ItemFailure) and again[1] == 5
    with pytest.warns(WorkerDiedWarning, match="not restarted"):  # restarts=0: none, answered or not
        out = dp_map(h.make_always_die, [1, 0, 2], ["cpu"], restarts=0, on_error="collect", progress=False)
    assert out[0] == 1 and "no live worker" in out[2].error


def test_an_endless_stream_ends_with_the_error_once_no_worker_is_left():
    pulled = itertools.count()

    def stream():  # a sensor feed, say: it never ends
        for i in itertools.count():
            next(pulled)
            yield i

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerDiedWarning)
        with WorkerPool(h.make_always_die, ["cpu"], restarts=0) as pool:
            with pytest.raises(DPMapError, match="died while running"):
                for _ in pool.imap_unordered(stream(), progress=False):
                    pass
            with pytest.raises(DPMapError, match="no live worker"):  # the pool's next stream ends too
                next(iter(pool.imap_unordered(stream(), progress=False)))
    # it read the stream to its end before (22 million items in 14 s, then a MemoryError): a step's share now
    assert next(pulled) < 4 * FAIL_PULL


def test_hung_item_is_killed_after_item_timeout():
    with pytest.warns(WorkerDiedWarning, match="item_timeout"):
        out = dp_map(h.make_hang_on, range(6), CPU2, retries=0, item_timeout=1.0, on_error="collect", progress=False)
    assert isinstance(out[1], ItemFailure) and "exceeded item_timeout" in out[1].error
    assert [out[i] for i in (0, 2, 3, 4, 5)] == [0, 2, 3, 4, 5]


def test_make_worker_failure_raises_with_its_traceback():
    with pytest.warns(WorkerDiedWarning, match="make_worker"):
        with pytest.raises(WorkerInitError, match="cannot load weights on cpu"):
            dp_map(h.make_broken, range(3), CPU2, progress=False)


def test_unpicklable_item_is_reported_not_fatal():
    items = [1, lambda: 2, 3]
    out = dp_map(h.make_identity, items, ["cpu"], on_error="collect", progress=False)
    assert out[0] == 1 and out[2] == 3
    assert isinstance(out[1], ItemFailure) and "not picklable" in out[1].error
    assert out[1].attempts == 0  # it never ran, and was not retried (retries=1 by default)


def test_pool_keeps_its_workers_across_maps_and_refuses_after_close():
    with WorkerPool(h.make_describe, CPU2, threads_per_worker=1) as pool:
        first = {pid for _, pid, _, _ in describe_until_every_worker_answered(pool)}
        second = {pid for _, pid, _, _ in pool.map(range(6), progress=False)}
        assert second <= first and len(first) == 2
        for run in (pool.map, pool.imap, pool.imap_unordered):  # not "'NoneType' object is not iterable"
            with pytest.raises(TypeError, match="items must be an iterable of inputs .* got NoneType"):
                run(None)
        assert len(pool.map(range(2), progress=False)) == 2  # still usable
    with pytest.raises(RuntimeError, match="closed"):
        pool.map([1])


@pytest.mark.parametrize("usable, workers, threads", [(1, 2, 1), (4, 2, 2), (7, 3, 2), (64, 1, 64)])
def test_default_threads_divide_the_cores_this_process_may_use(monkeypatch, usable, workers, threads):
    # under taskset, Slurm or a container quota the host has more cores than the job: not os.cpu_count()
    monkeypatch.setattr(arguments, "usable_cores", lambda: (usable, "CPU affinity"))
    args = arguments.check_pool_args(
        h.make_identity, ["cpu"] * workers, None, 1, 0, None, False, None, None, None, local=True
    )
    assert args.threads_per_worker == threads


def test_bad_arguments_are_rejected_before_any_worker_starts():
    with pytest.raises(TypeError, match="picklable"):
        WorkerPool(lambda device: lambda x: x, CPU2)
    with pytest.raises(TypeError, match="callable"):
        WorkerPool("not callable", CPU2)
    with pytest.raises(ValueError, match="non-empty list"):
        WorkerPool(h.make_identity, [])
    with pytest.raises(ValueError, match="non-empty list"):
        WorkerPool(h.make_identity, "cpu")
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda'"):
        WorkerPool(h.make_identity, ["meta"])
    with pytest.raises(ValueError, match="prefetch"):
        WorkerPool(h.make_identity, CPU2, prefetch=0)
    with pytest.raises(ValueError, match="threads_per_worker"):
        WorkerPool(h.make_identity, CPU2, threads_per_worker=0)
    with pytest.raises(ValueError, match="on_error"):
        dp_map(h.make_identity, [1], CPU2, on_error="ignore")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            WorkerPool(h.make_identity, ["cuda:0"])


def test_child_gpu_follows_the_parents_visible_list():
    assert visible_device_token(1, {}) == "1"
    assert visible_device_token(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == "6"
    assert visible_device_token(0, {"CUDA_VISIBLE_DEVICES": "GPU-ab12, GPU-cd34"}) == "GPU-ab12"
    with pytest.raises(ValueError, match="not visible"):
        visible_device_token(2, {"CUDA_VISIBLE_DEVICES": "4,6"})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_workers_return_cpu_tensors():
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    out = dp_map(h.make_cuda_tensor_result, [3] * (2 * len(devices)), devices, progress=False)
    for r in out:
        assert r["device"] == "cuda:0"  # each worker sees only its own GPU, as cuda:0
        assert r["ones"].device.type == "cpu" and r["ones"].tolist() == [1.0, 1.0, 1.0]


def test_empty_items_still_check_the_worker_and_devices():
    # an empty batch used to return [] before anything was checked, so a bad call passed until
    # the first non-empty one
    with pytest.raises(ValueError, match="'gpu' is not a device string"):
        dp_map(h.make_identity, [], ["gpu"])
    with pytest.raises(TypeError, match="picklable"):
        dp_map(lambda device: device, [], CPU2)
    with pytest.raises(ValueError, match="non-empty list"):
        dp_map(h.make_identity, [], [])
    with pytest.raises(ValueError, match="prefetch"):
        dp_map(h.make_identity, [], CPU2, prefetch=0)
    # the interpreter and the backend too (they were checked only by the pool an empty map never starts)
    with pytest.raises(ValueError, match="python='/no/such/python' does not exist"):
        dp_map(h.make_identity, [], CPU2, python="/no/such/python")
    with pytest.raises(TypeError, match="python must be a path"):
        dp_map(h.make_identity, [], CPU2, python=5)
    with pytest.raises(ValueError, match="backend must be 'local' or 'ray', got 'rya'"):
        dp_map(h.make_identity, [], CPU2, backend="rya")
    with pytest.raises(TypeError, match="items must be an iterable of inputs .* got NoneType"):
        dp_map(h.make_identity, None, CPU2)


@pytest.fixture
def failing_start(monkeypatch):
    """Starting a worker process raises EMFILE from the ``fail_from``-th start on (0-based); the
    processes that did start are listed, to check that they are stopped."""
    import subprocess

    from agents.placement.pool import process as dp_proc

    real_popen = subprocess.Popen
    state = {"fail_from": 0, "calls": 0, "started": []}

    def popen(args, *a, **kw):
        if list(args[1:3]) != ["-c", dp_proc.BOOT]:  # not a worker (the python= probe, say)
            return real_popen(args, *a, **kw)
        state["calls"] += 1
        if state["calls"] > state["fail_from"]:
            raise OSError(24, "Too many open files")
        proc = real_popen(args, *a, **kw)
        state["started"].append(proc)
        return proc

    monkeypatch.setattr(dp_proc.subprocess, "Popen", popen)
    return state


def test_a_worker_that_cannot_start_raises_the_real_error(failing_start):
    with pytest.raises(OSError, match="Too many open files"):
        dp_map(h.make_identity, [1, 2], CPU2, progress=False)
    failing_start.update(fail_from=1, calls=0)  # the first worker starts, the second cannot
    with pytest.raises(OSError, match="Too many open files"):
        WorkerPool(h.make_identity, CPU2)
    [first] = failing_start["started"]
    assert first.poll() is not None  # the worker that did start was stopped


def test_a_restart_that_cannot_start_raises_the_real_error(failing_start):
    failing_start["fail_from"] = 1  # the worker starts once; its restart cannot
    with pytest.warns(WorkerDiedWarning, match="restarting"):
        with pytest.raises(OSError, match="Too many open files"):
            dp_map(h.make_always_die, range(3), ["cpu"], progress=False)
    assert failing_start["started"][0].poll() is not None


@pytest.mark.timeout(180)
def test_a_script_without_a_main_guard_gets_the_real_error_in_its_workers(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    script = tmp_path / "unguarded.py"
    # spawned workers import the script, which starts a pool again while they are bootstrapping
    script.write_text(
        "import placement_helpers as h\n"
        "from agents.placement import dp_map\n"
        "out = dp_map(h.make_identity, [1], ['cpu'], on_error='collect', progress=False)\n"
        "print('ERROR:', out[0].error)\n"
    )
    path = os.pathsep.join([str(repo), str(Path(__file__).resolve().parent)])
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert "can only join a started process" not in proc.stderr
    assert "bootstrapping phase" in proc.stderr  # the workers' own error, printed by them
    assert "died before it was ready" in proc.stderr  # the parent's WorkerDiedWarning
    error = [line for line in proc.stdout.splitlines() if line.startswith("ERROR:")]
    assert len(error) == 1 and "every worker died before it was ready" in error[0] and "__main__" in error[0]


def test_numpy_numbers_are_accepted_and_bools_are_not():
    out = dp_map(
        h.make_identity,
        [1, 2],
        ["cpu"],
        threads_per_worker=np.int64(1),
        prefetch=np.int64(1),
        restarts=np.int64(0),
        retries=np.int64(0),
        item_timeout=np.float32(30.0),
        progress=False,
    )
    assert out == [1, 2]
    with pytest.raises(ValueError, match="retries"):
        dp_map(h.make_identity, [1], CPU2, retries=True)
    with pytest.raises(ValueError, match="item_timeout"):
        dp_map(h.make_identity, [1], CPU2, item_timeout=np.float32(0))
    with pytest.raises(ValueError, match="restarts"):
        WorkerPool(h.make_identity, CPU2, restarts=False)
