"""The training benchmark's --quick mode runs both pipelines and writes its three files (schema, not speed)."""

import json
import platform

from benchmarks import train_throughput


def test_quick_run_writes_complete_results(tmp_path):
    paths = train_throughput.main(["--quick", "--out-dir", str(tmp_path), "--iterations", "1", "--threads", "1"])
    payload = json.loads(paths["json"].read_text())
    assert payload["benchmark"] == "train_throughput"
    rows = payload["results"]
    assert {(r["pipeline"], r["amp"]) for r in rows if r["device"] == "cpu"} == {
        (p, a) for p in ("ours", "ours-compiled", "torchrl", "torchrl-mlp", "torchrl-multiagentmlp") for a in ("off", "bf16")}
    for r in rows:
        assert r["agent_steps_per_s"] > 0 and len(r["iteration_seconds"]) == 1
        assert r["speedup_vs_torchrl"] > 0 and r["speedup_vs_torchrl_mlp"] > 0
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    assert "| ours | cpu | bf16 |" in paths["md"].read_text()
    # all pipelines ran in one process under the trainer's host-memory setting (glibc only)
    assert payload["machine"]["host_memory_retained"] == (platform.libc_ver()[0] == "glibc")
