"""Episodes to pictures: frames of a policy's episode, GIF / MP4 files, and TensorBoard videos.

The batched env resets an ended episode inside ``step``, so its last state is gone by the time
``step`` returns. `record_episode` therefore draws from a `ReferenceEnv` driven in lockstep with
the same actions (the two are step-exact, see tests/uavsim/test_equivalence.py): every frame,
including the final one, is the real map. The consistency of the two is checked at the end.

MP4 needs the ``imageio-ffmpeg`` package (it ships its own ffmpeg); GIF needs nothing extra.
TensorBoard: `log_video` writes an animated GIF summary directly, which is what
``SummaryWriter.add_video`` does, without its moviepy dependency (moviepy 2 no longer has the
``moviepy.editor`` module that ``add_video`` imports).
"""

from __future__ import annotations

import io
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uavsim import rules
from uavsim.adapters._frames import render_reference
from uavsim.checks import check_int
from uavsim.env import UAVSwarmEnv
from uavsim.reference import ReferenceEnv
from uavsim.render import check_cell_px, render_tiled

Policy = Callable[[UAVSwarmEnv], torch.Tensor]  # env -> actions [B, N] int64 on the env's device


class ReferenceMismatchError(RuntimeError):
    """The batched env and the NumPy reference disagree during a recording (the env's state was changed from
    outside): not a device problem, which `python -m uavsim.play` reports apart."""


@dataclass
class EpisodeRecording:
    """Frames ``[H, W, 3]`` uint8 (one before the first step, one after each step) and the totals."""

    frames: list[np.ndarray] = field(repr=False)
    steps: int
    ended: bool  # False when ``max_steps`` stopped the recording first
    terminated: bool
    coverage: float
    episode_return: float  # mean over UAVs, as the env's ``episode_return``
    collisions: int
    near_misses: int


def _start(env: UAVSwarmEnv, env_index: int) -> None:
    try:
        env.state  # noqa: B018 -- raises RuntimeError before the first reset
    except RuntimeError:  # never reset
        env.reset()
        return
    mask = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    mask[env_index] = True
    env.reset(mask)


def record_episode(
    env: UAVSwarmEnv,
    policy: Policy,
    env_index: int = 0,
    max_steps: int | None = None,
    cell_px: int = 8,
    trail: int = 12,
) -> EpisodeRecording:
    """Start a new episode in environment ``env_index`` and play it with ``policy`` until it ends.

    The other environments keep stepping (the policy acts on the whole batch).

    Args:
        env: the batched env.
        policy: `Policy`, ``policy(env) -> actions [B, N]``.
        env_index: the environment recorded.
        max_steps: stop after this many steps (None: the episode's end).
        cell_px: pixels per grid cell.
        trail: each UAV's last ``trail`` positions drawn as dots (0: none).

    Returns:
        The `EpisodeRecording`.

    Raises:
        TypeError, ValueError: a bad argument.
        ReferenceMismatchError: the batched env and the reference disagree (its state changed from outside).
    """
    if isinstance(env_index, bool) or not isinstance(env_index, numbers.Integral) or not 0 <= env_index < env.num_envs:
        raise ValueError(f"env_index must be an int in [0, {env.num_envs}), got {env_index!r}")
    env_index = int(env_index)
    if max_steps is not None:
        max_steps = check_int("max_steps", max_steps, 0)
    trail, cell_px = check_int("trail", trail, 0), check_cell_px(cell_px)  # before the episode is reset
    _start(env, env_index)
    ref = ReferenceEnv(env.config, seed=env.seed, env_index=int(env.env_index[env_index]))
    ref.episode = int(env.state["episode"][env_index]) - 1  # the next reset plays the batched env's episode
    ref_obs = ref.reset()
    _check_same(env.observe(), ref_obs, env_index, "episode start")
    frames, positions = [render_reference(ref, cell_px)], [ref.pos.copy()]
    limit = env.config.max_steps if max_steps is None else max_steps
    terminated = truncated = False
    info: dict[str, Any] = {"coverage": np.float32(ref.covered.sum()) / np.float32(ref.free_cells)}
    final = None
    for _ in range(limit):
        actions = policy(env)
        obs, _, _, _, batch_info = env.step(actions)
        ref_obs, _, terminated, truncated, info = ref.step(actions[env_index].cpu().numpy())
        final = batch_info.get("final_obs", obs)  # next-step autoreset: the step's own observation is the last one
        trail_pos = np.stack(positions[-trail:]) if trail > 0 else None
        frames.append(render_reference(ref, cell_px, trail_pos))
        positions.append(ref.pos.copy())
        if terminated or truncated:
            break
    if final is not None:
        _check_same(final, ref_obs, env_index, "the last step")
    return EpisodeRecording(
        frames=frames,
        steps=ref.t,
        ended=terminated or truncated,
        terminated=terminated,
        coverage=float(info["coverage"]),
        episode_return=float(rules.mean_return(ref.episode_reward)),
        collisions=ref.episode_collisions,
        near_misses=ref.episode_near_misses,
    )


