"""Walls (`EnvConfig.num_walls`): straight lines one cell thick, of the configured lengths, both ways."""

import torch

from uavsim import EnvConfig
from uavsim.env import UAVSwarmEnv


def test_a_wall_is_one_straight_line_of_the_drawn_length():
    cfg = EnvConfig(
        grid_height=20,
        grid_width=24,
        num_uavs=1,
        launch_size=1,
        num_obstacles=0,
        num_walls=1,
        wall_min_length=5,
        wall_max_length=9,
    )
    env = UAVSwarmEnv(cfg, num_envs=64, seed=3)
    env.reset()
    h, w, p = cfg.grid_height, cfg.grid_width, cfg.pad
    cells = env.state["cells"].view(64, h + 2 * p, w + 2 * p)[:, p : p + h, p : p + w]
    blocked = cells == 2  # [E, H, W] (rules_state's BLOCKED code)
    rows, cols = blocked.any(2).sum(1), blocked.any(1).sum(1)  # rows and columns the wall spans
    length = blocked.sum((1, 2))
    at_launch = ~blocked[:, 0, 0] & (rows + cols > 0)  # a wall through the launch cell loses that cell
    horizontal, vertical = (rows == 1) & (cols == length), (cols == 1) & (rows == length)
    assert bool((horizontal | vertical).all())
    spans = torch.maximum(rows, cols)
    whole = spans == length  # no cell cleared: the wall is contiguous and of a length the config allows
    assert bool(((spans >= 5) & (spans <= 9) | at_launch).all()) and bool(whole.all())
    assert 0 < int(horizontal.sum()) < 64 and 0 < int(vertical.sum()) < 64  # both orientations drawn
    assert len(set(spans.tolist())) == 5  # every length of 5..9


def test_no_walls_by_default_and_lengths_unchecked_then():
    cfg = EnvConfig(
        grid_height=6, grid_width=6, num_uavs=1, launch_size=1, num_obstacles=3, state_pool=3
    )  # walls of 16 > 6
    assert cfg.num_walls == 0
