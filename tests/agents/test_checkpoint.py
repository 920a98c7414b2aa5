"""Checkpoint files: atomic write, keep-K, and clear errors for corrupt, truncated or mismatched
files -- with the previous checkpoint still usable."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import torch

from agents.algo.learner import build_learner, train_iteration
from agents.run import checkpoint as ckpt
from agents.run.learner_state import learner_state, load_learner_state


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal. A job started in the background by a
    non-interactive shell inherits SIGINT as ignored, and the code rightly keeps ignoring it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def payload(env_steps: int, **extra) -> dict:
    d = {k: {} for k in ckpt.REQUIRED_KEYS}
    d.update(
        format_version=ckpt.FORMAT_VERSION,
        env_steps=env_steps,
        iteration=1,
        config={"env": {}, "model": {}, "train": {}, "run": {}},
        optimizer={"state": {}, "param_groups": []},
        actor={"w": torch.arange(6.0).view(2, 3)},
        **extra,
    )
    return d


def test_round_trip_keeps_last_k_and_leaves_no_temporaries(tmp_path):
    for steps in (100, 200, 300, 400):
        ckpt.save_checkpoint(tmp_path, payload(steps), keep=2)
    files = ckpt.list_checkpoints(tmp_path)
    assert [p.name for p in files] == ["ckpt_000000000300.pt", "ckpt_000000000400.pt"]
    assert sorted(p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir()) == [p.name for p in files]
    loaded = ckpt.load_checkpoint(files[-1])
    assert loaded["env_steps"] == 400 and torch.equal(loaded["actor"]["w"], torch.arange(6.0).view(2, 3))
    assert ckpt.resolve_checkpoint(tmp_path) == files[-1]
    assert ckpt.resolve_checkpoint(tmp_path / "checkpoints") == files[-1]  # RUN/checkpoints for RUN


def test_temporaries_of_a_killed_writer_are_removed_at_the_next_save(tmp_path):
    import subprocess

    ckpt.save_checkpoint(tmp_path, payload(100), keep=3)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    d = ckpt.checkpoint_dir(tmp_path)
    orphan = d / f".ckpt_000000000200.pt.tmp-{int(dead.stdout)}"  # its writer has exited
    orphan.write_bytes(b"half a checkpoint")
    live = d / f".ckpt_000000000200.pt.tmp-{os.getppid()}"  # a running process may still be writing
    live.write_bytes(b"in progress")
    ckpt.save_checkpoint(tmp_path, payload(300), keep=3)
    assert not orphan.exists() and live.exists()


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "empty", "not_ours"])
def test_damaged_checkpoint_is_a_clear_error_and_the_previous_one_is_named(tmp_path, damage):
    ckpt.save_checkpoint(tmp_path, payload(100), keep=3)
    newest = ckpt.save_checkpoint(tmp_path, payload(200), keep=3)
    raw = bytearray(newest.read_bytes())
    if damage == "flip_byte":
        raw[len(raw) // 2] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) // 3]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw = bytearray(b"PK\x03\x04 a zip that is not ours" * 4)
    newest.write_bytes(bytes(raw))
    with pytest.raises(ckpt.CheckpointError, match="ckpt_000000000200.pt") as err:
        ckpt.load_latest(tmp_path)
    assert "ckpt_000000000100.pt" in str(err.value)  # the previous checkpoint is offered
    assert ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path)[0])["env_steps"] == 100  # and still loads


def test_hint_skips_unreadable_older_checkpoints_and_says_how_to_continue(tmp_path):
    for steps in (100, 200, 300):
        ckpt.save_checkpoint(tmp_path, payload(steps), keep=3)
    _, middle, newest = ckpt.list_checkpoints(tmp_path)
    middle.write_bytes(b"")
    newest.write_bytes(newest.read_bytes()[:50])
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"newest readable checkpoint before it is \S*ckpt_000000000100\.pt"
        r".*mv \S*ckpt_000000000300\.pt",
    ):
        ckpt.load_latest(tmp_path)
    newest.rename(newest.with_name(newest.name + ".bad"))  # as the hint says; a .bad file is not a checkpoint
    middle.rename(middle.with_name(middle.name + ".bad"))
    assert ckpt.load_latest(tmp_path)[1]["env_steps"] == 100


def test_ctrl_c_during_a_write_finishes_the_checkpoint_first(tmp_path, monkeypatch, sigint_raises):
    real_fsync = os.fsync

    def fsync_interrupted(fd):  # the user presses Ctrl-C while the file is being written
        signal.raise_signal(signal.SIGINT)
        real_fsync(fd)

    monkeypatch.setattr(ckpt.os, "fsync", fsync_interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, payload(100), keep=3)
    monkeypatch.setattr(ckpt.os, "fsync", real_fsync)
    assert ckpt.load_latest(tmp_path)[1]["env_steps"] == 100
    assert [p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir()] == ["ckpt_000000000100.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored


def test_ctrl_c_waits_for_the_files_beside_and_the_pruning_too(tmp_path, monkeypatch, sigint_raises):
    ckpt.save_checkpoint(tmp_path, payload(100), keep=1, beside={"config.yaml": "old\n"})
    real_replace = os.replace

    def replace_interrupted(src, dst):  # Ctrl-C right after the checkpoint's rename
        real_replace(src, dst)
        if str(dst).endswith(".pt"):
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(ckpt.os, "replace", replace_interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, payload(200), keep=1, beside={"config.yaml": "new\n"})
    assert (tmp_path / "config.yaml").read_text() == "new\n"  # agrees with the newest checkpoint
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000200.pt"]  # pruned to keep=1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "config.yaml"]  # no temporaries


def test_the_hint_names_the_newest_readable_checkpoint(tmp_path):
    for steps in (100, 200, 300):
        newest = ckpt.save_checkpoint(tmp_path, payload(steps), keep=3)
    newest.write_bytes(b"")
    with pytest.raises(ckpt.CheckpointError, match=r"newest readable checkpoint before it is \S*ckpt_000000000200\.pt"):
        ckpt.load_latest(tmp_path)


def test_a_file_beside_that_cannot_be_written_keeps_the_old_one_and_leaves_no_temporary(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, payload(100), keep=3, beside={"config.yaml": "old\n"})
    real_replace = os.replace

    def replace_fails_for_the_config(src, dst):
        if str(dst).endswith("config.yaml"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace_fails_for_the_config)
    with pytest.raises(OSError, match="No space"):
        ckpt.save_checkpoint(tmp_path, payload(200), keep=3, beside={"config.yaml": "new\n"})
    assert (tmp_path / "config.yaml").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "config.yaml"]


def test_a_checkpoint_saved_from_another_thread_is_written(tmp_path):
    import threading

    done = []  # signal handlers can only be set in the main thread: the deferral is skipped there
    thread = threading.Thread(target=lambda: done.append(ckpt.save_checkpoint(tmp_path, payload(100), keep=3)))
    thread.start()
    thread.join()
    assert done and ckpt.load_latest(tmp_path)[1]["env_steps"] == 100


@pytest.mark.skipif(
    sys.platform == "win32",
    reason="a process ended by a signal (returncode -SIGINT) is POSIX; Windows's C runtime ends it with an exit code",
)
def test_ctrl_c_with_the_default_action_still_ends_the_process_after_the_write(tmp_path):
    import subprocess

    script = f"""
