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


def test_scaling_is_against_the_one_rank_run_and_quick_keeps_given_values(tmp_path, monkeypatch):
    seen = []

    def fake_run_ranks(args, k):  # 2 ranks: 1.8x the env-steps/s of 1, 1.6x the agent-steps/s
        seen.append((k, args.num_envs, args.num_steps, args.seconds))
        return {
            "world_size": k,
            "env_steps_per_s": 1000.0 * (1 + 0.8 * (k - 1)),
            "agent_steps_per_s": 500.0 * (1 + 0.6 * (k - 1)),
            "host_memory_retained": True,
        }

    monkeypatch.setattr(distributed, "run_ranks", fake_run_ranks)
    paths = distributed.main(
        [
            "--quick",
            "--ranks",
            "2",
            "1",
            "--num-envs",
            "4",
            "--num-steps",
            "4",
            "--seconds",
            "0.1",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert seen == [(1, 4, 4, 0.1), (2, 4, 4, 0.1)]  # sorted; the explicit sizes kept under --quick
    payload = json.loads(paths["json"].read_text())
    two = payload["results"][1]
    assert two["env_efficiency"] == pytest.approx(0.9) and two["train_efficiency"] == pytest.approx(0.8)
    assert payload["settings"]["num_envs_per_rank"] == 4 and payload["settings"]["ranks"] == [1, 2]


@pytest.mark.parametrize("argv", [["--ranks", "2"], ["--ranks", "0", "1"], ["--seconds", "0"], ["--num-envs", "0"]])
def test_bad_arguments_are_rejected_before_any_run(tmp_path, argv):
    with pytest.raises(SystemExit):
        distributed.main(["--quick", "--out-dir", str(tmp_path), *argv])


@pytest.mark.parametrize("minibatch", ["5", "4096", "99999"])
def test_a_minibatch_of_part_of_an_env_step_or_beyond_the_rollout_is_refused(tmp_path, capsys, minibatch):
    # 4096 agent-steps would be 409.6 environment steps of 10 UAVs: it used to become 409 silently
    with pytest.raises(SystemExit):
        distributed.main(["--quick", "--out-dir", str(tmp_path), "--minibatch", minibatch])
    assert f"--minibatch {minibatch}: agent-steps of whole environment steps" in capsys.readouterr().err
