"""A run killed right after a checkpoint and resumed ends with exactly the parameters of an
uninterrupted run (CPU, determinism on): networks, Adam, value normalizer, GradScaler, RNGs,
environment state and step counters all travel in the checkpoint."""

from __future__ import annotations

import pytest
import torch

from agents import train_mappo
from agents.run import checkpoint as ckpt
from agents.train_mappo import parse_args, resolve_config, train


class Killed(Exception):
    pass


@pytest.fixture(autouse=True)
def restore_torch_globals():
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)


def all_state(learner) -> dict[str, torch.Tensor]:
    out = {f"actor.{k}": v for k, v in learner.actor.state_dict().items()}
    out.update({f"critic.{k}": v for k, v in learner.critic.state_dict().items()})
    out.update({f"value_norm.{k}": v for k, v in learner.value_norm.state_dict().items()})
    for i, st in learner.optimizer.state_dict()["state"].items():
        out.update({f"adam.{i}.{k}": v for k, v in st.items()})
    out.update({f"env.{k}": v for k, v in learner.env.state_dict()["state"].items()})
    out["rng.action"] = torch.tensor(learner.action_noise.state_dict()["step"])
    out["rng.minibatch"] = learner.minibatch_gen.get_state()
    if learner.hidden is not None:
        out["hidden"] = learner.hidden
    if learner.clone is not None:
        out.update({f"clone.{k}": v for k, v in learner.clone.state_dict().items()})
    return out


