"""Device inventory and its report, on this machine and on a faked three-GPU machine."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agents.placement import inventory, inventory_report, memory_in_use, place_models
from agents.placement.checks import as_device, device_key
from agents.placement.inventory import format_bytes, process_rss
from uavsim.machine import host_memory

GiB = 2**30


def test_the_package_imports_without_the_simulators_dependencies():
    # a worker environment (python=) for a VLM or diffusion job need not hold the simulator's packages
    absent = ["gymnasium", "omegaconf", "tensordict", "torchrl", "tensorboard", "matplotlib", "imageio", "yaml"]
    code = (
        f"import sys\nfor name in {absent!r}: sys.modules[name] = None\n"
        "import agents.placement\n"
        "assert 'uavsim.env' not in sys.modules, 'the simulator was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_host_memory_is_read_and_reported():
    inv = inventory()
    assert 0 < inv.host_available <= inv.host_total
    report = inventory_report(inv)
    assert report.splitlines()[0].split()[:4] == ["device", "name", "total", "free"]
    assert "host" in report and format_bytes(inv.host_total) in report
    if not torch.cuda.is_available():
        assert inv.devices == () and inv.free() == {"cpu": inv.host_available}
        assert "no CUDA device" in report


@pytest.fixture
def three_fake_gpus(monkeypatch):
    """torch.cuda answering like a machine with three 80 GiB GPUs, 24/23/25 GiB free (seed 003)."""
    free = [24 * GiB, 23 * GiB, 25 * GiB]
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 3)
    monkeypatch.setattr(
        cuda, "get_device_properties", lambda i: SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * GiB)
    )
    monkeypatch.setattr(cuda, "memory_allocated", lambda i: 3 * GiB if i == 0 else 0)
    monkeypatch.setattr(cuda, "memory_reserved", lambda i: 4 * GiB if i == 0 else 0)
    monkeypatch.setattr(cuda, "mem_get_info", lambda i: (free[i], 80 * GiB))

    def nvml_missing(i):
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    monkeypatch.setattr(cuda, "device_memory_used", nvml_missing)
    return free


def test_cuda_devices_are_listed_with_free_total_and_this_process(three_fake_gpus):
    inv = inventory()
    assert [d.device for d in inv.devices] == ["cuda:0", "cuda:1", "cuda:2"]
    assert [d.free for d in inv.devices] == three_fake_gpus
    assert inv.devices[0].allocated == 3 * GiB and inv.devices[0].reserved == 4 * GiB
    assert inv.free() == {"cuda:0": 24 * GiB, "cuda:1": 23 * GiB, "cuda:2": 25 * GiB}
    report = inventory_report(inv)
    assert "cuda:2" in report and "25.00 GiB" in report and "3.00 GiB / 4.00 GiB" in report
    assert "no CUDA device" not in report


def test_nvml_figures_are_used_when_available(three_fake_gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_memory_used", lambda i: (10 + i) * GiB)
    assert [d.free for d in inventory().devices] == [70 * GiB, 69 * GiB, 68 * GiB]
    assert [d.free for d in inventory(method="cuda").devices] == three_fake_gpus


def test_mixed_gpu_models_read_free_memory_through_cuda_unless_the_order_is_pci(three_fake_gpus, monkeypatch):
    # NVML counts GPUs in PCI order, CUDA fastest first: torch maps index i to NVML's i, another GPU on a
    # workstation of two models, whose use then sized this one (a model placed where it cannot fit)
    names = ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"]
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(name=names[i], total_memory=80 * GiB)
    )
    monkeypatch.setattr(torch.cuda, "device_memory_used", lambda i: (10 + i) * GiB)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert [d.free for d in inventory().devices] == three_fake_gpus  # mem_get_info: CUDA's own device i
    with pytest.raises(RuntimeError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        inventory(method="nvml")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert [d.free for d in inventory().devices] == [70 * GiB, 69 * GiB, 68 * GiB]


def test_nvml_method_without_pynvml_says_what_to_install(three_fake_gpus):
    with pytest.raises(RuntimeError, match="nvidia-ml-py"):
        inventory(method="nvml")
    with pytest.raises(ValueError, match="method"):
        inventory(method="smi")


def test_placement_reads_free_memory_from_the_inventory(three_fake_gpus):
    # cuda:2 has the most room, so spread gives it the biggest model; 20 GiB needs more than 23*0.9
    out = place_models({"vlm": 20 * GiB, "clip": 2 * GiB})
    assert out == {"vlm": "cuda:2", "clip": "cuda:0"}
    assert place_models({"a": GiB}, ["cuda:1"]) == {"a": "cuda:1"}


def test_memory_in_use_on_cpu_is_the_process_rss():
    if platform.libc_ver()[0] == "glibc":
        # Hand freed heap memory back to the OS first: otherwise the block below may reuse pages
        # that are still resident (other tests in this process ran entry points that keep freed
        # memory, uavsim.machine.host_memory), and the RSS would not grow.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = memory_in_use("cpu")
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched so it is resident
    after = memory_in_use("cpu")
    assert after - before > 48 * 2**20
    del block
    assert process_rss() > 0


def test_device_strings():
    assert device_key("cuda") == "cuda:0" and device_key(2) == "cuda:2" and device_key(torch.device("cpu")) == "cpu"
    with pytest.raises(ValueError, match="not a device string"):
        as_device("gpu:0")
    with pytest.raises(ValueError, match="only 'cpu' and 'cuda'"):
        as_device("mps")
    with pytest.raises(TypeError):
        as_device(1.0)
    assert format_bytes(512) == "512 B" and format_bytes(3 * GiB) == "3.00 GiB"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="compares with Linux's /proc")
def test_host_figures_are_the_kernels_own():
    with open("/proc/meminfo", encoding="ascii") as f:
        kib = {line.split(":")[0]: int(line.split()[1]) for line in f if line.split()[1:]}
    total, available = host_memory._system_memory()
    assert total == kib["MemTotal"] * 1024
    assert abs(available - kib["MemAvailable"] * 1024) < 512 * 2**20  # other processes move it meanwhile
    with open("/proc/self/statm", encoding="ascii") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert abs(process_rss() - rss) < 16 * 2**20


def test_inventory_report_of_something_else_is_a_type_error():
    # it used to raise AttributeError: 'int' object has no attribute 'devices'
    with pytest.raises(TypeError, match="inv must be an Inventory .* got int"):
        inventory_report(5)
    with pytest.raises(TypeError, match="got dict"):
        inventory_report({"cuda:0": GiB})


def test_numpy_device_indices_are_accepted_and_bools_are_not():
    assert as_device(np.int64(2)) == torch.device("cuda", 2) and device_key(np.int32(1)) == "cuda:1"
    with pytest.raises(TypeError, match="bool"):
        as_device(True)
    with pytest.raises(ValueError, match=">= 0"):
        as_device(np.int64(-1))


def test_memory_in_use_of_a_gpu_this_process_cannot_see_is_a_value_error(three_fake_gpus, monkeypatch):
    # torch answered 0 bytes for it, as if the GPU were there and empty
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 5 * GiB)
    assert memory_in_use("cuda:2") == 5 * GiB  # a GPU it can see: torch's figure
    with pytest.raises(ValueError, match=r"memory_in_use asks for cuda:3, but only 3 CUDA device\(s\) are visible"):
        memory_in_use("cuda:3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="memory_in_use asks for cuda:0, but CUDA is not available"):
        memory_in_use("cuda:0")