def _check_same(batched: dict[str, torch.Tensor], ref: dict[str, np.ndarray], i: int, where: str) -> None:
    """The reference's float32 observation cast to the env's `obs_dtype` (bf16 / fp16 observations are the rules'
    float32 values cast once) against environment `i`'s, compared in torch (NumPy has no bfloat16)."""
    for key in ("local", "state"):
        row = batched[key][i].cpu()
        if not torch.equal(row, torch.from_numpy(ref[key]).to(row.dtype)):
            raise ReferenceMismatchError(
                f"the batched env and the reference disagree at {where} (obs[{key!r}]): "
                "was the env's state changed from outside?"
            )


def record_tiled(
    env: UAVSwarmEnv, policy: Policy, num_steps: int, env_indices: Sequence[int] | None = None, cell_px: int = 4
) -> list[np.ndarray]:
    """Frames of several environments side by side (`render_tiled`) over ``num_steps`` steps.

    Drawn from the batched env after each step, so an episode that ended in a step shows the next
    episode's start in that frame.

    Args:
        env: the batched env.
        policy: `Policy`, ``policy(env) -> actions [B, N]``.
        num_steps: steps to record (``num_steps + 1`` frames).
        env_indices: the environments drawn (None: the first, up to 16).
        cell_px: pixels per grid cell.
    """
    num_steps = check_int("num_steps", num_steps, 0)
    indices = list(range(min(env.num_envs, 16))) if env_indices is None else env_indices
    if not hasattr(indices, "shape") and isinstance(indices, Iterable):  # a generator is read once, here
        indices = list(indices)  # (render_tiled checks the values)
    try:
        env.state  # noqa: B018 -- raises RuntimeError before the first reset
    except RuntimeError:
        env.reset()
    frames = [render_tiled(env, indices, cell_px=cell_px)]
    for _ in range(num_steps):
        env.step(policy(env))
        frames.append(render_tiled(env, indices, cell_px=cell_px))
    return frames


def side_by_side(
    clips: Sequence[Sequence[np.ndarray]], labels: Sequence[str] | None = None, gap: int = 4
) -> list[np.ndarray]:
    """Several episodes as one clip: frame t shows each clip's frame t side by side, a clip that
    ended holding its last frame.

    Args:
        clips: each a sequence of ``[H, W, 3]`` uint8 frames, of one height ``H`` for all.
        labels: a header naming each clip (Pillow's built-in font), or None.
        gap: white pixels between clips.

    Returns:
        As many ``[H (+ the header), W, 3]`` uint8 frames as the longest clip has, ``W`` the widths and gaps summed.

    Raises:
        ValueError: no clips, clips of different heights, or a label count that does not match.
    """
    stacks = [_check_frames(c) for c in clips]
    if not stacks:
        raise ValueError("clips must not be empty")
    if len({s.shape[1] for s in stacks}) != 1:
        raise ValueError(f"clips must have frames of one height, got {[s.shape[1] for s in stacks]}")
    if labels is not None and len(labels) != len(stacks):
        raise ValueError(f"labels must name each of the {len(stacks)} clips, got {len(labels)}")
    gap = check_int("gap", gap, 0)
    height, length = stacks[0].shape[1], max(len(s) for s in stacks)
    spacer = np.full((height, gap, 3), 255, dtype=np.uint8)
    frames = []
    for t in range(length):
        parts = []
        for i, s in enumerate(stacks):
            parts += [spacer] * (i > 0) + [s[min(t, len(s) - 1)]]
        frames.append(np.concatenate(parts, axis=1))
    if labels is None:
        return frames
    header = _label_strip([s.shape[2] for s in stacks], labels, gap)
    return [np.concatenate([header, f], axis=0) for f in frames]


