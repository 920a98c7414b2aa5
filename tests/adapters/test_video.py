"""Episode recording, GIF / MP4 files read back, TensorBoard video, and `python -m uavsim.play`."""

import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from tests.adapters.helpers import EASY, SMALL
from uavsim import UAVSwarmEnv
from uavsim.adapters._frames import render_reference
from uavsim.policies import GreedyFrontierPolicy, RandomPolicy
from uavsim.reference import ReferenceEnv
from uavsim.video import frames_to_video_tensor, gif_bytes, log_video, record_episode, record_tiled, write_video

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recording():
    env = UAVSwarmEnv(EASY, num_envs=3, seed=1)
    return record_episode(env, RandomPolicy(env, seed=0), env_index=2, cell_px=3)


def test_record_episode_draws_every_step_including_the_last(recording):
    rec = recording
    assert rec.ended and len(rec.frames) == rec.steps + 1
    assert all(f.shape == (36, 36, 3) and f.dtype == np.uint8 for f in rec.frames)
    # The first frame is episode 0 of environment 2 before any step.
    assert np.array_equal(rec.frames[0], render_reference(_reset_ref(EASY, 1, 2), 3))
    assert rec.terminated == (rec.coverage >= EASY.target_coverage)


def _reset_ref(cfg, seed, env_index):
    ref = ReferenceEnv(cfg, seed=seed, env_index=env_index)
    ref.reset()
    return ref


def test_record_episode_starts_a_fresh_episode_mid_run():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=4)
    env.reset()
    for _ in range(5):
        env.step(torch.ones(2, SMALL.num_uavs, dtype=torch.int64))
    rec = record_episode(env, GreedyFrontierPolicy(env), env_index=0, max_steps=4, trail=0)
    ref = ReferenceEnv(SMALL, seed=4)
    ref.reset()
    ref.reset()  # the recording is environment 0's second episode
    assert np.array_equal(rec.frames[0], render_reference(ref))
    assert rec.steps == 4 and not rec.ended and len(rec.frames) == 5


@pytest.mark.parametrize(
    "options",
    [{"autoreset_mode": "next_step"}, {"obs_dtype": torch.bfloat16}, {"obs_dtype": torch.float16}],
    ids=["next-step", "bf16", "fp16"],
)
def test_record_episode_takes_every_env_mode(recording, options):
    # next_step has no info["final_obs"] (KeyError); the narrow observations were compared with the
    # reference in NumPy, which has no bfloat16 (TypeError) and took fp16's rounding for a disagreement
    env = UAVSwarmEnv(EASY, num_envs=3, seed=1, **options)
    rec = record_episode(env, RandomPolicy(env, seed=0), env_index=2, cell_px=3)
    assert rec.ended and rec.steps == recording.steps and rec.episode_return == recording.episode_return
    assert all(np.array_equal(a, b) for a, b in zip(rec.frames, recording.frames))


def test_gif_and_mp4_are_written_and_decodable(recording, tmp_path):
    frames = recording.frames
    gif = write_video(frames, tmp_path / "episode.gif", fps=10)
    back = imageio.mimread(gif)
    # Pillow merges a frame identical to the previous one into it (adding up their durations).
    changes = 1 + sum(not np.array_equal(a, b) for a, b in zip(frames, frames[1:]))
    assert len(back) == changes and back[0].shape[:2] == frames[0].shape[:2]
    assert np.array_equal(np.asarray(back[-1])[..., :3], frames[-1])  # GIF palette keeps our few colours exact
    pytest.importorskip("imageio_ffmpeg")
    mp4 = write_video(frames, tmp_path / "episode.mp4", fps=10)
    back = imageio.mimread(mp4)
    assert len(back) == len(frames) and back[0].shape == (36, 36, 3)


def test_write_video_rejects_bad_input(tmp_path):
    frame = np.zeros((8, 8, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"\.gif or \.mp4"):
        write_video([frame], tmp_path / "x.avi")
    with pytest.raises(ValueError, match="empty"):
        write_video([], tmp_path / "x.gif")
    with pytest.raises(ValueError, match="uint8"):
        write_video([frame.astype(np.float32)], tmp_path / "x.gif")
    with pytest.raises(
        ValueError, match=r"frames must be images of one size, got 2 shapes: \[\(8, 8, 3\), \(8, 9, 3\)\]"
    ):
        write_video([frame, np.zeros((8, 9, 3), dtype=np.uint8)], tmp_path / "x.gif")
    (tmp_path / "a_file").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="a_file' is a file, not a folder"):
        write_video([frame], tmp_path / "a_file" / "x.gif")
    for fps in (0, -1, float("nan"), float("inf")):
        for write in (
            lambda fps=fps: write_video([frame], tmp_path / "x.gif", fps=fps),
            lambda fps=fps: gif_bytes([frame], fps=fps),
        ):
            with pytest.raises(ValueError, match="fps must be a finite number > 0"):
                write()


def test_tensorboard_video(recording, tmp_path):
    video = frames_to_video_tensor(recording.frames)
    assert video.dtype == torch.uint8 and video.shape == (1, len(recording.frames), 3, 36, 36)
    assert gif_bytes(recording.frames[:3])[:6] == b"GIF89a"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(tmp_path)
    log_video(writer, "eval/episode", recording.frames, global_step=7)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    (image,) = events.Images("eval/episode")
    assert image.step == 7 and image.encoded_image_string[:6] == b"GIF89a"