import os, signal
signal.signal(signal.SIGINT, signal.SIG_DFL)  # a process that never set a Python handler for it
from agents.run import checkpoint as ckpt
from tests.agents.test_checkpoint import payload
real_fsync = os.fsync
def fsync_interrupted(fd):
    signal.raise_signal(signal.SIGINT)
    real_fsync(fd)
ckpt.os.fsync = fsync_interrupted
ckpt.save_checkpoint({str(tmp_path)!r}, payload(100), keep=3)
print("not reached")
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGINT and "not reached" not in proc.stdout
    assert ckpt.load_latest(tmp_path)[1]["env_steps"] == 100


def test_a_failed_write_leaves_no_temporary_and_no_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, payload(100), keep=3)

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        ckpt.save_checkpoint(tmp_path, payload(200), keep=3)
    assert [p.name for p in ckpt.checkpoint_dir(tmp_path).iterdir()] == ["ckpt_000000000100.pt"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"config": [1]}, "config must be a dict with env, model, train and run sections"),
        ({"config": {"env": {}, "model": {}, "train": {}}}, "config must be a dict with env, model, train and run"),
        ({"env_steps": "abc"}, "env_steps must be an int >= 0, got 'abc'"),
        ({"env_steps": -5}, "env_steps must be an int >= 0, got -5"),
        ({"iteration": True}, "iteration must be an int >= 0, got True"),
        ({"world_size": 0}, "world_size must be an int >= 1"),
        ({"actor": {"w": torch.tensor([1.0, float("nan")])}}, r"actor holds non-finite values in \['w'\]"),
        ({"value_norm": {"var": torch.tensor(float("inf"))}}, r"value_norm holds non-finite values in \['var'\]"),
        ({"critic": {"w": [1.0]}}, "critic must be a dict of tensors"),
        ({"optimizer": {}}, "optimizer must be an optimizer state_dict"),
        ({"optimizer": {"state": {}}}, "optimizer must be an optimizer state_dict"),
        ({"ranks": [{"env": {}}]}, "ranks must list one"),
        ({"ranks": []}, "ranks must list one"),
        ({"ranks": {}}, "ranks must list one"),
        ({"ranks": [{"env": {}, "rng": {}}], "world_size": 2}, "ranks must list one"),
    ],
)
def test_a_payload_with_the_wrong_structure_or_values_is_a_clear_error(tmp_path, change, message):
    import hashlib
    import io

    buf = io.BytesIO()
    torch.save({**payload(100), **change}, buf)
    path = tmp_path / "ckpt_000000000100.pt"  # a well-formed file with the right checksum
    path.write_bytes(ckpt.MAGIC + hashlib.sha256(buf.getvalue()).digest() + buf.getvalue())
    with pytest.raises(ckpt.CheckpointError, match=f"checkpoint {path}: {message}"):
        ckpt.load_checkpoint(path)


