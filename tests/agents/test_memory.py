"""Nothing accumulates across iterations (seed note 001): over a long run of the real training
loop the number of live tensors stays constant and host (and device) memory stays flat."""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

from agents import train_mappo
from agents.run.logger import device_memory_mb, host_rss_mb


def live_tensors() -> tuple[int, int]:
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on some torch module objects warns
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    # a compiler's fake tensors (left alive by an earlier test's torch.compile) hold no memory
    from torch._subclasses.fake_tensor import FakeTensor

    return len(tensors), sum(t.nbytes for t in tensors if not (t.is_meta or isinstance(t, FakeTensor)))


pytestmark = pytest.mark.usefixtures("restore_threads")  # tests here set torch's thread count


@pytest.mark.parametrize("amp", ["off", "fp16"])
def test_memory_is_flat_over_many_iterations(make_config, tmp_path, monkeypatch, amp):
    iterations = 120
    cfg = make_config(
        f"train.amp={amp}",
        "env.num_envs=16",
        f"train.total_env_steps={iterations * 16 * 8}",
        "run.checkpoint_interval=1024",
        "run.eval_interval=4096",
        "run.eval_envs=4",
        f"run.dir={tmp_path}",
    )
    readings = []
    real_iteration = train_mappo.train_iteration

    def measured(learner, mark):
        metrics = real_iteration(learner, mark)
        if learner.iteration in (30, iterations - 1):
            count, nbytes = live_tensors()
            readings.append((count, nbytes, host_rss_mb(), device_memory_mb(learner.env.device)))
        return metrics

    monkeypatch.setattr(train_mappo, "train_iteration", measured)
    learner = train_mappo.train(cfg)
    assert learner.iteration == iterations
    (count0, bytes0, rss0, _), (count1, bytes1, rss1, _) = readings
    # The metrics of the iteration in flight are alive at both readings, so the counts match exactly.
    assert count1 == count0, f"live tensors grew from {count0} to {count1}"
    assert bytes1 == bytes0, f"live tensor bytes grew from {bytes0} to {bytes1}"
    # RSS: allow allocator noise, far below what ~90 iterations of a leaked rollout would add.
    leak_per_iteration_mb = learner.storage.nbytes() / 2**20
    assert rss1 - rss0 < max(16.0, 10 * leak_per_iteration_mb), f"RSS grew {rss1 - rss0:.1f} MiB"
