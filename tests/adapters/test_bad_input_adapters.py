"""Bad input to the adapters, the recorders, the video writers and `python -m uavsim.play`: a clear
TypeError / ValueError (exit 2 with one line from the command), never a quiet wrong answer."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.adapters.helpers import SMALL
from uavsim import UAVSwarmEnv
from uavsim.adapters.gymnasium_vector import CoverageVectorEnv
from uavsim.play import parse_overrides
from uavsim.policies import RandomPolicy
from uavsim.reference import ReferenceEnv
from uavsim.video import gif_bytes, record_episode, record_tiled, write_video

ROOT = Path(__file__).resolve().parents[2]
FRAME = np.zeros((8, 8, 3), dtype=np.uint8)


def distinct_frames(n):
    return [np.full((8, 8, 3), 20 * i, dtype=np.uint8) for i in range(n)]


# -- CoverageVectorEnv -------------------------------------------------------------------------------------------
@pytest.fixture
def vec():
    e = CoverageVectorEnv(2, SMALL)
    e.reset()
    return e


def test_vector_render_env_rejects_cell_px_0(vec):
    with pytest.raises(ValueError, match="cell_px must be >= 2, got 0"):
        vec.render_env(0, cell_px=0)
    with pytest.raises(TypeError, match="env_index"):
        vec.render_env(True)
    assert vec.render_env(1).shape == (48, 48, 3)  # the default cell_px=4


@pytest.mark.parametrize(
    "actions",
    [
        [[True, 0, 0, 0]] * 2,
        [[np.bool_(True), 0, 0, 0], [0, 0, 0, 0]],
        np.ones((2, 4), dtype=bool),
        [np.zeros(4, dtype=bool), np.zeros(4, dtype=bool)],
    ],
)
def test_vector_step_refuses_bools(vec, actions):
    with pytest.raises(TypeError, match="integers"):
        vec.step(actions)


def test_vector_step_refuses_a_bool_tensor(vec):
    with pytest.raises(TypeError, match="torch.int64.*torch.bool"):
        vec.step(torch.ones(2, 4, dtype=torch.bool))


def test_vector_step_still_takes_integer_lists(vec):
    obs, reward, terminated, truncated, info = vec.step([[np.int64(1), 0, 2, 0], [0, 0, 0, 4]])
    assert reward.shape == (2,) and terminated.shape == (2,)


def test_vector_step_reports_the_real_uint64_value(vec):
    with pytest.raises(ValueError, match=r"\[0, 5\).*\[9223372036854775808\]"):
        vec.step(np.full((2, 4), 2**63, dtype=np.uint64))
    with pytest.raises(ValueError, match=r"\[0, 5\).*\[18446744073709551615\]"):
        CoverageVectorEnv(2, SMALL, check_action_range=False).step(np.full((2, 4), 2**64 - 1, dtype=np.uint64))


@pytest.mark.parametrize("options", [[1], "reset_mask", 3])
def test_vector_reset_options_must_be_a_dict(vec, options):
    with pytest.raises(TypeError, match="options must be None or a dict"):
        vec.reset(options=options)


# -- PettingZoo and the reference --------------------------------------------------------------------------------
def test_pettingzoo_refuses_a_bool_action():
    pytest.importorskip("pettingzoo")
    from uavsim.adapters.pettingzoo_env import CoverageParallelEnv

    env = CoverageParallelEnv(SMALL)
    env.reset(seed=1)
    for bad in (True, np.bool_(False), np.array(True)):
        with pytest.raises(TypeError, match="the action of uav_0 must be an integer"):
            env.step({**dict.fromkeys(env.agents, 0), "uav_0": bad})
    env.step({**dict.fromkeys(env.agents, 0), "uav_0": np.int64(1)})  # still fine


def test_reference_refuses_a_bool_in_a_list():
    ref = ReferenceEnv(SMALL)
    ref.reset()
    with pytest.raises(TypeError, match="holding bools"):
        ref.step([True, 0, 0, 0])


# -- recorders ---------------------------------------------------------------------------------------------------
@pytest.fixture
def env():
    return UAVSwarmEnv(SMALL, num_envs=2, seed=0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(max_steps=True), TypeError, "max_steps must be an int"),
        (dict(max_steps=-1), ValueError, "max_steps"),
        (dict(max_steps=2.0), TypeError, "max_steps"),
        (dict(trail=-1), ValueError, "trail must be >= 0, got -1"),
        (dict(trail=1.5), TypeError, "trail"),
        (dict(cell_px=0), ValueError, "cell_px"),
    ],
)
def test_record_episode_rejects_bad_arguments(env, kwargs, error, match):
    with pytest.raises(error, match=match):
        record_episode(env, RandomPolicy(env), 0, **kwargs)


def test_record_episode_takes_numpy_counts(env):
    rec = record_episode(env, RandomPolicy(env), 0, max_steps=np.int64(2), trail=np.int32(1))
    assert rec.steps == 2


@pytest.mark.parametrize("num_steps, error", [(-1, ValueError), (True, TypeError), (1.5, TypeError)])
def test_record_tiled_rejects_bad_num_steps(env, num_steps, error):
    with pytest.raises(error, match="num_steps"):
        record_tiled(env, RandomPolicy(env), num_steps=num_steps)


def test_record_tiled_takes_arrays_and_tensors_of_indices(env):
    frames = record_tiled(env, RandomPolicy(env), num_steps=np.int64(1), env_indices=torch.tensor([1, 0]), cell_px=2)
    assert len(frames) == 2 and frames[0].shape == (24, 50, 3)
    with pytest.raises(TypeError, match="1-D integers"):
        record_tiled(env, RandomPolicy(env), num_steps=1, env_indices=np.array([0.0, 1.0]))


# -- video files -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fps", [1e-3, 100 / 65536])
def test_gif_fps_too_low_for_a_gif_frame(tmp_path, fps):
    with pytest.raises(ValueError, match=r"fps must be > 0.00152587890625 for a GIF"):
        write_video(distinct_frames(3), tmp_path / "x.gif", fps=fps)
    with pytest.raises(ValueError, match="for a GIF"):
        gif_bytes(distinct_frames(3), fps=fps)
    assert not (tmp_path / "x.gif").exists()


def test_gif_fps_just_above_the_bound_is_written(tmp_path):
    import imageio.v2 as imageio

    path = write_video(distinct_frames(3), tmp_path / "x.gif", fps=0.0016)
    assert len(imageio.mimread(path)) == 3


def test_gif_identical_frames_merged_into_one_too_long_frame(tmp_path):
    # Pillow shows 2 identical frames as one of 2 * 625 s > 655.35 s: the GIF cannot hold it.
    with pytest.raises(ValueError, match="2 identical frames in a row.*1250.0 s"):
        write_video([FRAME, FRAME], tmp_path / "x.gif", fps=0.0016)
    gif_bytes([FRAME, FRAME], fps=0.004)  # 2 * 250 s fits
    a, b, c = distinct_frames(3)
    with pytest.raises(ValueError, match="2 identical frames in a row"):  # the longest run, not the last
        gif_bytes([a, b, b, c], fps=0.0016)


@pytest.mark.parametrize("fps", [51, 200, 1e6])
def test_gif_fps_too_high_for_a_frame_browsers_show(tmp_path, fps):
    # a GIF frame's delay is in 1/100 s: above 50 fps it is 0 or 1, which browsers play at 10 fps
    with pytest.raises(ValueError, match="fps must be <= 50 for a GIF"):
        write_video(distinct_frames(3), tmp_path / "x.gif", fps=fps)
    assert not (tmp_path / "x.gif").exists()


def test_gif_frames_last_what_fps_says(tmp_path):
    from PIL import Image

    for fps, delay_ms in ((50, 20), (12.5, 80), (8, 120)):  # Pillow reads the delay back in ms (1/100 s steps)
        path = write_video(distinct_frames(3), tmp_path / f"x{fps}.gif", fps=fps)
        with Image.open(path) as gif:
            durations = []
            for i in range(gif.n_frames):
                gif.seek(i)
                durations.append(gif.info["duration"])
        assert durations == [delay_ms] * 3, (fps, durations)


def test_check_video_path_checks_the_fps_for_a_gif(tmp_path):
    from uavsim.video import check_video_path

    with pytest.raises(ValueError, match="for a GIF"):
        check_video_path(tmp_path / "x.gif", fps=1e-3)
    assert check_video_path(tmp_path / "x.mp4", fps=1e-3) == tmp_path / "x.mp4"  # no GIF frame limit for MP4


def test_an_mp4_that_ffmpeg_left_empty_is_an_error_and_no_file(tmp_path, monkeypatch):
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v2 as imageio

    monkeypatch.setattr(imageio, "mimwrite", lambda *args, **kwargs: None)  # ffmpeg wrote nothing
    with pytest.raises(OSError, match="ffmpeg wrote nothing"):
        write_video(distinct_frames(2), tmp_path / "x.mp4")
    assert not (tmp_path / "x.mp4").exists()


def test_video_path_that_is_a_folder(tmp_path):
    for name in ("dir.gif", "dir.mp4"):
        (tmp_path / name).mkdir()
        with pytest.raises(ValueError, match="is a folder"):
            write_video([FRAME], tmp_path / name)
    with pytest.raises(ValueError, match="does not exist"):
        write_video([FRAME], tmp_path / "missing" / "x.gif")


def test_a_failing_gif_leaves_no_writer_to_complain_at_exit(tmp_path):
    (tmp_path / "dir.gif").mkdir()
    code = (
        f"import numpy as np\nfrom uavsim.video import write_video\nf = np.zeros((8, 8, 3), np.uint8)\n"
        f"for path, fps in (({str(tmp_path / 'dir.gif')!r}, 8.0), ({str(tmp_path / 'x.gif')!r}, 1e-3)):\n"
        f"    try:\n        write_video([f, f], path, fps=fps)\n    except ValueError:\n        pass\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


# -- python -m uavsim.play ---------------------------------------------------------------------------------------
def test_config_overrides_read_exponents_as_floats():
    got = parse_overrides(
        [
            "coverage_reward=1e-3",
            "time_penalty=2E-2",
            "near_miss_penalty=.5e1",
            "max_steps=40",
            "collision_penalty=1.5",
            "moves='8'",
        ]
    )
    assert got == {
        "coverage_reward": 0.001,
        "time_penalty": 0.02,
        "near_miss_penalty": 5.0,
        "max_steps": 40,
        "collision_penalty": 1.5,
        "moves": "8",
    }
    assert type(got["max_steps"]) is int
    # a map path as written: YAML would end it at " #" and read "a: b" as a mapping
    for path in ("/maps #2/urban.txt", "/x/run: a", "'quoted'"):
        assert parse_overrides([f"maps={path}"]) == {"maps": path}


TINY = ["grid_height=8", "grid_width=8", "num_uavs=2", "num_obstacles=2", "launch_size=2", "max_steps=4"]


def play(tmp_path, *args):
    cmd = [sys.executable, "-m", "uavsim.play", "--cell-px", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_play_takes_an_exponent_float_override(tmp_path):
    out = tmp_path / "x.gif"
    result = play(tmp_path, "--out", str(out), "--config", "coverage_reward=1e-3", *TINY)
    assert result.returncode == 0, result.stderr
    assert out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fps", "0.001"], "fps must be > 0.00152587890625 for a GIF"),
        (["--trail", "-3"], "--trail must be >= 0"),
        (["--steps", "-1"], "--steps must be >= 0"),
        (["--fps", "200"], "fps must be <= 50 for a GIF"),
        (["--cell-px", "1"], "--cell-px must be >= 2"),
        (["--cell-px", "100000"], "GiB (at most 4): lower --cell-px or --steps"),
    ],
)
def test_play_rejects_bad_arguments_in_one_line(tmp_path, args, message):
    result = play(tmp_path, "--out", str(tmp_path / "x.gif"), *args, "--config", *TINY)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "x.gif").exists()


def test_play_out_is_an_existing_folder(tmp_path):
    (tmp_path / "dir.gif").mkdir()
    result = play(tmp_path, "--out", str(tmp_path / "dir.gif"), "--config", *TINY)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: video path {str(tmp_path / 'dir.gif')!r} is a folder, not a file"
    ], result.stderr


@pytest.mark.parametrize(
    ("seed", "error"), [(-1, ValueError), (2**31, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_single_env_reset_checks_the_seed_itself(seed, error):
    from uavsim.adapters.gymnasium_single import CoverageReferenceEnv

    env = CoverageReferenceEnv()
    with pytest.raises(error, match="seed must be"):
        env.reset(seed=seed)
    env.reset(seed=np.int64(3))  # NumPy ints are ints