def _label_strip(widths: Sequence[int], labels: Sequence[str], gap: int) -> np.ndarray:
    from PIL import Image, ImageDraw  # Pillow comes with imageio

    strip = Image.new("RGB", (sum(widths) + gap * (len(widths) - 1), 14), "white")
    draw, left = ImageDraw.Draw(strip), 0
    for width, label in zip(widths, labels, strict=True):
        draw.text((left + 2, 2), str(label), fill="black")
        left += width + gap
    return np.asarray(strip, dtype=np.uint8)


def _check_frames(frames: Sequence[np.ndarray]) -> np.ndarray:
    if len(frames) == 0:
        raise ValueError("frames must not be empty")
    arrays = [np.asarray(f) for f in frames]
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:  # np.stack would only say that all input arrays must have the same shape
        raise ValueError(f"frames must be images of one size, got {len(shapes)} shapes: {shapes[:4]}")
    stack = np.stack(arrays)
    if stack.dtype != np.uint8 or stack.ndim != 4 or stack.shape[-1] != 3:
        raise ValueError(f"frames must be [H, W, 3] uint8 images of one size, got {stack.dtype} {stack.shape[1:]}")
    return stack


# A GIF frame's delay is a 16-bit count of 1/100 s: at most 655.35 s.
_GIF_MAX_DELAY = 0xFFFF
# Browsers (Chromium, Firefox, Safari) show a delay of 0 or 1 as 10 (10 fps), some viewers as no delay at all.
_GIF_MIN_DELAY = 2


def _gif_delay(ms: float) -> int:
    return int(ms / 10)  # Pillow's GIF writer takes milliseconds and truncates them so


def _check_fps(fps: float, gif: bool = False) -> float:
    """``fps`` as a Python float (the encoders refuse NumPy floats), if a video can play at it."""
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not 0 < fps < math.inf:
        raise ValueError(f"fps must be a finite number > 0, got {fps!r}")
    if gif and _gif_delay(1000.0 / fps) > _GIF_MAX_DELAY:  # Pillow would raise an OverflowError
        raise ValueError(f"fps must be > {100 / 65536} for a GIF (a GIF frame lasts at most 655.35 s), got {fps!r}")
    if gif and _gif_delay(1000.0 / fps) < _GIF_MIN_DELAY:  # a delay of 0 or 1: browsers play 10 fps instead
        raise ValueError(f"fps must be <= 50 for a GIF (a frame of 0.02 s is the shortest browsers show), got {fps!r}")
    return float(fps)


def _check_gif_runs(stack: np.ndarray, fps: float) -> None:
    """Pillow writes a run of identical frames as one frame lasting the whole run: at a low fps
    that frame can outlast what a GIF frame can hold."""
    same = (stack[1:] == stack[:-1]).all(axis=(1, 2, 3))
    run = longest = 1
    for s in same:
        run = run + 1 if s else 1
        longest = max(longest, run)
    total = sum([1000.0 / fps] * longest)  # Pillow adds the durations up in this order
    if _gif_delay(total) > _GIF_MAX_DELAY:
        raise ValueError(
            f"at fps={fps!r} the {longest} identical frames in a row, which a GIF shows as one frame, "
            f"would last {total / 1000:.1f} s, more than a GIF frame can (655.35 s): raise fps"
        )