def test_missing_keys_wrong_version_and_empty_run(tmp_path):
    with pytest.raises(ValueError, match="lacks"):
        ckpt.save_checkpoint(tmp_path, {"env_steps": 1}, keep=3)
    bad = payload(5)
    bad["format_version"] = 99
    path = ckpt.save_checkpoint(tmp_path, bad, keep=3)
    with pytest.raises(ckpt.CheckpointError, match="format version 99"):
        ckpt.load_checkpoint(path)
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(ckpt.CheckpointError, match=r"no checkpoints.*start it again .*run.dir=\S*empty_run"):
        ckpt.resolve_checkpoint(tmp_path / "empty_run")
    with pytest.raises(ckpt.CheckpointError, match="neither"):
        ckpt.resolve_checkpoint(tmp_path / "missing")


def test_mismatched_checkpoint_is_rejected_by_the_learner(make_config, tmp_path):
    learner = build_learner(make_config(), torch.device("cpu"))
    train_iteration(learner)
    path = ckpt.save_checkpoint(tmp_path, learner_state(learner), keep=2)
    other = build_learner(make_config("model.hidden_size=24"), torch.device("cpu"))
    with pytest.raises(ckpt.CheckpointError, match="does not match"):
        load_learner_state(other, ckpt.load_checkpoint(path), str(path))
    other_env = build_learner(make_config("env.num_envs=6"), torch.device("cpu"))
    with pytest.raises(ckpt.CheckpointError, match="does not match"):
        load_learner_state(other_env, ckpt.load_checkpoint(path), str(path))


def test_a_checkpoint_from_another_device_type_names_the_device_to_resume_on(make_config):
    # a CUDA generator's state (16 bytes) cannot continue a CPU stream (5,056 bytes), nor the reverse
    learner = build_learner(make_config(), torch.device("cpu"))
    payload = learner_state(learner)
    assert payload["rng"]["device_type"] == "cpu"
    for rank in [payload, *payload["ranks"]]:
        rank["rng"] = {**rank["rng"], "device_type": "cuda"}
    with pytest.raises(
        ckpt.CheckpointError, match="written on cuda and this run is on cpu: resume with run.device=cuda"
    ):
        load_learner_state(build_learner(make_config(), torch.device("cpu")), payload, "gpu.pt")


def test_learner_state_round_trip_restores_everything(make_config, tmp_path):
    a = build_learner(make_config("train.amp=fp16"), torch.device("cpu"))
    train_iteration(a)
    path = ckpt.save_checkpoint(tmp_path, learner_state(a), keep=2)
    b = build_learner(make_config("train.amp=fp16"), torch.device("cpu"))
    train_iteration(b)  # b moves on; loading must bring it back to a's state exactly
    load_learner_state(b, ckpt.load_checkpoint(path), str(path))
    assert (b.env_steps, b.iteration) == (a.env_steps, a.iteration)
    for pa, pb in zip([*a.actor.parameters(), *a.critic.parameters()], [*b.actor.parameters(), *b.critic.parameters()]):
        assert torch.equal(pa, pb)
    assert a.action_noise.state_dict() == b.action_noise.state_dict()
    assert torch.equal(a.obs["local"], b.obs["local"]) and torch.equal(a.obs["state"], b.obs["state"])
    assert a.scaler.state_dict() == b.scaler.state_dict()
    assert torch.equal(a.value_norm.running_mean, b.value_norm.running_mean)


@pytest.mark.skipif(not hasattr(os, "O_DIRECTORY"), reason="POSIX: a folder can be opened and fsync'ed")
def test_the_folder_is_fsynced_after_the_rename(tmp_path, monkeypatch):
    import stat

    real_fsync, synced = os.fsync, []

    def fsync_recorded(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(ckpt.os, "fsync", fsync_recorded)
    ckpt.save_checkpoint(tmp_path, payload(100), keep=3)
    assert synced == [False, True]  # the file's content, then the folder holding its new name


def test_where_folders_cannot_be_opened_a_save_still_completes(tmp_path, monkeypatch):
    """What Windows does: no O_DIRECTORY, and os.open of a folder raises PermissionError."""
    real_open = os.open

    def open_refusing_folders(path, flags, *args, **kwargs):
        if os.path.isdir(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.delattr(ckpt.os, "O_DIRECTORY", raising=False)
    monkeypatch.setattr(ckpt.os, "open", open_refusing_folders)
    for steps in (100, 200):
        ckpt.save_checkpoint(tmp_path, payload(steps), keep=1, beside={"config.yaml": "x: 1\n"})
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000200.pt"]
    assert ckpt.load_latest(tmp_path)[1]["env_steps"] == 200
