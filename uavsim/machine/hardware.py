"""What machine this process runs on: CPU class, usable cores, torch build, GPUs, in words.

A default tuned on one machine can be many times slower on another (bf16 on a CPU without native
bf16 runs in software: docs/performance.md, "Design choices, measured"), so every entry point says
what it found (`banner`) and every results file records it (`benchmarks.common.machine_info`).
Nothing here changes a setting; it only reads.

CPU classes, from the best bf16 support down (`cpu_class`):
    "AMX"         AMX-BF16 tiles (Intel Sapphire Rapids and later): bf16 matmuls in hardware
    "AVX512-BF16" AVX-512 with bf16 dot products (Cooper Lake, AMD Zen 4 and later)
    "AVX-512"     AVX-512 without bf16 instructions (bf16 converted in software, then fp32 FMAs)
    "AVX2"        AVX2 only (most laptops and desktops, AMD Zen 1-3): bf16 emulated, many times slower
    "baseline"    anything else (ARM, old x86)
oneDNN's `ONEDNN_MAX_CPU_ISA` (and ATen's `ATEN_CPU_CAPABILITY`) cap what torch uses: an AMX machine
run with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` behaves like an AVX2 one, and is
reported as such.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from uavsim.machine.cgroup import cpu_quota

CPU_CLASSES = ("baseline", "AVX2", "AVX-512", "AVX512-BF16", "AMX")  # weakest to strongest
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) for each class's cap, weakest to strongest
_ONEDNN_CAPS = {
    "SSE41": "baseline",
    "AVX": "baseline",
    "AVX2": "AVX2",
    "AVX2_VNNI": "AVX2",
    "AVX2_VNNI_2": "AVX2",
    "AVX512_CORE": "AVX-512",
    "AVX512_CORE_VNNI": "AVX-512",
    "AVX512_CORE_BF16": "AVX512-BF16",
    "AVX10_1_512": "AVX512-BF16",
    "AVX512_CORE_FP16": "AVX512-BF16",
    "AVX512_CORE_AMX": "AMX",
    "AVX512_CORE_AMX_FP16": "AMX",
    "AVX10_1_512_AMX": "AMX",
    "AVX10_1_512_AMX_FP16": "AMX",
    "AVX10_2_512_AMX_2": "AMX",
    "DEFAULT": "AMX",
    "ALL": "AMX",
}


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:  # not Linux
        return ""


def cpu_model() -> str:
    match = re.search(r"model name\s*:\s*(.+)", _cpuinfo())
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux `/proc/cpuinfo`); empty where the OS does not say."""
    match = re.search(r"^flags\s*:\s*(.+)$", _cpuinfo(), re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def classify_cpu(flags: frozenset[str] | set[str], aten_cap: str | None = None, onednn_cap: str | None = None) -> str:
    """The CPU class (`CPU_CLASSES`) from the hardware's flags, capped by what torch is told to use.
    Without flags (not Linux) torch's own dispatch level stands in, which cannot see bf16 support.

    Args:
        flags: the CPU's feature flags (`cpu_flags`).
        aten_cap: `ATEN_CPU_CAPABILITY` (ATen's kernels), when set.
        onednn_cap: `ONEDNN_MAX_CPU_ISA` (oneDNN's matmuls), when set.
    """
    if not flags:
        level = torch.backends.cpu.get_cpu_capability().upper()
        return "AVX-512" if level.startswith("AVX512") else "AVX2" if level == "AVX2" else "baseline"
    if "amx_bf16" in flags:
        hw = "AMX"
    elif "avx512_bf16" in flags:
        hw = "AVX512-BF16"
    elif "avx512f" in flags:
        hw = "AVX-512"
    elif "avx2" in flags:
        hw = "AVX2"
    else:
        hw = "baseline"
    caps = [hw]
    if aten_cap:
        caps.append({"AVX512": hw, "AVX2": "AVX2"}.get(aten_cap.strip().upper(), "baseline"))
    if onednn_cap:
        caps.append(_ONEDNN_CAPS.get(onednn_cap.strip().upper(), hw))
    return min(caps, key=CPU_CLASSES.index)


def cpu_class() -> str:
    return classify_cpu(cpu_flags(), os.environ.get("ATEN_CPU_CAPABILITY"), os.environ.get("ONEDNN_MAX_CPU_ISA"))


def physical_cores(cpus: list[int], sysfs: Path | None = None) -> int:
    """The physical cores behind the logical CPUs `cpus` (SMT siblings count once).

    Linux: the distinct sibling sets of `cpus` in sysfs (`topology/core_cpus_list` under `sysfs`, by default
    `/sys/devices/system/cpu`). Elsewhere (Windows, macOS), or where sysfs is not readable, psutil's
    machine-wide ratio of physical cores to logical CPUs."""
    if sysfs is None and sys.platform.startswith("linux"):
        sysfs = Path("/sys/devices/system/cpu")
    counted = _sibling_sets(cpus, sysfs) if sysfs is not None else None
    if counted:
        return counted
    try:
        import psutil

        physical, logical = psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
    except ImportError:
        physical = logical = None
    if physical and logical and physical < logical:
        return max(1, math.ceil(len(cpus) * physical / logical))
    return max(1, len(cpus))


def _sibling_sets(cpus: list[int], sysfs: Path) -> int | None:
    """How many distinct SMT sibling sets `cpus` fall in (sysfs); None where one cannot be read."""
    sets = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        for name in ("core_cpus_list", "thread_siblings_list"):  # the kernel's name since 5.8, then the old one
            try:
                sets.add((topology / name).read_text(encoding="ascii").strip())  # the same text for each sibling
                break
            except (OSError, UnicodeDecodeError):
                continue
        else:
            return None
    return len(sets)


def usable_cores() -> tuple[int, str]:
    """`(cores, reason)`: the physical cores this process may run on (its CPU affinity; two SMT threads of
    a core count once) within its cgroup's CPU quota. psutil reads the affinity on Linux and Windows;
    elsewhere all logical CPUs count.

    Physical cores, not logical CPUs: torch's own default thread count is MKL's, the physical cores (an
    8-core 16-thread laptop gets 8); two OpenMP threads spinning on one core's SMT pair share its FMA
    units, and its barriers wait for the slower."""
    cpus, reason = list(range(os.cpu_count() or 1)), "logical CPUs"
    try:
        import psutil

        affinity = psutil.Process().cpu_affinity()
        if affinity:
            cpus, reason = list(affinity), "CPU affinity"
    except (ImportError, AttributeError, OSError):  # macOS has no affinity call
        pass
    count = physical_cores(cpus)
    if count < len(cpus):
        reason = f"{reason}: {len(cpus)} logical CPUs on {count} physical cores"
    quota = cpu_quota()
    if quota is not None and math.ceil(quota) < count:
        count, reason = max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g}"
    return count, reason