def test_record_tiled():
    env = UAVSwarmEnv(SMALL, num_envs=5, seed=0)
    frames = record_tiled(env, RandomPolicy(env), num_steps=3, env_indices=[0, 3], cell_px=2)
    assert len(frames) == 4 and frames[0].shape == (24, 2 * 24 + 2, 3)
    # the last frame is environments 0 and 3 as they are after the third step, side by side
    assert np.array_equal(frames[-1][:, :24], env.render(0, 2)) and np.array_equal(frames[-1][:, 26:], env.render(3, 2))
    assert not np.array_equal(frames[0], frames[-1])  # the UAVs moved


def test_play_command_writes_a_gif(tmp_path):
    out = tmp_path / "episode.gif"
    cmd = [
        sys.executable,
        "-m",
        "uavsim.play",
        "--policy",
        "greedy",
        "--seed",
        "0",
        "--out",
        str(out),
        "--config",
        "grid_height=10",
        "grid_width=10",
        "num_uavs=3",
        "num_obstacles=4",
        "launch_size=2",
        "max_steps=15",
        "--cell-px",
        "4",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("greedy seed=0: coverage") and "collisions" in line and str(out) in line
    frames = imageio.mimread(out)
    assert frames[0].shape[:2] == (40, 40)


def test_play_command_rejects_unknown_config_key(tmp_path):
    cmd = [sys.executable, "-m", "uavsim.play", "--out", str(tmp_path / "x.gif"), "--config", "num_drones=3"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2 and "num_drones" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "{tmp}/missing/x.gif"], "is missing or a file"),
        (["--fps", "0"], "--fps"),
        (["--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
        (["--config", "num_uavs=[1"], "error"),
    ],
)
def test_play_command_rejects_bad_arguments_before_playing(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    cmd = [sys.executable, "-m", "uavsim.play", "--out", str(tmp_path / "x.gif"), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_record_episode_takes_a_numpy_env_index():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=0)
    rec = record_episode(env, RandomPolicy(env, seed=0), np.int64(1), max_steps=2)
    assert rec.steps == 2


def test_a_recording_reports_the_episode_as_the_env_does():
    # the recorded episode's statistics are the env's own info for that episode, bit for bit
    for seed in range(6):
        env = UAVSwarmEnv(SMALL, num_envs=2, seed=seed)
        rec = record_episode(env, RandomPolicy(env, seed=seed), env_index=1, trail=0)
        replay = UAVSwarmEnv(SMALL, num_envs=2, seed=seed)
        replay.reset()
        policy = RandomPolicy(replay, seed=seed)
        while True:
            _, _, terminated, truncated, info = replay.step(policy(replay))
            if terminated[1] or truncated[1]:
                break
        assert rec.episode_return == float(info["episode_return"][1])
        assert (rec.steps, rec.collisions, rec.near_misses) == (
            int(info["episode_length"][1]),
            int(info["episode_collisions"][1]),
            int(info["episode_near_misses"][1]),
        )


def test_numpy_fps_and_index_iterables_work_as_python_ones(recording, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    frames = recording.frames[:4]
    for suffix in (".gif", ".mp4"):
        path = write_video(frames, tmp_path / f"np{suffix}", fps=np.float32(8))
        assert path.stat().st_size > 0
    env = UAVSwarmEnv(SMALL, num_envs=3, seed=0)
    from_generator = record_tiled(env, RandomPolicy(env, seed=0), 2, env_indices=(i for i in (0, 2)), cell_px=2)
    env = UAVSwarmEnv(SMALL, num_envs=3, seed=0)
    from_list = record_tiled(env, RandomPolicy(env, seed=0), 2, env_indices=[0, 2], cell_px=2)
    assert all(np.array_equal(a, b) for a, b in zip(from_generator, from_list))


def test_a_failed_mp4_write_leaves_no_file(recording, tmp_path, monkeypatch):
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v2 as imageio

    def encoder_fails(*args, **kwargs):
        raise RuntimeError("encoder failed")

    monkeypatch.setattr(imageio, "mimwrite", encoder_fails)
    with pytest.raises(RuntimeError, match="encoder failed"):
        write_video(recording.frames[:2], tmp_path / "x.mp4")
    assert not (tmp_path / "x.mp4").exists()


def test_side_by_side_holds_each_clips_last_frame_and_labels_them():
    from uavsim.video import side_by_side

    short = [np.full((6, 5, 3), 10 * i, dtype=np.uint8) for i in range(2)]
    long = [np.full((6, 7, 3), 100 + i, dtype=np.uint8) for i in range(4)]
    frames = side_by_side([short, long], gap=2)
    assert len(frames) == 4 and all(f.shape == (6, 5 + 2 + 7, 3) for f in frames)
    assert (frames[3][:, :5] == 10).all() and (frames[3][:, 5:7] == 255).all() and (frames[3][:, 7:] == 103).all()
    labelled = side_by_side([short, long], ["a", "b"], gap=2)
    assert labelled[0].shape == (14 + 6, 14, 3) and np.array_equal(labelled[2][14:], frames[2])
    assert (labelled[0][:14] < 255).any()  # the labels are drawn
    with pytest.raises(ValueError, match="one height"):
        side_by_side([short, [np.zeros((5, 5, 3), np.uint8)]])
    with pytest.raises(ValueError, match="labels must name each"):
        side_by_side([short, long], ["a"])
    with pytest.raises(ValueError, match="must not be empty"):
        side_by_side([])
