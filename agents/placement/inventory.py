"""Device inventory: free/total/allocated memory per CUDA device and host memory, in one call.

Host memory is the machine's, within this process's cgroup limit (`uavsim.machine.host_memory`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import torch

from uavsim.machine.host_memory import host_memory, process_rss

from .checks import check_visible_gpu

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one CUDA device, in bytes.

    ``free`` and ``total`` are device-wide (every process's use counts); ``allocated`` and
    ``reserved`` are this process's tensors and its caching allocator's pool on that device.
    """

    device: str
    name: str
    total: int
    free: int
    allocated: int
    reserved: int


@dataclass(frozen=True)
class Inventory:
    """What memory this machine offers: every visible CUDA device and the host, in bytes."""

    devices: tuple[DeviceMemory, ...]
    host_total: int
    host_available: int

    def free(self) -> dict[str, int]:
        """``{device: free bytes}`` for every CUDA device, or ``{"cpu": available host bytes}`` without one."""
        if self.devices:
            return {d.device: d.free for d in self.devices}
        return {"cpu": self.host_available}


def memory_in_use(device: str | torch.device) -> int:
    """Bytes this process holds on ``device``: allocated tensor bytes on CUDA, the process RSS on CPU.

    A GPU this process cannot see is a ValueError (torch answers 0 for it on a CPU-only build).
    """
    dev = check_visible_gpu(device, "memory_in_use")
    if dev.type == "cuda":
        return int(torch.cuda.memory_allocated(dev))
    return process_rss()


def _used_by_nvml(index: int) -> int | None:
    """Device-wide used bytes through NVML (creates no CUDA context), or None when NVML is missing."""
    try:
        return int(torch.cuda.device_memory_used(index))
    except (ImportError, AttributeError, RuntimeError, OSError):
        return None
    except Exception as exc:  # pynvml raises its own NVMLError types, not importable without pynvml
        if type(exc).__name__.startswith("NVML"):
            return None
        raise


def _nvml_order_is_cudas(names: list[str]) -> bool:
    """Whether NVML's index i is CUDA's device i. torch maps one to the other through CUDA_VISIBLE_DEVICES
    only: NVML counts GPUs in PCI order, CUDA fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; the
    orders agree where the GPUs are all one model (ties go by PCI bus)."""
    return len(set(names)) <= 1 or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"


def inventory(method: Literal["auto", "nvml", "cuda"] = "auto") -> Inventory:
    """Memory of every visible CUDA device and of the host.

    ``method`` picks how device-wide free memory is read: ``"nvml"`` (needs ``pynvml`` /
    ``nvidia-ml-py``; creates no CUDA context), ``"cuda"`` (``torch.cuda.mem_get_info``, which creates
    a CUDA context of a few hundred MiB on every device it asks), ``"auto"`` (NVML when it works and its
    GPU order is CUDA's: on a machine of mixed GPU models without ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` it
    could read another GPU's use, so ``"cuda"`` there, and ``"nvml"`` is a RuntimeError saying so).
    """
    if method not in ("auto", "nvml", "cuda"):
        raise ValueError(f"method must be 'auto', 'nvml' or 'cuda', got {method!r}")
    devices = []
    if torch.cuda.is_available():
        every = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        if method != "cuda" and not _nvml_order_is_cudas([str(p.name) for p in every]):
            if method == "nvml":
                raise RuntimeError(
                    "method='nvml': these GPUs are of several models, so NVML's order may not be CUDA's; set "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID before torch starts CUDA, or use method='cuda'"
                )
            method = "cuda"
        for i, props in enumerate(every):
            total = int(props.total_memory)
            used = _used_by_nvml(i) if method != "cuda" else None
            if used is None and method == "nvml":
                raise RuntimeError("method='nvml' needs pynvml (pip install nvidia-ml-py)")
            if used is None:
                free, total = (int(x) for x in torch.cuda.mem_get_info(i))
            else:
                free = max(0, total - used)
            devices.append(
                DeviceMemory(
                    device=f"cuda:{i}",
                    name=str(props.name),
                    total=total,
                    free=free,
                    allocated=int(torch.cuda.memory_allocated(i)),
                    reserved=int(torch.cuda.memory_reserved(i)),
                )
            )
    host_total, host_available = host_memory()
    return Inventory(devices=tuple(devices), host_total=host_total, host_available=host_available)


def inventory_report(inv: Inventory | None = None) -> str:
    """One table, one row per CUDA device plus a host row, for printing at program start."""
    inv = inventory() if inv is None else inv
    if not isinstance(inv, Inventory):
        raise TypeError(f"inv must be an Inventory (from inventory()) or None, got {type(inv).__name__}")
    header = ("device", "name", "total", "free", "used", "this process (alloc/reserved)")
    rows = [header]
    for d in inv.devices:
        rows.append(
            (
                d.device,
                d.name,
                format_bytes(d.total),
                format_bytes(d.free),
                f"{100 * (d.total - d.free) / max(d.total, 1):.0f}%",
                f"{format_bytes(d.allocated)} / {format_bytes(d.reserved)}",
            )
        )
    rss = process_rss()
    rows.append(
        (
            "host",
            f"{os.cpu_count()} CPU cores",
            format_bytes(inv.host_total),
            format_bytes(inv.host_available),
            f"{100 * (inv.host_total - inv.host_available) / max(inv.host_total, 1):.0f}%",
            f"{format_bytes(rss)} RSS",
        )
    )
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if not inv.devices:
        lines.append("(no CUDA device visible: placement falls back to the host)")
    return "\n".join(lines)


def format_bytes(n: int | float) -> str:
    """Human-readable binary size, e.g. ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{sign}{value:.0f} B" if unit == 0 else f"{sign}{value:.2f} {_UNITS[unit]}"
