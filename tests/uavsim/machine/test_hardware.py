"""`uavsim.machine.hardware`: CPU classes, the banner's fields, the warning about a GPU torch cannot use."""

from __future__ import annotations

import pytest
import torch

from uavsim.machine import hardware
from uavsim.machine.cgroup import cpu_quota

AMX = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


@pytest.mark.parametrize(
    "flags, aten, onednn, expected",
    [
        (AMX, None, None, "AMX"),
        ({"avx2", "avx512f", "avx512_bf16"}, None, None, "AVX512-BF16"),
        ({"avx2", "avx512f"}, None, None, "AVX-512"),
        ({"avx2", "fma"}, None, None, "AVX2"),
        ({"sse4_2"}, None, None, "baseline"),
        (AMX, "avx2", "AVX2", "AVX2"),  # how an AMX machine is made to behave like an AVX2 one
        (AMX, None, "avx512_core_bf16", "AVX512-BF16"),
        (AMX, "avx2", None, "AVX2"),
        ({"avx2"}, None, "AVX512_CORE_AMX", "AVX2"),  # a cap never raises the class
    ],
)
def test_cpu_class_from_flags_and_caps(flags, aten, onednn, expected):
    assert hardware.classify_cpu(frozenset(flags), aten, onednn) == expected


def test_cpu_class_reads_the_caps_from_the_environment(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(AMX))
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert hardware.cpu_class() == "AMX"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert hardware.cpu_class() == "AVX2"


def test_usable_cores_is_at_least_one_and_at_most_the_cpus():
    cores, why = hardware.usable_cores()
    import os

    assert 1 <= cores <= (os.cpu_count() or 1) and why


def test_cgroup_quota_is_read_from_both_layouts(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(tmp_path) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota(tmp_path) is None


def test_a_cgroup_quota_below_the_mount_root_is_read(tmp_path):
    # a systemd unit's CPUQuota=, a Slurm job's or `docker --cgroupns=host`: the quota is the process's own cgroup's
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/system.slice/train.service\n", encoding="utf-8")
    unit = tmp_path / "system.slice" / "train.service"
    unit.mkdir(parents=True)
    (unit / "cpu.max").write_text("200000 100000\n", encoding="utf-8")
    assert cpu_quota(tmp_path, proc) == 2.0
    (tmp_path / "system.slice" / "cpu.max").write_text("150000 100000\n", encoding="utf-8")  # a tighter parent
    assert cpu_quota(tmp_path, proc) == 1.5
    v1 = tmp_path / "v1"  # cgroup v1: the cpu controller's own hierarchy
    (v1 / "cpu,cpuacct" / "slurm" / "job_7").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "slurm" / "job_7" / "cpu.cfs_quota_us").write_text("400000\n", encoding="utf-8")
    (v1 / "cpu,cpuacct" / "slurm" / "job_7" / "cpu.cfs_period_us").write_text("100000\n", encoding="utf-8")
    proc.write_text("5:cpu,cpuacct:/slurm/job_7\n4:memory:/slurm/job_7\n", encoding="utf-8")
    assert cpu_quota(v1, proc) == 4.0


def test_banner_names_device_class_build_threads_and_the_callers_fields(monkeypatch):
    monkeypatch.setattr(hardware, "nvidia_smi_gpus", lambda: ())
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # tests/conftest.py sets it for the suite
    text = hardware.banner("cpu", precision="fp32 (auto: because)", environments="64 (auto: CPU)")
    lines = text.splitlines()
    assert lines[0].startswith("device: cpu ") and hardware.cpu_class() in lines[0] and "usable cores" in lines[0]
    threads = torch.get_num_threads()
    plural = "s" if threads != 1 else ""  # "1 thread" under the suite's one thread
    assert lines[1] == f"torch: {torch.__version__} ({hardware.torch_build()} build), {threads} thread{plural}"
    assert "precision: fp32 (auto: because)" in lines and "environments: 64 (auto: CPU)" in lines
    assert "warning" not in text


def test_a_gpu_torch_cannot_use_is_a_warning_with_the_fix(monkeypatch):
    monkeypatch.setattr(hardware, "nvidia_smi_gpus", lambda: (("NVIDIA RTX 4090", "560.94"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "torch_build", lambda: "CPU")
    text = hardware.banner("cpu")
    assert "warning: an NVIDIA GPU is present (NVIDIA RTX 4090, driver 560.94)" in text
    assert "CPU-only build" in text and "Install a CUDA build of torch" in text


def test_no_warning_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    hardware.nvidia_smi_gpus.cache_clear()
    try:
        assert hardware.nvidia_smi_gpus() == ()
        assert hardware.cuda_unusable_warning() is None
    finally:
        hardware.nvidia_smi_gpus.cache_clear()


def test_torch_build_names_cpu_or_cuda():
    build = hardware.torch_build()
    assert build == "CPU" if torch.version.cuda is None else build == f"CUDA {torch.version.cuda}"


def _sysfs(tmp_path, siblings: dict[int, str], name: str = "core_cpus_list"):
    for cpu, text in siblings.items():
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / name).write_text(text + "\n", encoding="ascii")
    return tmp_path


def test_physical_cores_counts_smt_siblings_once(tmp_path):
    # 2 cores, 2 threads each: cpu0 and cpu2 share one core, cpu1 and cpu3 the other
    sysfs = _sysfs(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert hardware.physical_cores([0, 1, 2, 3], sysfs) == 2
    assert hardware.physical_cores([0, 2], sysfs) == 1  # an affinity of one core's two threads
    assert hardware.physical_cores([0, 1], sysfs) == 2


def test_physical_cores_reads_the_old_sysfs_name(tmp_path):
    sysfs = _sysfs(tmp_path, {0: "0-1", 1: "0-1"}, name="thread_siblings_list")
    assert hardware.physical_cores([0, 1], sysfs) == 1


def test_physical_cores_without_sysfs_scales_by_psutils_ratio(tmp_path, monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 16 if logical else 8)
    assert hardware.physical_cores(list(range(16)), tmp_path) == 8  # no topology files (Windows, macOS)
    assert hardware.physical_cores([3], tmp_path) == 1
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4 if logical else None)  # unknown: logical
    assert hardware.physical_cores(list(range(4)), tmp_path) == 4


def test_usable_cores_counts_physical_cores_and_says_so(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil.Process, "cpu_affinity", lambda self: list(range(16)))
    monkeypatch.setattr(hardware, "physical_cores", lambda cpus, sysfs=None: len(cpus) // 2)
    monkeypatch.setattr(hardware, "cpu_quota", lambda: None)
    assert hardware.usable_cores() == (8, "CPU affinity: 16 logical CPUs on 8 physical cores")
    monkeypatch.setattr(hardware, "cpu_quota", lambda: 3.5)  # a container's quota below the cores: the quota
    assert hardware.usable_cores() == (4, "cgroup CPU quota 3.5")
    monkeypatch.setattr(hardware, "physical_cores", lambda cpus, sysfs=None: len(cpus))  # no SMT: as before
    monkeypatch.setattr(hardware, "cpu_quota", lambda: None)
    assert hardware.usable_cores() == (16, "CPU affinity")
