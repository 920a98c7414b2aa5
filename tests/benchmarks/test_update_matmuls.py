"""The update-products benchmark's --quick mode times every product and writes JSON and Markdown (schema, not speed)."""

import json

import pytest

from benchmarks import update_matmuls


def test_quick_run_writes_complete_results(tmp_path):
    paths = update_matmuls.main(["--quick", "--out-dir", str(tmp_path), "--threads", "2", "--repeats", "2"])
    assert set(paths) == {"json", "md"}
    payload = json.loads(paths["json"].read_text())
    assert payload["benchmark"] == "update_matmuls" and payload["settings"]["minibatch"] == 256
    rows = payload["results"]
    # 5 layers x 3 products, less the first layer's two input gradients, in each of 2 dtypes
    assert len(rows) == 2 * (5 * 3 - 2)
    assert {(r["layer"], r["product"]) for r in rows if r["dtype"] == "bf16"} >= {
        ("first layer, local obs", "wgrad"),
        ("value head", "dgrad"),
        ("hidden layer", "forward"),
    }
    for r in rows:
        for t in (1, 2):
            assert r[f"us_{t}t"] > 0
            assert r[f"gflops_{t}t"] == pytest.approx(2 * r["rows"] * r["in"] * r["out"] / r[f"us_{t}t"] / 1e3)
    assert "| bf16 | value head | wgrad | [1,256] @ [256,128] |" in paths["md"].read_text()


def test_default_minibatch_is_the_trainer_configs():
    from agents.config import load_config
    from agents.run.machine_defaults import CPU_NUM_ENVS
    from benchmarks.common import TRAINER_CONFIG

    cfg = load_config(TRAINER_CONFIG)  # num_envs: auto, which is CPU_NUM_ENVS on the CPU
    assert cfg.env.num_envs == "auto"
    assert (
        update_matmuls.default_minibatch()
        == cfg.train.num_steps * CPU_NUM_ENVS * cfg.env.num_uavs // cfg.train.num_minibatches
    )


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(SystemExit):
        update_matmuls.main(["--quick", "--out-dir", str(tmp_path), "--repeats", "0"])