@pytest.mark.parametrize(
    "amp, extra",
    [
        ("off", []),
        ("fp16", []),
        ("off", ["model.recurrent=true", "train.chunk_length=4"]),
        (
            "off",
            ["imitation.teacher=greedy", "imitation.env_steps=48", "imitation.epochs=1", "train.clone_kl_coef=0.5"],
        ),
    ],
)
def test_killed_and_resumed_run_matches_uninterrupted_run(make_config, tmp_path, monkeypatch, amp, extra):
    common = [
        f"train.amp={amp}",
        "run.deterministic=true",
        "train.total_env_steps=320",
        "run.checkpoint_interval=64",
        "run.eval_interval=96",
        "env.max_steps=7",
        *extra,
    ]
    full = train(make_config(*common, f"run.dir={tmp_path / 'full'}"))
    assert full.env_steps == 320

    real_save = ckpt.save_checkpoint

    def save_then_die(run_dir, payload, keep, beside=None):
        path = real_save(run_dir, payload, keep, beside)
        if payload["env_steps"] == 128:
            raise Killed  # the process dies right after writing this checkpoint
        return path

    monkeypatch.setattr(ckpt, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train(make_config(*common, f"run.dir={tmp_path / 'cut'}"))
    monkeypatch.setattr(ckpt, "save_checkpoint", real_save)
    assert ckpt.list_checkpoints(tmp_path / "cut")[-1].name == "ckpt_000000000128.pt"

    args = parse_args(["--resume", str(tmp_path / "cut")])
    resumed = train(resolve_config(args), resume=args.resume)
    assert (resumed.env_steps, resumed.iteration) == (full.env_steps, full.iteration)
    a, b = all_state(full), all_state(resumed)
    assert a.keys() == b.keys()
    if "model.recurrent=true" in extra:  # the hidden states travel in the checkpoint: mid-episode, not zeros
        assert "hidden" in a and a["hidden"].abs().sum() > 0
    if "train.clone_kl_coef=0.5" in extra:  # so does the imitated actor PPO stays near (not cloned again)
        assert any(k.startswith("clone.") for k in a)
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"differ after resume: {differ}"
    assert full.scaler.state_dict() == resumed.scaler.state_dict()


def test_resume_refuses_structural_changes_and_config_files(make_config, tmp_path):
    train(make_config("train.total_env_steps=64", f"run.dir={tmp_path}"))
    with pytest.raises(ValueError, match="cannot change.*model.hidden_size"):
        resolve_config(parse_args(["--resume", str(tmp_path), "model.hidden_size=8"]))
    # done before the first checkpoint: an override would be written into the run's config, and not done
    for key in ("imitation.teacher=coordinated", "imitation.epochs=5", "run.recipe=gpu"):
        with pytest.raises(ValueError, match=rf"cannot change \['{key.split('=')[0]}'\].*its imitation and recipe"):
            resolve_config(parse_args(["--resume", str(tmp_path), key]))
    with pytest.raises(ValueError, match="--config"):
        resolve_config(parse_args(["--resume", str(tmp_path), "--config", "x.yaml"]))
    cfg = resolve_config(parse_args(["--resume", str(tmp_path), "train.total_env_steps=128"]))
    assert cfg.train.total_env_steps == 128  # extending a run is allowed
    with pytest.raises(ValueError, match="already has checkpoints"):
        train(make_config("train.total_env_steps=64", f"run.dir={tmp_path}"))


def test_a_run_written_before_a_key_existed_resumes(make_config, tmp_path):
    # a config key added since (model.critic_window, 2026-12-05) is missing from an older run's checkpoint: the run
    # loads it at its default, which is no change (it was refused as "cannot change ['model.critic_window']")
    train(make_config("train.total_env_steps=64", "run.checkpoint_interval=32", f"run.dir={tmp_path}"))
    newest = ckpt.list_checkpoints(tmp_path)[-1]
    payload = ckpt.load_checkpoint(newest)
    del payload["config"]["model"]["critic_window"]
    newest.unlink()
    ckpt.save_checkpoint(tmp_path, payload, keep=5)
    args = parse_args(["--resume", str(tmp_path), "train.total_env_steps=128"])
    resumed = train(resolve_config(args), resume=args.resume)
    assert resumed.env_steps == 128 and resumed.cfg.model.critic_window is True


def test_main_reports_a_corrupt_checkpoint_clearly(make_config, tmp_path, capsys):
    train(make_config("train.total_env_steps=64", "run.checkpoint_interval=32", f"run.dir={tmp_path}"))
    newest = ckpt.list_checkpoints(tmp_path)[-1]
    newest.write_bytes(newest.read_bytes()[:1000])
    assert train_mappo.main(["--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "corrupt or truncated" in err and "ckpt_000000000032.pt" in err


def test_resume_cannot_change_the_length_of_an_iteration(make_config, tmp_path):
    # the iteration counter and the LR schedule count iterations of num_steps x num_envs env steps
    train(make_config("train.total_env_steps=64", f"run.dir={tmp_path}"))
    for steps in ("4", "16"):
        with pytest.raises(ValueError, match=r"cannot change \['train.num_steps'\]"):
            resolve_config(parse_args(["--resume", str(tmp_path), f"train.num_steps={steps}"]))


def test_an_older_checkpoint_continues_only_as_a_branch_in_a_new_run_dir(make_config, tmp_path):
    run = tmp_path / "run"
    train(
        make_config(
            "train.total_env_steps=128", "run.checkpoint_interval=32", "run.keep_checkpoints=5", f"run.dir={run}"
        )
    )
    older = ckpt.list_checkpoints(run)[1]  # 64 env steps; the run's newest holds 128
    args = parse_args(["--resume", str(older), "train.total_env_steps=96"])
    with pytest.raises(ValueError, match="older than .*ckpt_000000000128.pt.*run.dir=NEW_DIR"):
        train(resolve_config(args), resume=args.resume)
    assert [c.name[5:17] for c in ckpt.list_checkpoints(run)] == [
        "000000000032",
        "000000000064",
        "000000000096",
        "000000000128",
    ]  # untouched
    branch = tmp_path / "branch"
    args = parse_args(["--resume", str(older), "train.total_env_steps=96", f"run.dir={branch}"])
    learner = train(resolve_config(args), resume=args.resume)
    assert learner.env_steps == 96 and learner.cfg.run.dir == str(branch)
    assert [c.name for c in ckpt.list_checkpoints(branch)] == ["ckpt_000000000096.pt"]
    assert len(ckpt.list_checkpoints(run)) == 4  # the original run is left as it was


def test_a_checkpoint_kept_outside_a_run_needs_a_run_dir(make_config, tmp_path):
    train(make_config("train.total_env_steps=64", f"run.dir={tmp_path / 'run'}"))
    loose = tmp_path / "keep" / "best.pt"
    loose.parent.mkdir()
    loose.write_bytes(ckpt.list_checkpoints(tmp_path / "run")[-1].read_bytes())
    args = parse_args(["--resume", str(loose), "train.total_env_steps=96"])
    with pytest.raises(ValueError, match="not in a run's checkpoints/ folder: pass run.dir=DIR"):
        train(resolve_config(args), resume=args.resume)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "run"]  # nothing written beside it
    args = parse_args(["--resume", str(loose), "train.total_env_steps=96", f"run.dir={tmp_path / 'cont'}"])
    assert train(resolve_config(args), resume=args.resume).env_steps == 96
    assert ckpt.list_checkpoints(tmp_path / "cont")


def test_a_failed_resume_leaves_the_run_config_as_it_was(make_config, tmp_path):
    train(make_config("train.total_env_steps=64", f"run.dir={tmp_path}"))
    saved = (tmp_path / "config.yaml").read_text()
    payload = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path)[-1])
    payload["critic"] = {}  # weights that do not fit the critic
    ckpt.save_checkpoint(tmp_path, {**payload, "env_steps": 96}, keep=3)
    assert train_mappo.main(["--resume", str(tmp_path), "train.total_env_steps=128"]) != 0
    assert (tmp_path / "config.yaml").read_text() == saved


def test_tensorboard_keeps_what_was_logged_at_the_checkpoint_step(make_config, tmp_path):
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def steps(run):
        ea = EventAccumulator(str(run), size_guidance={"scalars": 0})
        ea.Reload()
        return [e.step for e in ea.Scalars("losses/value_loss")]

    run = tmp_path / "run"
    train(
        make_config(
            "train.total_env_steps=128", "run.checkpoint_interval=32", "run.keep_checkpoints=5", f"run.dir={run}"
        )
    )
    assert steps(run) == [32, 64, 96, 128]
    cut = tmp_path / "cut"
    shutil.copytree(run, cut)
    ckpt.list_checkpoints(cut)[-1].unlink()  # killed after logging step 128, before its checkpoint
    args = parse_args(["--resume", str(cut)])
    train(resolve_config(args), resume=args.resume)
    assert steps(cut) == [32, 64, 96, 128]  # 96 (the checkpoint's own step) kept, 128 logged once again


