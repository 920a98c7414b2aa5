"""RayWorkerPool on a local 2-CPU Ray: ordering, batches, imap, retries, dead actors, journal, errors.

One Ray instance serves the module, and one two-actor pool (:func:`ray_helpers.make_toolbox`,
whose items say what to do) serves most tests, since each actor takes seconds to start. The
tests skip when Ray is not installed, except the one that checks the error saying how to get it.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray_helpers as rh
import torch

from agents.placement import DPMapError, ItemFailure, WorkerDiedWarning, WorkerInitError
from agents.placement.journal import Journal
from agents.placement.pool import RayWorkerPool
from agents.placement.pool.ray import RayExecutor, ray_gpus

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='needs pip install -e ".[ray]"')
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray with 2 CPUs whose workers can import this folder's helper modules."""
    ray = pytest.importorskip("ray")
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(HERE)) if p)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


class SharedPool:
    """The module's two-actor pool, started on first use; released (its 2 CPUs freed) for the tests
    that start pools of their own, which would otherwise wait for CPUs forever."""

    def __init__(self):
        self.pool = None

    def get(self) -> RayWorkerPool:
        if self.pool is None:
            self.pool = RayWorkerPool(rh.make_toolbox, ["cpu", "cpu"], restarts=20)
            warm_up(self.pool)
        return self.pool

    def release(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


@pytest.fixture(scope="module")
def shared(ray_instance):
    holder = SharedPool()
    yield holder
    holder.release()


@pytest.fixture
def pool(shared):
    return shared.get()


@pytest.fixture
def free_ray(shared, ray_instance):
    """The Ray instance with no actor of the shared pool holding its CPUs."""
    shared.release()
    return ray_instance


def warm_up(pool):
    """Map until both actors have answered: on a loaded machine one starts seconds after the other."""
    for _ in range(300):
        if len({pid for _, pid in pool.map(items("pid", 4, 0.05), progress=False)}) == 2:
            return
    raise AssertionError("the second actor never answered")


def items(kind, n, *args):
    return [(kind, x, *args) for x in range(n)]


@needs_ray
def test_results_in_input_order_and_equal_to_a_plain_loop(pool):
    xs = [("matmul", torch.randn(5, 4, generator=torch.Generator().manual_seed(i))) for i in range(12)]
    local = rh.make_toolbox("cpu")
    expected = [local(x) for x in xs]
    for batch_size in (None, 5):
        out = pool.map(xs, batch_size=batch_size, progress=batch_size is None)
        assert len(out) == len(xs) and all(torch.equal(a, b) for a, b in zip(out, expected))
    # a NumPy result is the caller's own writable copy, as from the local pool
    arr = pool.map([("id", np.arange(3))], progress=False)[0]
    arr += 1
    assert arr.tolist() == [1, 2, 3]
    assert pool.map([], progress=False) == []


@needs_ray
def test_both_actors_work(pool):
    out = pool.map(items("pid", 30), progress=False)
    assert [x for x, _ in out] == list(range(30))
    assert len({pid for _, pid in out}) == 2


@needs_ray
def test_batches_reach_the_callable_as_lists(pool):
    assert pool.map(items("id", 11), batch_size=4, progress=False) == list(range(11))
    sizes = pool.map(items("batch_len", 11), batch_size=4, progress=False)
    assert max(sizes) == 4 and min(sizes) >= 1
    assert pool.map(items("batch_len", 3), progress=False) == [None] * 3  # without batch_size: one by one


@needs_ray
def test_a_failing_batch_is_retried_item_by_item(pool, tmp_path):
    xs = items("id", 8)
    xs[5] = ("fail", 5)
    out = pool.map(xs, batch_size=4, retries=0, on_error="collect", progress=False)
    # with retries=0 only the bad item fails: its three neighbours ran again one by one
    assert [r for i, r in enumerate(out) if i != 5] == [0, 1, 2, 3, 4, 6, 7]
    assert isinstance(out[5], ItemFailure) and out[5].attempts == 1
    assert out[5].error == "ValueError: bad item 5 (batch [5])"


@needs_ray
def test_a_batch_answered_with_another_length_is_an_error_naming_it(pool):
    xs = items("id", 6)
    xs[1] = ("short", 1)  # one result short, but only in a batch of several: right when run alone
    assert pool.map(xs, batch_size=3, retries=0, progress=False) == list(range(6))
    xs[4] = ("short_always", 4)
    with pytest.raises(DPMapError) as info:
        pool.map(xs, batch_size=3, retries=0, progress=False)
    assert [f.index for f in info.value.failures] == [4]
    assert "returned 0 result(s) for a batch of 1 item(s)" in info.value.failures[0].error
    assert info.value.failures[0].error.endswith("(batch [4])")
    assert info.value.results[:4] == [0, 1, 2, 3] and info.value.results[5] == 5


@needs_ray
def test_failing_item_retried_on_the_other_actor_then_reported(pool, tmp_path):
    xs = items("id", 10)
    xs[5] = ("fail_log", 5, str(tmp_path))
    with pytest.raises(DPMapError) as info:
        pool.map(xs, progress=False)
    assert "item 5" in str(info.value) and "ValueError: bad item 5" in str(info.value)
    assert [f.index for f in info.value.failures] == [5] and info.value.failures[0].attempts == 2
    assert "Traceback" in info.value.failures[0].traceback
    assert len({p.name for p in tmp_path.iterdir()}) == 2  # two attempts, in two actor processes
    # a transient failure succeeds on its retry
    assert pool.map([("fail_first", 0, str(tmp_path / "once"))], progress=False) == [0]


@needs_ray
def test_imap_pulls_lazily_and_keeps_order(pool):
    pulled = []

    def source():
        for x in range(100_000):
            pulled.append(x)
            yield ("id", x)

    it = pool.imap(source(), progress=False)
    assert list(itertools.islice(it, 5)) == [0, 1, 2, 3, 4]
    assert len(pulled) < 200  # a window ahead of the consumer, not the whole input
    with pytest.raises(RuntimeError, match="running another map"):
        pool.map(items("id", 3), progress=False)  # its calls would be taken for the open iterator's
    it.close()
    assert list(pool.imap(items("sleep", 12, 0.01), batch_size=2, progress=False)) == list(range(12))


@needs_ray
def test_imap_raise_stops_at_the_failed_item_and_collect_goes_on(pool):
    xs = items("id", 6)
    xs[3] = ("fail", 3)
    seen = []
    with pytest.raises(DPMapError, match="item 3 failed"):
        for r in pool.imap(xs, retries=0, progress=False):
            seen.append(r)
    assert seen == [0, 1, 2]
    out = list(pool.imap(xs, retries=0, on_error="collect", progress=False))
    assert out[:3] == [0, 1, 2] and isinstance(out[3], ItemFailure) and out[4:] == [4, 5]


@needs_ray
def test_imap_unordered_yields_each_index_once_as_it_finishes(pool):
    xs = [("sleep", 0, 1.0)] + items("id", 20)[1:]
    out = list(pool.imap_unordered(xs, progress=False))
    assert sorted(out) == [(i, i) for i in range(20)]
    assert out[0][0] != 0  # item 0 took a second; the other actor finished items meanwhile


@needs_ray
def test_a_worker_that_dies_is_restarted_and_nothing_is_lost(pool, tmp_path):
    xs = items("id", 20)
    xs[6] = ("die_once", 6, str(tmp_path / "died"))
    with pytest.warns(WorkerDiedWarning, match=r"died .*restarting"):
        out = pool.map(xs, progress=False)
    assert out == list(range(20)) and (tmp_path / "died").exists()


@needs_ray
def test_journal_rerun_runs_only_the_unfinished_items(pool, tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    xs = items("log", 10, str(log))
    xs[3] = ("fail_first", 3, str(tmp_path / "failed-once"))
    journal = tmp_path / "run.journal"
    first = pool.map(xs, retries=0, on_error="collect", journal=journal, progress=False)
    assert isinstance(first[3], ItemFailure) and len(list(log.iterdir())) == 9
    with Journal(journal, pool.job_key) as j:
        assert len(j) == 9  # failures are not recorded
    second = pool.map(xs, journal=str(journal), progress=False)
    assert second == [3 if i == 3 else 10 * i for i in range(10)]
    assert len(list(log.iterdir())) == 9  # nothing that had finished ran again
    assert list(pool.imap(xs, journal=journal, progress=False)) == second  # all from the journal now
    other = list(xs)
    other[5] = ("log", 50, str(log))
    with pytest.raises(ValueError, match="written for other items: item 5 differs"):
        pool.map(other, journal=journal, progress=False)


@needs_ray
def test_item_timeout_kills_the_stuck_actor(pool):
    xs = items("id", 4)
    xs[1] = ("sleep", 1, 3600)
    with pytest.warns(WorkerDiedWarning, match="exceeded item_timeout"):
        out = pool.map(xs, retries=0, item_timeout=2, on_error="collect", progress=False)
    assert [out[i] for i in (0, 2, 3)] == [0, 2, 3] and "exceeded item_timeout=2.0s" in out[1].error


@needs_ray
def test_bad_arguments_are_named(ray_instance):
    with pytest.raises(ValueError, match="devices must be a non-empty list"):
        RayWorkerPool(rh.make_toolbox, "cpu")
    with pytest.raises(ValueError, match="devices entries must be"):
        RayWorkerPool(rh.make_toolbox, ["tpu"])
    with pytest.raises(ValueError, match=r"ask for 1 GPU\(s\) in all .* the Ray cluster has 0"):
        RayWorkerPool(rh.make_toolbox, ["cuda:0"])
    with pytest.raises(ValueError, match=r"ask for 4 CPU\(s\)"):
        RayWorkerPool(rh.make_toolbox, ["cpu", "cpu"], threads_per_worker=2)
    with pytest.raises(ValueError, match="address='10.0.0.1:6379', but Ray is already initialised"):
        RayWorkerPool(rh.make_toolbox, ["cpu"], address="10.0.0.1:6379")
    with pytest.raises(TypeError, match="make_worker must be callable"):
        RayWorkerPool("make_toolbox", ["cpu"])
    assert [ray_gpus(d) for d in ("cpu", "cuda", "cuda:3", 2, ["cuda:0", "cuda:1"])] == [0, 1, 1, 1, 2]


@needs_ray
def test_bad_map_arguments_are_named(pool):
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        pool.map([("id", 1)], batch_size=0)
    with pytest.raises(ValueError, match="on_error must be"):
        pool.imap([("id", 1)], on_error="ignore")
    with pytest.raises(ValueError, match="item_timeout must be"):
        pool.imap_unordered([("id", 1)], item_timeout=-1)
    with pytest.raises(TypeError, match="journal must be"):
        pool.map([("id", 1)], journal=3)


@needs_ray
def test_more_workers_than_cpus_share_them_by_default(free_ray):
    # the default threads_per_worker asked for a whole CPU each: 3 workers on this 2-CPU Ray were refused,
    # where the local backend runs them
    with RayWorkerPool(rh.make_toolbox, ["cpu"] * 3) as three:
        assert three.executor.threads == 1 and three.executor.actor_cpus == pytest.approx(
            2 / 3, abs=1e-4
        )  # in Ray's unit, rounded down
        assert three.map(items("id", 6), progress=False) == list(range(6))


@needs_ray
def test_an_actor_killed_mid_map_hands_its_items_to_the_other(free_ray):
    with RayWorkerPool(rh.make_toolbox, ["cpu", "cpu"], restarts=0) as solo_pool:
        warm_up(solo_pool)
        it = solo_pool.imap(items("sleep", 30, 0.02), progress=False)
        out = [next(it)]
        free_ray.kill(solo_pool.executor.slots[0].actor)
        with pytest.warns(WorkerDiedWarning, match="not restarted"):
            out += list(it)
        assert out == list(range(30))
        assert solo_pool.map(items("id", 5), progress=False) == list(range(5))  # the survivor serves on


@needs_ray
def test_an_actor_is_sent_one_call_at_a_time(pool, monkeypatch):
    # a call queued behind a finished one could take that one's reply with it when the actor died on it, and
    # the finished item was blamed (and failed with retries=0) where the crashing one should be
    submitted = []
    submit = pool.executor.submit

    def recording(slot, task, batched, payload):
        submitted.append(len(slot.inflight))
        return submit(slot, task, batched, payload)

    monkeypatch.setattr(pool.executor, "submit", recording)
    assert pool.prefetch == 2 and pool.map(items("id", 12), progress=False) == list(range(12))
    assert len(submitted) == 12 and set(submitted) == {0}


@needs_ray
def test_an_actor_that_dies_idle_costs_no_item_an_attempt(free_ray):
    with RayWorkerPool(rh.make_toolbox, ["cpu"], restarts=1) as solo_pool:
        assert solo_pool.map(items("id", 3), progress=False) == [0, 1, 2]
        free_ray.kill(solo_pool.executor.slots[0].actor)  # between two maps: the OOM killer, a lost node
        time.sleep(1)
        with pytest.warns(WorkerDiedWarning, match=r"died \(ActorDiedError while idle\); restarting"):
            out = solo_pool.map(items("id", 3), retries=0, on_error="collect", progress=False)
        assert out == [0, 1, 2]  # the first item was blamed for the death, and failed with retries=0


@needs_ray
def test_cpu_shares_add_up_to_the_cluster(ray_instance, monkeypatch):
    # 14 / 25 CPUs each added up to 14.000000000000002: "the workers ask for 14.000000000000002 CPU(s) ... has 14"
    monkeypatch.setattr(ray_instance, "cluster_resources", lambda: {"CPU": 14.0})
    for workers in range(1, 65):
        options = {"prefetch": 2, "restarts": 1, "startup_timeout": None, "runtime_env": None, "address": None}
        executor = RayExecutor(rh.make_toolbox, ["cpu"] * workers, None, **options)  # starts no actor
        assert executor.actor_cpus * workers <= 14 + 1e-9 and executor.actor_cpus > min(14 / workers, 1) - 1e-4
        executor.close(0)


@needs_ray
def test_make_worker_failures_are_reported(free_ray, tmp_path):
    with pytest.warns(WorkerDiedWarning, match="failed in make_worker"):
        with RayWorkerPool(rh.make_broken, ["cpu"]) as broken:
            with pytest.raises(WorkerInitError, match="OSError: cannot load weights on cpu"):
                broken.map([1], progress=False)
    with pytest.warns(WorkerDiedWarning, match="startup_timeout"):
        with RayWorkerPool(rh.make_hung, ["cpu"], startup_timeout=1, restarts=0) as hung:
            out = hung.map([1, 2], on_error="collect", progress=False)
    assert all("not ready after startup_timeout=1.0s" in f.error for f in out)
    # a factory from a module only this process can import: the actor says which module it lacks
    (tmp_path / "local_only_factories.py").write_text("def make(device):\n    return abs\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import local_only_factories
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.warns(WorkerDiedWarning):
        with RayWorkerPool(local_only_factories.make, ["cpu"]) as unimportable:
            with pytest.raises(WorkerInitError, match="No module named 'local_only_factories'"):
                unimportable.map([1], progress=False)


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    with pytest.raises(ImportError, match=r'pip install -e "\.\[ray\]"'):
        RayWorkerPool(rh.make_toolbox, ["cpu"])
    # and importing the package and the backend's modules needs no Ray
    code = "import sys; sys.modules['ray'] = None; import agents.placement, agents.placement.pool.ray"
    subprocess.run([sys.executable, "-c", code], check=True)
