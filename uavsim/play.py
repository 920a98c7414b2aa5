"""Watch the simulator without training: play one episode with a scripted policy, save a GIF or MP4.

    python -m uavsim.play --policy greedy --seed 0 --out episode.gif
    python -m uavsim.play --policy coordinated --seed 0 --out team.gif
    python -m uavsim.play --policy random --config num_uavs=4 grid_height=16 --steps 50 --out ep.mp4

Prints one line: what the episode reached (coverage, steps, collisions, near misses, return).
``--config key=value`` overrides `EnvConfig` fields (values parsed as YAML scalars, ``maps=PATH`` as
written; an unknown key is an error). Environment ``--env-index`` of seed ``--seed`` is played: the same episode as
``ReferenceEnv(cfg, seed, env_index)``'s first one.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from uavsim.config import EnvConfig
from uavsim.maps import maps_value


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-3`` (no dot) as a string; read it as the float it is, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)

MAX_FRAME_BYTES = 4 * 2**30  # an episode's frames, all held until the video is written


def parse_overrides(items: Sequence[str]) -> dict:
    """``{key: value}`` of ``key=value`` items, values as YAML scalars; a ValueError for another form."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--config expects key=value, got {item!r}")
        key = key.strip()
        # a map path as is, not as YAML: `#`, `: ` and quotes in a path would be read as syntax
        out[key] = maps_value(value) if key == "maps" else yaml.load(value, Loader=_Loader)  # a SafeLoader
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m uavsim.play", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--policy",
        choices=("greedy", "coordinated", "random"),
        default="greedy",
        help="greedy: each UAV to its nearest uncovered cell; coordinated: the UAVs share out the "
        "uncovered cells in an auction (uavsim.coordinated); random: uniform actions",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-index", type=int, default=0, help="which environment of the seed's stream")
    parser.add_argument("--out", default="episode.gif", help="output path, .gif or .mp4")
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE", help="EnvConfig overrides")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: episode end)")
    parser.add_argument("--cell-px", type=int, default=8, help="pixels per grid cell")
    parser.add_argument("--fps", type=float, default=8.0)
    parser.add_argument("--trail", type=int, default=12, help="draw the last K positions of each UAV (0: none)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if not args.out.lower().endswith((".gif", ".mp4")):
        parser.error(f"--out must end in .gif or .mp4, got {args.out!r}")
    if not Path(args.out).resolve().parent.is_dir():  # before torch loads; `check_video_path` below says the rest
        parser.error(f"--out {args.out!r}: the folder {str(Path(args.out).parent)!r} is missing or a file")
    if not 0 < args.fps < math.inf:
        parser.error(f"--fps must be a finite number > 0, got {args.fps}")
    if args.steps is not None and args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    if args.trail < 0:
        parser.error(f"--trail must be >= 0 (0: no trail), got {args.trail}")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.cell_px < 2:
        parser.error(f"--cell-px must be >= 2, got {args.cell_px}")
    try:
        cfg = EnvConfig.from_dict(parse_overrides(args.config))
    except (TypeError, ValueError, yaml.YAMLError) as e:
        parser.error(str(e).splitlines()[0])
    # every frame is kept until the video is written: refuse what would not fit before building anything
    frames = 1 + min(cfg.max_steps, cfg.max_steps if args.steps is None else args.steps)
    frame_bytes = 2 * cfg.grid_height * cfg.grid_width * args.cell_px**2 * 3  # the frames, and their stack to encode
    if frames * frame_bytes > MAX_FRAME_BYTES:
        parser.error(
            f"--cell-px {args.cell_px}: {frames} frames of {cfg.grid_height * args.cell_px}x"
            f"{cfg.grid_width * args.cell_px} pixels would take {frames * frame_bytes / 2**30:.1f} GiB "
            f"(at most {MAX_FRAME_BYTES / 2**30:.0f}): lower --cell-px or --steps"
        )

    from uavsim.env import UAVSwarmEnv  # torch is imported only once the arguments are known to be good
    from uavsim.machine import hardware
    from uavsim.scripted import make_scripted
    from uavsim.video import ReferenceMismatchError, check_video_path, record_episode, write_video

    try:
        check_video_path(args.out, args.fps)  # the GIF frame-length limit and an --out that is a folder
        env = UAVSwarmEnv(cfg, num_envs=1, device=args.device, seed=args.seed, first_env_index=args.env_index)
        print(hardware.banner(env.device, policy=args.policy), file=sys.stderr)
        policy = make_scripted(args.policy, env, seed=args.seed)
        rec = record_episode(env, policy, 0, max_steps=args.steps, cell_px=args.cell_px, trail=args.trail)
        path = write_video(rec.frames, args.out, fps=args.fps)
    except (TypeError, ValueError, ImportError, OSError, ReferenceMismatchError) as e:  # the last: not the device's
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, AssertionError) as e:  # torch's answer to a GPU that is not there
        print(f"error: --device {args.device}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    how = "terminated" if rec.terminated else ("truncated" if rec.ended else "stopped")
    print(
        f"{args.policy} seed={args.seed}: coverage {rec.coverage:.3f} (target {cfg.target_coverage}) after "
        f"{rec.steps} steps, {how}; {rec.collisions} collisions, {rec.near_misses} near misses, "
        f"return {rec.episode_return:.3f} -> {path} ({len(rec.frames)} frames)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