def test_resuming_a_finished_run_without_a_larger_total_says_there_is_nothing_to_do(make_config, tmp_path, capsys):
    train(make_config("train.total_env_steps=64", f"run.dir={tmp_path / 'run'}"))
    newest = ckpt.list_checkpoints(tmp_path / "run")[-1]
    # a run killed after its last checkpoint, resumed again (by a retrying scheduler, say): done, not a failure
    assert train_mappo.main(["--resume", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "finished at 64 env steps: nothing to do (raise train.total_env_steps, 64, to continue)" in captured.err
    assert f"done: 64 env steps, run directory {tmp_path / 'run'}" in captured.out
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == [newest.name]  # nothing written
    # a branch into a new run.dir with nothing to train is a mistake: nothing is made
    assert train_mappo.main(["--resume", str(newest), f"run.dir={tmp_path / 'branch'}"]) == 2
    assert "nothing to do" in capsys.readouterr().err and not (tmp_path / "branch").exists()
    # a total below what the checkpoint holds is a mistake, not a finished run
    assert train_mappo.main(["--resume", str(newest), "train.total_env_steps=32", f"run.dir={tmp_path / 'b2'}"]) == 2
    assert "nothing to do" in capsys.readouterr().err and not (tmp_path / "b2").exists()


def test_config_may_sit_between_overrides():
    args = parse_args(["run.device=cpu", "--config", "configs/smoke.yaml", "train.total_env_steps=2048"])
    assert args.config == "configs/smoke.yaml" and args.overrides == ["run.device=cpu", "train.total_env_steps=2048"]


def test_resume_names_a_checkpoint_whose_saved_config_no_longer_loads(make_config, tmp_path, capsys):
    import hashlib
    import io

    train(make_config("train.total_env_steps=32", f"run.dir={tmp_path}"))
    newest = ckpt.list_checkpoints(tmp_path)[-1]
    payload = ckpt.load_checkpoint(newest)
    payload["config"]["train"]["removed_key"] = 1  # a key this code does not know
    buf = io.BytesIO()
    torch.save(payload, buf)
    newest.write_bytes(ckpt.MAGIC + hashlib.sha256(buf.getvalue()).digest() + buf.getvalue())
    assert train_mappo.main(["--resume", str(tmp_path), "train.total_env_steps=64"]) == 2
    assert f"checkpoint {newest} holds a config this code cannot use" in capsys.readouterr().err


def test_resume_into_a_run_directory_that_cannot_be_written_says_to_branch(make_config, tmp_path, monkeypatch):
    from agents.run import resume

    train(make_config("train.total_env_steps=32", f"run.dir={tmp_path}"))
    monkeypatch.setattr(resume, "dir_problem", lambda path: f"{path} cannot be written: read-only file system")
    args = parse_args(["--resume", str(tmp_path), "train.total_env_steps=64"])
    with pytest.raises(ValueError, match="read-only file system; pass run.dir=NEW_DIR to continue elsewhere"):
        train(resolve_config(args), resume=args.resume)


def test_a_run_killed_right_after_imitation_resumes_without_imitating_again(make_config, tmp_path, monkeypatch):
    from agents.algo import imitation

    common = [
        "run.deterministic=true",
        "train.total_env_steps=128",
        "run.checkpoint_interval=0",  # only the final one: the checkpoint after imitation is the only other
        "env.max_steps=7",
        "imitation.teacher=greedy",
        "imitation.env_steps=48",
        "imitation.epochs=1",
        "train.clone_kl_coef=0.5",
    ]
    full = train(make_config(*common, f"run.dir={tmp_path / 'full'}"))
    saved = [p.name for p in ckpt.list_checkpoints(tmp_path / "full")]
    assert saved == ["ckpt_000000000000.pt", "ckpt_000000000128.pt"]

    real_save = ckpt.save_checkpoint

    def save_then_die(run_dir, payload, keep, beside=None):
        real_save(run_dir, payload, keep, beside)
        raise Killed  # the process dies right after writing its first checkpoint: the one after imitation

    monkeypatch.setattr(ckpt, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train(make_config(*common, f"run.dir={tmp_path / 'cut'}"))
    monkeypatch.setattr(ckpt, "save_checkpoint", real_save)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "cut")] == ["ckpt_000000000000.pt"]

    def imitate_again(*args, **kwargs):
        raise AssertionError("the resumed run imitated again")

    monkeypatch.setattr(imitation, "warm_start", imitate_again)
    args = parse_args(["--resume", str(tmp_path / "cut")])
    resumed = train(resolve_config(args), resume=args.resume)
    assert (resumed.env_steps, resumed.iteration) == (full.env_steps, full.iteration)
    a, b = all_state(full), all_state(resumed)
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert a.keys() == b.keys() and not differ, f"differ after resume: {differ}"
