"""This process's control-group limits (a container's, a Slurm job's): its CPU quota and its memory limit.

The machine-wide figures overstate both inside a container: `os.cpu_count()` counts the host's
cores, and `/proc/meminfo` shows the whole host's memory (a 24 GiB container on a 512 GiB machine
reads 512 GiB, and a plan sized from that is killed by the kernel's OOM killer instead of backing
off). The cgroup's own files say what the process may really use. Both layouts are read:

    cgroup v2 (unified): `cpu.max` ("quota period", "max" = no quota); `memory.max` ("max" = no
                         limit), `memory.current`, `memory.stat` `inactive_file`
    cgroup v1:           `cpu/cpu.cfs_quota_us` (-1 = no quota) and `cpu/cpu.cfs_period_us`;
                         `memory.limit_in_bytes` (a huge number = no limit), `memory.usage_in_bytes`,
                         `memory.stat` `total_inactive_file`

`uavsim.machine.hardware.usable_cores` bounds the cores by `cpu_quota`; `agents.placement`'s host memory is
bounded by `cgroup_memory`. Limits nest, so every level from the process's cgroup up to the
mount's root is read and the tightest wins. Usage counts the page cache, of which the inactive part
is reclaimed before the OOM killer acts, so it is left out of what is used (as `docker stats` does).
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

# cgroup v1 reports "no limit" as the largest page-aligned 64-bit value (about 8 EiB)
_UNLIMITED = 1 << 62

_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def _read_text(path: Path) -> str | None:
    """The text of a cgroup (or /proc) file, or None when it is absent, unreadable or not ASCII."""
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


# ------------------------------------------------------------------ CPU quota


def _quota_at(folder: Path, v1: bool) -> float | None:
    """CPUs the quota of one cgroup folder allows (v2 `cpu.max` "quota period"; v1 `cpu.cfs_quota_us` and
    `cpu.cfs_period_us`), or None: no quota there ("max", -1) or no such files."""
    if v1:
        quota, period = _read_text(folder / "cpu.cfs_quota_us"), _read_text(folder / "cpu.cfs_period_us")
        fields = [quota.strip(), period.strip()] if quota is not None and period is not None else []
    else:
        text = _read_text(folder / "cpu.max")
        fields = text.split() if text is not None else []
    if len(fields) != 2 or fields[0] in ("max", "-1"):
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(root: str | Path | None = None, proc_cgroup: str | Path = "/proc/self/cgroup") -> float | None:
    """CPUs this process's cgroups may use, the tightest quota from its own cgroup up to the mount (v2
    `cpu.max`, v1 `cfs_quota_us / cfs_period_us`: a systemd unit's `CPUQuota=` or a Slurm job's sits below
    the mount's root), or None (no quota, or not Linux). ``root``: the cgroup mount (default `/sys/fs/cgroup`
    on Linux); ``proc_cgroup``: the file naming this process's cgroups."""
    if root is None:
        if not sys.platform.startswith("linux"):
            return None
        root = Path("/sys/fs/cgroup")
    root = Path(root)
    v2, v1 = _own_paths(Path(proc_cgroup), "cpu")
    quotas = [_quota_at(d, v1=False) for d in _levels(root, v2)]
    quotas += [
        _quota_at(d, v1=True) for m in (root / "cpu", root / "cpu,cpuacct") if m.is_dir() for d in _levels(m, v1)
    ]
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


# ------------------------------------------------------------------ memory limit


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value < _UNLIMITED else None


def _stat(path: Path, key: str) -> int:
    text = _read_text(path)
    try:
        for line in (text or "").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except ValueError:
        pass
    return 0


def _own_paths(proc_cgroup: Path, controller: str = "memory") -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in the v1 ``controller``'s."""
    text = _read_text(proc_cgroup)
    if text is None:
        return None, None
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif controller in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _levels(mount: Path, own: str | None) -> list[Path]:
    """The process's cgroup folder under `mount` and each parent up to `mount`, where they exist.
    Inside a cgroup namespace the process's path is "/", and the mount itself is its cgroup."""
    dirs = [mount]
    if own:
        rel = PurePosixPath(own).relative_to("/") if own.startswith("/") else PurePosixPath(own)
        for i in range(1, len(rel.parts) + 1):
            d = mount.joinpath(*rel.parts[:i])
            if d.is_dir():
                dirs.append(d)
    return dirs


def _tightest(dirs: list[Path], names: tuple[str, str, str]) -> tuple[int, int] | None:
    limit_file, usage_file, inactive_key = names
    best = None
    for d in dirs:
        limit = _read_int(d / limit_file)
        if limit is not None and (best is None or limit < best[0]):
            usage = _read_int(d / usage_file) or 0
            used = max(0, usage - _stat(d / "memory.stat", inactive_key))
            best = (limit, used)
    return best


def cgroup_memory(
    root: str | Path = "/sys/fs/cgroup", proc_cgroup: str | Path = "/proc/self/cgroup"
) -> tuple[int, int] | None:
    """`(limit, available)` bytes of the tightest memory limit over this process's cgroups, or
    None when none is set (or the files are absent: another OS, no cgroup mount).

    Args:
        root: the cgroup mount.
        proc_cgroup: the file naming this process's cgroups.
    """
    root, proc_cgroup = Path(root), Path(proc_cgroup)
    v2, v1 = _own_paths(proc_cgroup)
    found = []
    for mount, own, names in ((root, v2, _V2), (root / "unified", v2, _V2), (root / "memory", v1, _V1)):
        if mount.is_dir():
            hit = _tightest(_levels(mount, own), names)
            if hit is not None:
                found.append(hit)
    if not found:
        return None
    limit, used = min(found)
    return limit, max(0, limit - used)
