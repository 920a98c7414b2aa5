"""Ctrl-C and runs killed before a checkpoint: the trainer says where to continue from, and what a
killed run left behind (config.yaml, TensorBoard events) never misleads the next run."""

from __future__ import annotations

import pytest
import yaml

from agents import train_mappo
from agents.run import checkpoint as ckpt
from tests.agents.conftest import TINY


def ctrl_c_at_iteration(n: int, monkeypatch) -> None:
    """The user presses Ctrl-C during the `n`-th iteration (1-based) of the next run."""
    real, calls = train_mappo.train_iteration, {"n": 0}

    def iteration(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mappo, "train_iteration", iteration)


def tb_text_steps(run, tag="hyperparameters/text_summary") -> list[int]:
    # the accumulator TensorBoard's server reads text (tensors) with; it applies purges to them too
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run), size_guidance={"tensors": 0})
    ea.Reload()
    return [e.step for e in ea.Tensors(tag)]


def tb_scalar_steps(run, tag="losses/value_loss") -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run), size_guidance={"scalars": 0})
    ea.Reload()
    return [e.step for e in ea.Scalars(tag)]


def test_ctrl_c_names_the_last_checkpoint_and_the_resume_command(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    ctrl_c_at_iteration(3, monkeypatch)  # iterations of 32 env steps, a checkpoint after each
    assert train_mappo.main([*TINY, "run.checkpoint_interval=32", f"run.dir={run}"]) == 130
    err = capsys.readouterr().err
    assert f"run directory: {run}" in err
    assert f"interrupted at 64 env steps; last checkpoint {run / 'checkpoints' / 'ckpt_000000000064.pt'}" in err
    assert err.strip().endswith(f"continue with: python -m agents.train_mappo --resume {run}")  # nothing to re-pass
    assert "Traceback" not in err
    monkeypatch.undo()
    assert train_mappo.main(["--resume", str(run)]) == 0


def test_ctrl_c_before_the_first_checkpoint_says_to_start_again_and_the_rerun_hides_its_logs(
    tmp_path, monkeypatch, capsys
):
    run = tmp_path / "run"
    ctrl_c_at_iteration(3, monkeypatch)
    assert train_mappo.main([*TINY, "run.checkpoint_interval=1000", f"run.dir={run}"]) == 130
    assert "before the run's first checkpoint: nothing to resume; start it again" in capsys.readouterr().err
    assert tb_scalar_steps(run) == [32, 64] and not ckpt.list_checkpoints(run)
    assert train_mappo.main(["--resume", str(run)]) == 2
    assert f"start it again with its command and run.dir={run}" in capsys.readouterr().err
    monkeypatch.undo()
    assert train_mappo.main([*TINY, "train.total_env_steps=96", f"run.dir={run}"]) == 0
    assert tb_scalar_steps(run) == [32, 64, 96]  # the killed run's 32 and 64 are not shown twice
    assert tb_text_steps(run) == [0]


def test_a_killed_resume_leaves_config_yaml_and_the_logged_config_as_the_checkpoint_says(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert train_mappo.main([*TINY, "train.total_env_steps=64", f"run.dir={run}"]) == 0
    ent_coef = yaml.safe_load((run / "config.yaml").read_text())["train"]["ent_coef"]  # the preset's
    assert ent_coef != 0.05
    ctrl_c_at_iteration(2, monkeypatch)  # the resumed run writes no checkpoint before Ctrl-C
    assert (
        train_mappo.main(
            ["--resume", str(run), "train.total_env_steps=160", "train.ent_coef=0.05", "run.checkpoint_interval=1000"]
        )
        == 130
    )
    assert (
        f"--resume {run} and the overrides you resumed with (no checkpoint holds them yet)" in capsys.readouterr().err
    )
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["ent_coef"] == ent_coef and saved["train"]["total_env_steps"] == 64  # the checkpoint's
    assert saved == ckpt.load_latest(run)[1]["config"]
    monkeypatch.undo()
    assert train_mappo.main(["--resume", str(run), "train.total_env_steps=128"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["total_env_steps"] == 128 and saved["train"]["ent_coef"] == ent_coef
    assert saved == ckpt.load_latest(run)[1]["config"]
    assert tb_text_steps(run) == [0, 65]  # the killed resume's config (0.05) is hidden


def test_a_branch_interrupted_before_its_first_checkpoint_continues_from_where_it_branched(
    tmp_path, monkeypatch, capsys
):
    run, branch = tmp_path / "run", tmp_path / "branch"
    assert train_mappo.main([*TINY, "train.total_env_steps=64", "run.checkpoint_interval=32", f"run.dir={run}"]) == 0
    first = ckpt.list_checkpoints(run)[0]
    ctrl_c_at_iteration(1, monkeypatch)
    assert train_mappo.main(["--resume", str(first), f"run.dir={branch}"]) == 130
    err = capsys.readouterr().err
    assert f"--resume {first} run.dir={branch} and the overrides you resumed with" in err
    assert (branch / "config.yaml").exists()  # a run without checkpoints has its config from the start
    monkeypatch.undo()
    assert train_mappo.main(["--resume", str(first), f"run.dir={branch}"]) == 0


def test_ctrl_c_in_imitation_says_there_is_nothing_to_resume_and_after_it_names_its_checkpoint(
    tmp_path, monkeypatch, capsys
):
    # imitation (minutes of the default run) ran outside the loop's handler: Ctrl-C there said only "interrupted"
    from agents.algo import imitation

    run = tmp_path / "run"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(imitation, "warm_start", interrupted)
    assert train_mappo.main([*TINY, "imitation.teacher=greedy", f"run.dir={run}"]) == 130
    err = capsys.readouterr().err
    assert (
        "interrupted at 0 env steps, before the run's first checkpoint: nothing to resume; start it again with its "
        f"command and run.dir={run}" in err
    )
    assert "Traceback" not in err
    monkeypatch.undo()
    ctrl_c_at_iteration(1, monkeypatch)  # the imitated actor is saved at step 0, before PPO's first iteration
    assert train_mappo.main([*TINY, "imitation.teacher=greedy", "imitation.env_steps=64", f"run.dir={run}"]) == 130
    assert f"last checkpoint {run / 'checkpoints' / 'ckpt_000000000000.pt'}" in capsys.readouterr().err


def test_ctrl_c_before_the_loop_exits_130_without_a_traceback(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mappo, "build_learner", interrupted)
    assert train_mappo.main([*TINY, f"run.dir={tmp_path / 'run'}"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_a_run_stopped_before_any_checkpoint_says_so():
    from agents.run.control import stopped_message

    assert stopped_message(3, None).endswith(
        "no checkpoint was written yet: start again with other settings (e.g. a lower learning rate)"
    )
    assert "None" not in stopped_message(3, None)


def test_under_torchrun_the_message_names_torchrun_and_only_the_main_rank_says_it(tmp_path, monkeypatch):
    from agents.run.control import TrainingInterrupted, launcher_command

    run = tmp_path / "run"
    newest = run / "checkpoints" / "ckpt_000000000064.pt"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    err = TrainingInterrupted(96, run, newest, None, launcher_command(2), is_main=True)
    assert str(err).endswith(
        f"continue with: torchrun --standalone --nproc_per_node=2 -m agents.train_mappo --resume {run}"
    )
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert launcher_command(16).startswith("torchrun --nnodes=2 --nproc_per_node=8 ")
    assert launcher_command(1) == "python -m agents.train_mappo"
    assert not TrainingInterrupted(96, run, newest, None, launcher_command(2), is_main=False).is_main


def test_main_prints_the_interruption_on_the_main_rank_only(tmp_path, monkeypatch, capsys):
    from agents.run.control import TrainingInterrupted, TrainingStopped

    for is_main in (True, False):

        def interrupted(*args, is_main=is_main, **kwargs):
            raise TrainingInterrupted(96, tmp_path, None, None, is_main=is_main)

        def stopped(*args, is_main=is_main, **kwargs):
            raise TrainingStopped("training stopped: ...", is_main=is_main)

        monkeypatch.setattr(train_mappo, "train", interrupted)
        assert train_mappo.main([*TINY, f"run.dir={tmp_path}"]) == 130
        assert ("interrupted at 96 env steps" in capsys.readouterr().err) == is_main
        monkeypatch.setattr(train_mappo, "train", stopped)
        assert train_mappo.main([*TINY, f"run.dir={tmp_path}"]) == 1
        assert ("training stopped" in capsys.readouterr().err) == is_main


def test_under_torchrun_a_bad_setting_or_checkpoint_is_said_once(tmp_path, monkeypatch, capsys):
    # every rank printed the same error line (3 lines for 3 ranks)
    def refused(*args, **kwargs):
        raise ckpt.CheckpointError("checkpoint x was written by 2 rank(s) but this run has 3")

    monkeypatch.setenv("WORLD_SIZE", "3")
    for rank, says in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", rank)
        assert train_mappo.main([*TINY, "train.gamma=2"]) == 2
        assert ("train.gamma" in capsys.readouterr().err) == says
        monkeypatch.setattr(train_mappo, "train", refused)
        assert train_mappo.main([*TINY, f"run.dir={tmp_path}"]) == 1
        assert ("written by 2 rank(s)" in capsys.readouterr().err) == says


def test_a_single_process_checkpoint_resumed_by_ranks_says_to_resume_without_torchrun():
    from types import SimpleNamespace

    from agents.run.learner_state import load_learner_state

    learner = SimpleNamespace(replicas=SimpleNamespace(world_size=2, rank=0))
    with pytest.raises(
        ckpt.CheckpointError, match=r"resume with python -m agents.train_mappo --resume \(without torchrun\)"
    ):
        load_learner_state(learner, {"world_size": 1}, "ckpt_1.pt")  # it said torchrun --nproc_per_node=1


def test_launcher_without_torchrun_variables_and_the_overrides_note_only_when_nothing_was_saved(tmp_path, monkeypatch):
    from agents.run.control import TrainingInterrupted, launcher_command

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert launcher_command(4) == "torchrun --standalone --nproc_per_node=4 -m agents.train_mappo"
    run = tmp_path / "run"
    resumed_from, newer = (run / "checkpoints" / f"ckpt_{s:012d}.pt" for s in (64, 96))
    assert str(TrainingInterrupted(128, run, newer, resumed_from)).endswith(f"--resume {run}")  # saved since
    assert str(TrainingInterrupted(96, run, resumed_from, resumed_from)).endswith("(no checkpoint holds them yet)")


def test_an_os_error_during_training_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train_mappo, "train", disk_full)
    assert train_mappo.main([*TINY, f"run.dir={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: [Errno 28] No space left on device"


def disk_full_at_the_second_checkpoint(monkeypatch) -> None:
    real, saves = train_mappo._save, []

    def save_then_disk_full(*args, **kwargs):
        saves.append(1)
        if len(saves) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mappo, "_save", save_then_disk_full)


def test_a_run_directory_that_becomes_unwritable_says_how_to_go_on(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    disk_full_at_the_second_checkpoint(monkeypatch)
    assert train_mappo.main([*TINY, "run.checkpoint_interval=32", f"run.dir={run}"]) == 1
    err = capsys.readouterr().err
    assert "error: [Errno 28] No space left on device\ninterrupted at 64 env steps; last checkpoint" in err
    assert err.strip().endswith(f"continue with: python -m agents.train_mappo --resume {run}")


def test_a_tensorboard_writer_on_the_full_disk_keeps_the_message_and_frees_the_run(tmp_path, monkeypatch, capsys):
    # TensorBoard's writer thread remembers the disk's error and raises it again when closed: that replaced the
    # message above with its own one line, and left train.lock behind
    from agents.run.logger import Logger

    run = tmp_path / "run"
    disk_full_at_the_second_checkpoint(monkeypatch)

    def close_on_full_disk(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Logger, "close", close_on_full_disk)
    assert train_mappo.main([*TINY, "run.checkpoint_interval=32", f"run.dir={run}"]) == 1
    err = capsys.readouterr().err
    assert "error: [Errno 28] No space left on device\ninterrupted at 64 env steps; last checkpoint" in err
    assert not (run / "train.lock").exists()


def test_ctrl_c_while_starting_is_held_and_then_exits_130(capsys):
    import signal
    import threading

    from agents.run.startup import interrupt_held

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    before = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(SystemExit) as exit_info:
        with interrupt_held("importing"):
            signal.raise_signal(signal.SIGINT)  # Ctrl-C in the middle of the imports: not raised there
            done.append("the rest of the block")
    assert exit_info.value.code == 130 and done == ["the rest of the block"]
    assert capsys.readouterr().err == "interrupted while importing: nothing written\n"
    assert signal.getsignal(signal.SIGINT) is before
    with interrupt_held():  # no Ctrl-C: nothing happens
        pass


def test_ctrl_c_while_the_settings_are_read_exits_130(monkeypatch, capsys):
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")

    def slow_settings(args):  # a --resume reads and checks its checkpoint here
        signal.raise_signal(signal.SIGINT)
        return real(args)

    real = train_mappo.resolve_config
    monkeypatch.setattr(train_mappo, "resolve_config", slow_settings)
    with pytest.raises(SystemExit) as exit_info:
        train_mappo.main([*TINY, "train.total_env_steps=32"])
    assert exit_info.value.code == 130
    assert "interrupted while reading the settings: nothing written" in capsys.readouterr().err


def test_a_second_ctrl_c_while_starting_ends_the_process_at_once():
    import subprocess
    import sys

    code = (
        "import signal, time\nfrom agents.run.startup import interrupt_held\n"
        "with interrupt_held('importing'):\n"
        "    signal.raise_signal(signal.SIGINT)\n    signal.raise_signal(signal.SIGINT)\n"
        "    time.sleep(60)  # a hung import: the second Ctrl-C does not wait for it\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert result.returncode == 130 and result.stderr == "interrupted while importing: nothing written\n"
