"""backend="ray" on WorkerPool and dp_map: the same call builds the Ray pool and gives the local pool's
results; each backend refuses the other's arguments by name."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import ray_helpers as rh
import torch

from agents.placement import WorkerPool, dp_map
from agents.placement.pool import RayWorkerPool

HERE = Path(__file__).resolve().parent
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='needs pip install -e ".[ray]"')


@needs_ray
def test_backend_ray_builds_the_ray_pool_and_maps_what_the_local_pool_maps():
    ray = pytest.importorskip("ray")
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(HERE)) if p)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        items = [("matmul", torch.full((2, 4), float(i))) for i in range(6)]
        local = dp_map(rh.make_toolbox, items, ["cpu", "cpu"], progress=False)
        with WorkerPool(rh.make_toolbox, ["cpu", "cpu"], backend="ray") as pool:
            assert isinstance(pool, RayWorkerPool)
            pooled = pool.map(items, batch_size=2, progress=False)
        one_shot = dp_map(rh.make_toolbox, items, ["cpu", "cpu"], backend="ray", progress=False)
    finally:
        ray.shutdown()
    for want, a, b in zip(local, pooled, one_shot, strict=True):
        assert torch.equal(a, want) and torch.equal(b, want)


def test_each_backend_refuses_the_others_arguments_by_name():
    with pytest.raises(ValueError, match="backend must be 'local' or 'ray', got 'dask'"):
        WorkerPool(rh.make_toolbox, ["cpu"], backend="dask")
    with pytest.raises(ValueError, match="runtime_env= and address= are the Ray backend's"):
        WorkerPool(rh.make_toolbox, ["cpu"], runtime_env={"pip": ["x"]})
    with pytest.raises(ValueError, match="runtime_env= and address= are the Ray backend's"):
        dp_map(rh.make_toolbox, [], ["cpu"], address="auto")
    with pytest.raises(ValueError, match="python= is the local backend's"):
        WorkerPool(rh.make_toolbox, ["cpu"], backend="ray", python="/usr/bin/python3")