def torch_build() -> str:
    """`"CPU"`, `"CUDA 12.8"` or `"ROCm 6.2"`: what this torch was built for."""
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    return f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"


@functools.lru_cache(maxsize=1)
def nvidia_smi_gpus() -> tuple[tuple[str, str], ...]:
    """`((name, driver version), ...)` of the NVIDIA GPUs `nvidia-smi` lists; empty when it is
    absent or fails (a few seconds at most, once per process)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    rows = [tuple(part.strip() for part in line.split(",", 1)) for line in out.stdout.splitlines() if "," in line]
    return tuple((name, driver) for name, driver in rows)


def gpu_info(device: torch.device) -> dict[str, Any]:
    """Name, memory (GiB), compute capability and driver of a CUDA `device`."""
    props = torch.cuda.get_device_properties(device)
    smi = nvidia_smi_gpus()
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "compute_capability": f"{props.major}.{props.minor}",
        "driver": smi[0][1] if smi else None,
    }


def cuda_unusable_warning() -> str | None:
    """A warning when an NVIDIA GPU is present (nvidia-smi answers) but this torch cannot use it."""
    if torch.cuda.is_available():
        return None
    gpus = nvidia_smi_gpus()
    if not gpus:
        return None
    why = (
        "this torch is a CPU-only build"
        if torch_build() == "CPU"
        else f"this torch ({torch_build()}) cannot use it (driver {gpus[0][1]} too old for it, or no GPU visible)"
    )
    return (
        f"warning: an NVIDIA GPU is present ({gpus[0][0]}, driver {gpus[0][1]}) but {why}: everything runs "
        f"on the CPU. Install a CUDA build of torch {torch.__version__.split('+')[0]} first "
        "(docs/install.md, 'Which torch build': pip uninstall -y torch, then its CUDA line)"
    )


def describe_device(device: torch.device | str) -> str:
    """One line: the GPU's name, memory and compute capability, or the CPU's model and class."""
    device = torch.device(device)
    if device.type == "cuda":
        info = gpu_info(device)
        driver = f", driver {info['driver']}" if info["driver"] else ""
        return (
            f"{device} {info['gpu']} ({info['gpu_memory_gib']} GiB, compute capability "
            f"{info['compute_capability']}{driver})"
        )
    cores, why = usable_cores()
    return f"cpu {cpu_model()} ({cpu_class()}, {cores} usable cores: {why})"


def banner(device: torch.device | str, **fields: Any) -> str:
    """The lines every entry point prints at start: device, torch and its build, threads, then the
    caller's `fields` (e.g. precision="bf16 (why)", environments=64), and any CUDA warning."""
    wait = os.environ.get("OMP_WAIT_POLICY")  # the user's, when set: it changes the speed (docs/performance.md)
    threads = torch.get_num_threads()
    lines = [
        f"device: {describe_device(device)}",
        f"torch: {torch.__version__} ({torch_build()} build), {threads} thread{'s' if threads != 1 else ''}"
        + (f" (OMP_WAIT_POLICY={wait})" if wait else ""),
    ]
    lines += [f"{name.replace('_', ' ')}: {value}" for name, value in fields.items()]
    warning = cuda_unusable_warning()
    if warning:
        lines.append(warning)
    return "\n".join(lines)
