"""`agents.average`: the mean of a run's last checkpoints' actor and critic, written as a run
directory that `trained_actor` (so evaluate and export) loads; clear errors on bad input."""

from __future__ import annotations

import json

import pytest
import torch

from agents import average
from agents.algo.learner import build_learner
from agents.run import checkpoint as ckpt
from agents.run.learner_state import learner_state, trained_actor
from tests.agents.conftest import tiny_config


def run_with_checkpoints(run_dir, count: int, *overrides: str) -> list[dict]:
    """`count` checkpoints of one tiny learner, its weights shaken before each (so each differs)."""
    learner = build_learner(tiny_config(*overrides), torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    payloads = []
    for k in range(count):
        with torch.no_grad():
            for p in [*learner.actor.parameters(), *learner.critic.parameters()]:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
        state = learner_state(learner)
        state["env_steps"] = 1000 * (k + 1)
        ckpt.save_checkpoint(run_dir, state, keep=count, beside={"config.yaml": "seed: 0\n"})
        payloads.append(ckpt.load_checkpoint(ckpt.list_checkpoints(run_dir)[-1]))
    return payloads


def test_the_average_is_the_mean_of_the_last_k_and_loads_as_a_run(tmp_path):
    payloads = run_with_checkpoints(tmp_path / "run", 4)
    written = average.average_run(tmp_path / "run", 3)
    out = tmp_path / "run" / "averaged-last3"
    assert written.parent.parent == out and (out / "config.yaml").read_text() == "seed: 0\n"
    got = ckpt.load_checkpoint(written)
    for net in ("actor", "critic"):
        for name, value in got[net].items():
            want = sum(p[net][name].double() for p in payloads[1:]) / 3
            torch.testing.assert_close(value, want.to(value.dtype))
            assert not torch.equal(value, payloads[-1][net][name])  # not just the newest
    assert got["env_steps"] == 4000 and got["optimizer"].keys() == payloads[-1]["optimizer"].keys()
    torch.testing.assert_close(got["value_norm"], payloads[-1]["value_norm"])
    assert json.loads((out / "averaged.json").read_text())["env_steps"] == [2000, 3000, 4000]
    _, _, _, actor = trained_actor(out)  # what agents.evaluate and agents.export load
    for name, value in actor.state_dict().items():
        torch.testing.assert_close(value, got["actor"][name])


def test_the_last_one_alone_is_the_newest_checkpoint(tmp_path):
    payloads = run_with_checkpoints(tmp_path / "run", 2)
    got = ckpt.load_checkpoint(average.average_run(tmp_path / "run", 1, tmp_path / "one"))
    for net in ("actor", "critic"):
        for name, value in got[net].items():
            assert torch.equal(value, payloads[-1][net][name])


def test_errors_name_what_was_wrong(tmp_path, capsys):
    run_with_checkpoints(tmp_path / "run", 2)
    with pytest.raises(ValueError, match="--last must be an integer >= 1"):
        average.average_run(tmp_path / "run", 0)
    with pytest.raises(ValueError, match=r"keeps 2 checkpoint\(s\), fewer than --last 3: train with run.keep"):
        average.average_run(tmp_path / "run", 3)
    with pytest.raises(ValueError, match="is not a run directory"):
        average.average_run(tmp_path / "nowhere", 1)
    average.average_run(tmp_path / "run", 2)
    with pytest.raises(ValueError, match="already holds checkpoints"):
        average.average_run(tmp_path / "run", 2)
    assert average.main([str(tmp_path / "run"), "--last", "5"]) == 2
    assert "fewer than --last 5" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert average.main([str(tmp_path / "run"), "--last", "1", "--out", str(tmp_path / "afile")]) == 2
    assert "afile is a file, expected a run directory" in capsys.readouterr().err
    # an unset $OUT wrote into the current directory; a folder of other files lost its config.yaml
    assert average.main([str(tmp_path / "run"), "--last", "1", "--out", ""]) == 2
    assert "--out is empty" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.yaml").write_text("seed: 7\n", encoding="utf-8")
    assert average.main([str(tmp_path / "run"), "--last", "1", "--out", str(tmp_path / "other")]) == 2
    assert "a folder that holds files" in capsys.readouterr().err
    assert (tmp_path / "other" / "config.yaml").read_text(encoding="utf-8") == "seed: 7\n"
    # RUN/checkpoints names RUN, as for agents.evaluate and agents.export
    assert average.main([str(tmp_path / "run" / "checkpoints"), "--last", "2", "--out", str(tmp_path / "two")]) == 0


def test_checkpoints_of_another_network_are_refused(tmp_path):
    run_with_checkpoints(tmp_path / "run", 1)
    other = build_learner(tiny_config("model.hidden_size=8"), torch.device("cpu"))
    state = learner_state(other)
    state["env_steps"] = 5000
    ckpt.save_checkpoint(tmp_path / "run", state, keep=3)
    with pytest.raises(ValueError, match="another model config"):
        average.average_run(tmp_path / "run", 2)
    run_with_checkpoints(tmp_path / "seeds", 1)
    other = build_learner(tiny_config("seed=1"), torch.device("cpu"))  # another run's checkpoint, copied beside
    state = learner_state(other)
    state["env_steps"] = 5000
    ckpt.save_checkpoint(tmp_path / "seeds", state, keep=3)
    with pytest.raises(ValueError, match="another seed config"):
        average.average_run(tmp_path / "seeds", 2)
    with pytest.raises(ValueError, match="other weights than the newest"):
        average.average_weights([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
