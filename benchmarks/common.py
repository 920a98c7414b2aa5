"""What every benchmark shares: machine description, timing, peak memory, and result files."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.out_paths import free_stem
from uavsim.machine import hardware
from uavsim.machine.host_memory import retain_freed_memory

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The trainer's benchmarks (step_cost, train_throughput, update_matmuls, distributed) measure the
# communicating recipe as it was until 2026-11-25 (7x7 window, pooled map and heading), frozen in
# this folder so that every committed result stays comparable as the presets in configs/ move on.
TRAINER_CONFIG = Path(__file__).resolve().parent / "trainer_config.yaml"
_HOST: dict[str, Any] = {"host_memory_retained": False}


def setup_host(threads: int, device: str | None = None, banner: bool = True) -> bool:
    """The process settings a benchmark runs all of its backends under, alike: torch's thread
    count, and glibc keeping freed memory for the next large tensor (`uavsim.machine.host_memory`, as the
    trainer does), recorded in `machine_info`. Prints the machine's banner (`uavsim.machine.hardware`).
    Returns whether the memory setting applied."""
    torch.set_num_threads(threads)
    _HOST["host_memory_retained"] = retain_freed_memory()
    if banner:
        print(hardware.banner(device or "cpu"), file=sys.stderr)
    return _HOST["host_memory_retained"]


cpu_model = hardware.cpu_model


def machine_info(device: str | None = None) -> dict[str, Any]:
    """What a results file holds about the machine: CPU model and class (AVX2 / AVX-512 /
    AVX512-BF16 / AMX, after any ONEDNN_MAX_CPU_ISA / ATEN_CPU_CAPABILITY cap), torch and its
    build, threads, and the GPU (name, memory, compute capability, driver, peak bandwidth)."""
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_class": hardware.cpu_class(),
        "cpu_count": os.cpu_count(),
        "usable_cores": hardware.usable_cores()[0],
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torch_build": hardware.torch_build(),
        **{k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ},
        **_HOST,
        "python": platform.python_version(),
        "date": _dt.date.today().isoformat(),
    }
    if torch.cuda.is_available():
        dev = torch.device(device) if device and "cuda" in device else torch.device("cuda", 0)
        info.update(hardware.gpu_info(dev))
        info["gpu_peak_bandwidth_gbs"] = gpu_peak_bandwidth_gbs(torch.cuda.get_device_properties(dev))
    return info


def hardware_label(info: dict[str, Any]) -> str:
    """How tables name the machine a figure holds for: "H100 80GB HBM3" or "2-core AMD EPYC (AVX2)"."""
    return str(info["gpu"]) if info.get("gpu") else cpu_label(info)


def cpu_label(info: dict[str, Any]) -> str:
    """The host CPU alone, GPU or not: "2-core AMD EPYC (AVX512-BF16)"."""
    cores = info.get("usable_cores") or info.get("cpu_count")
    return f"{cores}-core {info['cpu']} ({info.get('cpu_class', 'CPU class not recorded')})"


def gpu_peak_bandwidth_gbs(props: Any) -> float | None:
    """Theoretical DRAM bandwidth from clock and bus width (DDR: two transfers per clock)."""
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    if not clock_khz or not bus_bits:
        return None
    return round(2 * clock_khz * 1e3 * bus_bits / 8 / 1e9, 1)


def machine_tag(info: dict[str, Any]) -> str:
    """A file-name-safe label: the GPU if any, else the CPU, its class and the core count."""
    cores = info.get("usable_cores") or info["cpu_count"]  # as `cpu_label`: a run under taskset names its cores
    label = info.get("gpu") or f"{info['cpu']}-{info.get('cpu_class', '')}-{cores}cores"
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()[:60]


def reset_peak_rss() -> None:
    """Start a new host peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
    except OSError:
        pass


def peak_rss_mib() -> float | None:
    try:
        match = re.search(r"VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text(encoding="utf-8"))
        return round(int(match.group(1)) / 1024, 1) if match else None
    except OSError:
        return None


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def median_rate(
    run: Callable[[], None], items_per_run: int, repeats: int, device: str = "cpu"
) -> tuple[float, list[float]]:
    """Median items/s of ``repeats`` timed calls of ``run`` (warm-up is the caller's job)."""
    rates = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
        rates.append(items_per_run / (time.perf_counter() - start))
    return statistics.median(rates), rates


# Self CPU time of these ops is the network arithmetic (their autograd wrappers have none).
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::mv",
        "aten::addmv",
        "aten::dot",
    }
)


def profile_ops(run: Callable[[], None], repeats: int, top: int = 8) -> dict[str, Any]:
    """Where the time of one call of ``run`` goes, from ``torch.profiler`` over ``repeats`` calls
    (milliseconds per call, self CPU time): matmuls (``MATMUL_OPS``), the kernels of
    ``torch.compile``'d graphs (inductor's fused code runs inside its ``CompiledFxGraph`` call), all
    other ops, the wall time outside any op (Python, dispatch), and the ``top`` ops by self time.
    On CUDA self CPU time is launch time, not kernel time, so this is a CPU breakdown."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    ms = lambda us: us / 1e3 / repeats  # noqa: E731
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    compiled = sum(e.self_cpu_time_total for e in events if "CompiledFxGraph" in e.key)
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {
        "profiled_ms": wall * 1e3 / repeats,
        "matmul_ms": ms(matmul),
        "compiled_kernels_ms": ms(compiled),
        "other_ops_ms": ms(total - matmul - compiled),
        "outside_ops_ms": max(0.0, wall * 1e3 / repeats - ms(total)),
        "top_ops": [
            {"op": e.key[:60], "self_ms": ms(e.self_cpu_time_total), "calls": e.count / repeats} for e in ranked
        ],
    }


def result_stem(name: str, payload: dict[str, Any], subset: bool = False) -> str:
    """``<name>-<machine>-<date>``, plus ``-quick`` for a quick run and ``-subset`` for a run of
    some of the benchmark's backends: neither may overwrite the full run's files."""
    suffix = ("-quick" if payload.get("quick") else "") + ("-subset" if subset else "")
    return f"{name}-{machine_tag(payload['machine'])}-{payload['machine']['date']}{suffix}"


def write_results(
    name: str,
    payload: dict[str, Any],
    table_md: str,
    plot: Callable[[Path], None] | None,
    out_dir: Path = RESULTS_DIR,
    subset: bool = False,
) -> dict[str, Path]:
    """Write ``result_stem(...)`` ``.json`` / ``.md`` (and ``.png`` if ``plot``), print the table;
    return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = free_stem(out_dir, result_stem(name, payload, subset), (".json", ".md") + ((".png",) if plot else ()))
    paths = {"json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md"}
    paths["json"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    paths["md"].write_text(table_md, encoding="utf-8")
    if plot is not None:
        paths["png"] = out_dir / f"{stem}.png"
        plot(paths["png"])
    print(table_md)
    print("wrote", ", ".join(str(p) for p in paths.values()))
    return paths


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"
