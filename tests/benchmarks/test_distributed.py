"""The scaling benchmark's --quick mode launches torchrun with 1 and 2 ranks and writes its files."""

import json
import platform

import pytest

from benchmarks import distributed


@pytest.mark.slow
def test_quick_run_measures_one_and_two_ranks(tmp_path):
    paths = distributed.main(["--quick", "--out-dir", str(tmp_path)])
    payload = json.loads(paths["json"].read_text())
    rows = payload["results"]
    assert [r["world_size"] for r in rows] == [1, 2]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and r["agent_steps_per_s"] > 0
    assert rows[0]["env_efficiency"] == pytest.approx(1.0)
    assert rows[1]["flat_allreduce_s"] > 0 and rows[1]["ddp_s"] > 0
    assert "| 2 |" in paths["md"].read_text()
    # every rank ran under the trainer's host-memory setting (glibc only)
    assert payload["settings"]["host_memory_retained_in_ranks"] == (platform.libc_ver()[0] == "glibc")
