"""Worker shapes: one or several GPUs per worker (its CUDA_VISIBLE_DEVICES), CPU workers, bad lists.

GPUs are faked (``torch.cuda.is_available`` / ``device_count`` patched) for the checks and the
``CUDA_VISIBLE_DEVICES`` arithmetic; the CPU forms run real workers.
"""

from __future__ import annotations

import pool_helpers as ph
import pytest
import torch

from agents.placement import dp_map
from agents.placement.pool.arguments import check_devices, worker_specs


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


def test_several_gpus_per_worker_become_its_visible_devices(four_gpus):
    specs = worker_specs([["cuda:0", "cuda:1"], ["cuda:2", 3]])
    assert [s.label for s in specs] == ["cuda:0,1", "cuda:2,3"]
    assert [s.visible_devices({}) for s in specs] == ["0,1", "2,3"]
    # under a parent CUDA_VISIBLE_DEVICES, this process's cuda:k is the k-th entry of that list
    parent = {"CUDA_VISIBLE_DEVICES": "4,5,GPU-ab,7"}
    assert [s.visible_devices(parent) for s in specs] == ["4,5", "GPU-ab,7"]
    assert check_devices([["cuda:0", "cuda:1"], "cuda:2", ["cuda:3"]]) == [["cuda:0", "cuda:1"], "cuda:2", "cuda:3"]


def test_single_gpu_workers_may_share_a_gpu_and_are_told_apart(four_gpus):
    specs = worker_specs(["cuda:1", "cuda:1", "cpu", torch.device("cuda", 2)])
    assert [s.label for s in specs] == ["cuda:1", "cuda:1#1", "cpu:2", "cuda:2"]
    assert [s.visible_devices({}) for s in specs] == ["1", "1", "", "2"]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ([["cuda:0", "cuda:1"], ["cuda:1", "cuda:2"]], r"cuda:1 is in workers \[0, 1\].*to itself"),
        ([["cuda:0", "cuda:1"], "cuda:1"], r"cuda:1 is in workers \[0, 1\]"),
        ([["cpu", "cuda:0"]], r"devices\[0\] = \['cpu', 'cuda:0'\] mixes 'cpu'"),
        ([["cpu", "cpu"]], r"devices\[0\] = \['cpu', 'cpu'\] mixes 'cpu'|names cpu more than once"),
        ([["cuda:0", "cuda"]], r"names cuda:0 more than once"),
        (["cpu", []], r"devices\[1\] is an empty list"),
        ([["cuda:0", "gpu:1"]], r"devices\[0\]\[1\] 'gpu:1' is not a device string"),
        (["cuda:0", "meta"], r"devices\[1\] 'meta' has type 'meta'"),
        ([["cuda:0", "cuda:4"]], r"cuda:4 requested but only 4"),
        ("cuda:0", r"non-empty list"),
        ([], r"non-empty list"),
    ],
)
def test_bad_worker_shapes_are_refused_naming_the_entry(four_gpus, devices, message):
    with pytest.raises(ValueError, match=message):
        worker_specs(devices)


def test_a_bad_device_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"devices\[0\]\[0\] must be a str, int or torch.device"):
        worker_specs([[1.5]])
    with pytest.raises(TypeError, match=r"devices\[1\] must be a str, int or torch.device, got NoneType"):
        worker_specs(["cpu", None])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a host without CUDA")
def test_gpu_workers_without_cuda_are_refused():
    with pytest.raises(ValueError, match="CUDA"):
        dp_map(ph.make_environment, [], [["cuda:0", "cuda:1"]])


def test_cpu_workers_in_list_form_run_and_see_no_gpu():
    out = dp_map(ph.make_environment, range(4), [["cpu"], ["cpu"]], threads_per_worker=1, progress=False)
    assert {(r["device"], r["visible"], r["gpus"]) for r in out} == {("cpu", "", 0)}


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a CUDA device")
def test_a_gpu_worker_sees_its_gpus_as_cuda_0_onwards():
    n = torch.cuda.device_count()
    devices = [[f"cuda:{i}" for i in range(n)]]  # one worker with every GPU
    [r] = dp_map(ph.make_environment, [0], devices, progress=False)
    assert r["device"] == "cuda:0" and r["gpus"] == n