def check_video_path(path: str | Path, fps: float = 8.0) -> Path:
    """``path`` as a `Path` if `write_video` can write there at ``fps``: a ``.gif`` or ``.mp4`` name,
    in a folder that exists, that is not itself a folder, else a ValueError. Callers check before
    spending an episode."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise ValueError(f"video path must end in .gif or .mp4, got {path.name!r}")
    if path.is_dir():
        raise ValueError(f"video path {str(path)!r} is a folder, not a file")
    parent = path.resolve().parent
    if not parent.is_dir():
        problem = "is a file, not a folder" if parent.exists() else "does not exist"
        raise ValueError(f"video path {str(path)!r}: the folder {str(path.parent)!r} {problem}")
    _check_fps(fps, gif=suffix == ".gif")
    return path


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: float = 8.0) -> Path:
    """Write frames to ``path``: ``.gif`` (loops forever) or ``.mp4`` (H.264, needs imageio-ffmpeg).

    Args:
        frames: ``[H, W, 3]`` uint8 images of one size.
        path: where, its suffix choosing the format.
        fps: frames per second.

    Returns:
        ``path`` as a `Path`.

    Raises:
        ValueError: bad frames, path or fps (`check_video_path`).
        ImportError: an MP4 without imageio-ffmpeg.
        OSError: the file cannot be written.
    """
    import imageio.v2 as imageio

    path = check_video_path(path, fps)
    stack = _check_frames(frames)
    if path.suffix.lower() == ".gif":
        # Encoded in memory first: an encoder that fails leaves no open file writer behind (imageio's
        # would retry, and fail again, from its __del__).
        path.write_bytes(gif_bytes(stack, fps))
        return path
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "writing MP4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); or write a .gif"
        ) from e
    fps = _check_fps(fps)
    h, w = stack.shape[1:3]  # H.264 with yuv420p needs even sides: pad with white
    stack = np.pad(stack, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), constant_values=255)
    path.open("wb").close()  # a path ffmpeg cannot open is an OSError here: ffmpeg itself only prints it
    try:
        imageio.mimwrite(path, list(stack), format="FFMPEG", fps=fps, codec="libx264", macro_block_size=1, quality=8)
        if path.stat().st_size == 0:
            raise OSError(f"ffmpeg wrote nothing to {str(path)!r} (see its messages above)")
    except BaseException:
        path.unlink(missing_ok=True)  # no empty or half-written video left under the name
        raise
    return path


def frames_to_video_tensor(frames: Sequence[np.ndarray]) -> torch.Tensor:
    """``[1, T, 3, H, W]`` uint8: the layout ``SummaryWriter.add_video`` takes."""
    return torch.from_numpy(_check_frames(frames)).permute(0, 3, 1, 2).unsqueeze(0).contiguous()


def gif_bytes(frames: Sequence[np.ndarray], fps: float = 8.0) -> bytes:
    """An animated GIF (looping) in memory."""
    import imageio.v2 as imageio

    stack = _check_frames(frames)
    fps = _check_fps(fps, gif=True)
    _check_gif_runs(stack, fps)
    buffer = io.BytesIO()
    imageio.mimwrite(buffer, list(stack), format="GIF", duration=1000.0 / fps, loop=0)
    return buffer.getvalue()


def log_video(
    writer: Any, tag: str, frames: Sequence[np.ndarray], global_step: int | None = None, fps: float = 8.0
) -> None:
    """Log ``frames`` (``[H, W, 3]`` uint8) to a ``torch.utils.tensorboard.SummaryWriter`` ``writer`` as
    an animated GIF under ``tag`` at ``global_step`` (the Images tab), at ``fps``."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    stack = _check_frames(frames)
    image = Summary.Image(
        height=stack.shape[1], width=stack.shape[2], colorspace=3, encoded_image_string=gif_bytes(stack, fps)
    )
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), global_step)
