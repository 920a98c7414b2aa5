"""The cgroup memory limit (containers, Slurm jobs; read by `uavsim.machine.cgroup`) bounds what the placement
utilities see as host memory. The cgroup file systems are built in a temporary folder, in both layouts."""

from __future__ import annotations

from pathlib import Path

from agents.placement import inventory
from uavsim.machine import host_memory
from uavsim.machine.cgroup import cgroup_memory

GIB = 2**30


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")


def v2_tree(tmp_path: Path, own: str = "/job/step") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    write(root / "memory.max", "max\n")  # the root never has a limit
    write(tmp_path / "proc_cgroup", f"0::{own}\n")
    return root, tmp_path / "proc_cgroup"


def test_v2_limit_and_usage_less_inactive_page_cache(tmp_path):
    root, proc = v2_tree(tmp_path)
    write(root / "job/step/memory.max", str(8 * GIB))
    write(root / "job/step/memory.current", str(3 * GIB))
    write(root / "job/step/memory.stat", f"anon {2 * GIB}\ninactive_file {GIB}\nactive_file 0\n")
    assert cgroup_memory(root, proc) == (8 * GIB, 6 * GIB)


def test_v2_tightest_level_wins_and_unlimited_levels_are_ignored(tmp_path):
    root, proc = v2_tree(tmp_path)
    write(root / "job/memory.max", str(4 * GIB))
    write(root / "job/memory.current", str(GIB))
    write(root / "job/step/memory.max", "max\n")
    assert cgroup_memory(root, proc) == (4 * GIB, 3 * GIB)


def test_v2_inside_a_cgroup_namespace_reads_the_mount_itself(tmp_path):
    root, proc = v2_tree(tmp_path, own="/")
    write(root / "memory.max", str(24 * GIB))
    write(root / "memory.current", str(30 * GIB))  # over the limit (page cache): nothing available
    assert cgroup_memory(root, proc) == (24 * GIB, 0)


def test_v1_memory_controller(tmp_path):
    root = tmp_path / "cgroup"
    write(tmp_path / "proc_cgroup", "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n")
    write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n")  # v1's "no limit"
    write(root / "memory/docker/abc/memory.limit_in_bytes", str(16 * GIB))
    write(root / "memory/docker/abc/memory.usage_in_bytes", str(5 * GIB))
    write(root / "memory/docker/abc/memory.stat", f"cache {3 * GIB}\ntotal_inactive_file {2 * GIB}\n")
    assert cgroup_memory(root, tmp_path / "proc_cgroup") == (16 * GIB, 13 * GIB)


def test_no_limit_or_no_cgroup_files_means_none(tmp_path):
    root = tmp_path / "cgroup"
    write(tmp_path / "proc_cgroup", "4:memory:/\n0::/\n")
    write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n")
    assert cgroup_memory(root, tmp_path / "proc_cgroup") is None
    assert cgroup_memory(tmp_path / "absent", tmp_path / "absent_proc") is None
    write(tmp_path / "garbled", "not a cgroup file\n")
    write(root / "memory.max", "lots\n")
    assert cgroup_memory(root, tmp_path / "garbled") is None


def test_host_memory_is_bounded_by_the_cgroup_limit(monkeypatch):
    monkeypatch.setattr(host_memory, "_system_memory", lambda: (512 * GIB, 500 * GIB))
    monkeypatch.setattr(host_memory, "cgroup_memory", lambda: (24 * GIB, 20 * GIB))
    assert host_memory.host_memory() == (24 * GIB, 20 * GIB)
    assert inventory().host_total == 24 * GIB
    monkeypatch.setattr(host_memory, "cgroup_memory", lambda: (1024 * GIB, 1000 * GIB))  # looser than the machine
    assert host_memory.host_memory() == (512 * GIB, 500 * GIB)
    monkeypatch.setattr(host_memory, "cgroup_memory", lambda: None)
    assert host_memory.host_memory() == (512 * GIB, 500 * GIB)


def test_v2_nested_finite_limits_the_tighter_wins(tmp_path):
    root, proc = v2_tree(tmp_path)
    write(root / "job/memory.max", str(4 * GIB))
    write(root / "job/memory.current", str(GIB))
    write(root / "job/step/memory.max", str(2 * GIB))  # inner and tighter
    write(root / "job/step/memory.current", str(GIB // 2))
    assert cgroup_memory(root, proc) == (2 * GIB, 2 * GIB - GIB // 2)


def test_hybrid_hierarchy_reads_v1_memory_and_the_unified_v2_mount(tmp_path):
    root = tmp_path / "cgroup"
    write(tmp_path / "proc_cgroup", "4:memory,hugetlb:/svc\n0::/svc\n")  # controllers can share a line
    write(root / "memory/svc/memory.limit_in_bytes", str(8 * GIB))
    write(root / "memory/svc/memory.usage_in_bytes", "0")
    assert cgroup_memory(root, tmp_path / "proc_cgroup") == (8 * GIB, 8 * GIB)
    write(root / "unified/svc/memory.max", str(3 * GIB))
    write(root / "unified/svc/memory.current", "0")
    assert cgroup_memory(root, tmp_path / "proc_cgroup") == (3 * GIB, 3 * GIB)
