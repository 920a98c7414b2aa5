"""Ctrl-C (and SIGTERM) in the training loop: the first stops after the iteration with a checkpoint, so the
run loses nothing; a second one stops at once. (`agents.run.stop_request`; an immediate interrupt, as under
torchrun or a second Ctrl-C, is tests/agents/test_interrupt.py's.)"""

from __future__ import annotations

import signal
import sys

import pytest
import torch

from agents import train_mappo
from agents.run import checkpoint as ckpt
from tests.agents.conftest import TINY


def signal_in_iteration(n: int, monkeypatch, *signals: int) -> None:
    """`signals` arrive, one after the other, during the `n`-th iteration (1-based) of the next run."""
    real, calls = train_mappo.train_iteration, {"n": 0}

    def iteration(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            for signum in signals:
                signal.raise_signal(signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mappo, "train_iteration", iteration)


def final_actor(run) -> dict[str, torch.Tensor]:
    return ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])["actor"]


def test_ctrl_c_writes_a_checkpoint_after_its_iteration_and_the_resumed_run_ends_as_one_that_was_not_stopped(
    tmp_path, monkeypatch, capsys
):
    whole = tmp_path / "whole"
    assert train_mappo.main([*TINY, f"run.dir={whole}"]) == 0
    run = tmp_path / "run"
    signal_in_iteration(3, monkeypatch, signal.SIGINT)  # iterations of 32 env steps, no checkpoint before the end
    assert train_mappo.main([*TINY, f"run.dir={run}"]) == 130
    err = capsys.readouterr().err
    assert "Ctrl-C: stopping after this iteration to write a checkpoint" in err
    assert f"interrupted at 96 env steps; last checkpoint {run / 'checkpoints' / 'ckpt_000000000096.pt'}" in err
    assert "Traceback" not in err and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    assert train_mappo.main(["--resume", str(run)]) == 0
    want, got = final_actor(whole), final_actor(run)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_second_ctrl_c_stops_at_once_without_a_checkpoint(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    signal_in_iteration(3, monkeypatch, signal.SIGINT, signal.SIGINT)
    assert train_mappo.main([*TINY, f"run.dir={run}"]) == 130
    assert "interrupted at 64 env steps, before the run's first checkpoint" in capsys.readouterr().err
    assert ckpt.list_checkpoints(run) == [] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is no signal a Windows process is sent")
def test_sigterm_writes_a_checkpoint_and_exits_143(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    signal_in_iteration(2, monkeypatch, signal.SIGTERM)
    assert train_mappo.main([*TINY, f"run.dir={run}"]) == 143
    err = capsys.readouterr().err
    assert "SIGTERM: stopping after this iteration" in err and "interrupted at 64 env steps; last checkpoint" in err
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["ckpt_000000000064.pt"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
