"""Walls (`EnvConfig.num_walls`): straight lines one cell thick, of the configured lengths, both ways."""

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
    horizontal, vertical = (rows == 1) & (cols == length), (cols == 1) & (rows == length)
    assert bool((horizontal | vertical).all())  # one straight, contiguous line on every map
    # a wall from the launch cell (0, 0) lost that cell when the launch area was cleared
    clipped = blocked[:, 0, 1] | blocked[:, 1, 0]
    drawn = length[~clipped]
    assert len(drawn) > 48 and bool(((drawn >= 5) & (drawn <= 9)).all())
    assert set(drawn.tolist()) == {5, 6, 7, 8, 9}  # every allowed length is drawn
    assert 0 < int(horizontal.sum()) < 64 and 0 < int(vertical.sum()) < 64  # both orientations drawn


def test_no_walls_by_default_and_their_lengths_unchecked_then():
    # the default wall_max_length (16) does not fit a 6x6 map: checked only when num_walls > 0
    cfg = EnvConfig(grid_height=6, grid_width=6, num_uavs=1, launch_size=1, num_obstacles=3, state_pool=3)
    assert cfg.num_walls == 0
