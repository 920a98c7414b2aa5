"""The actor's heading to the nearest uncovered block, against a direct computation from the env."""

from __future__ import annotations

import math

import torch

from agents.algo.heading import MapHeading
from uavsim import EnvConfig
from uavsim.env import UAVSwarmEnv


def test_heading_points_at_the_nearest_block_with_uncovered_free_cells():
    cfg = EnvConfig(grid_height=12, grid_width=10, num_uavs=3, num_obstacles=6, state_pool=4, launch_size=2)
    env = UAVSwarmEnv(cfg, num_envs=5, seed=2, device="cpu")
    obs = env.reset()
    for _ in range(7):
        obs, *_ = env.step(torch.randint(0, cfg.num_actions, (5, 3)))
    heading = MapHeading(cfg)(obs["state"])
    assert heading.shape == (5, 3, 3)
    cells = env.state["cells"].view(5, cfg.grid_height + 2 * cfg.pad, -1)[:, cfg.pad : -cfg.pad, cfg.pad : -cfg.pad]
    pos = env.state["pos"]
    for b in range(5):
        blocks = {}  # block -> (sum of rows, sum of cols, cells, uncovered free cells)
        for r in range(cfg.grid_height):
            for c in range(cfg.grid_width):
                k = (r * 4 // cfg.grid_height, c * 4 // cfg.grid_width)
                sr, sc, m, u = blocks.get(k, (0, 0, 0, 0))
                blocks[k] = (sr + r, sc + c, m + 1, u + int(cells[b, r, c] == 0))
        centres = [(sr / m, sc / m) for sr, sc, m, u in blocks.values() if u > 0]
        for i in range(3):
            r, c = pos[b, i].tolist()
            best = min(centres, key=lambda x: math.hypot(x[0] - r, x[1] - c))
            expected = [(best[0] - r) / 11, (best[1] - c) / 9, math.hypot(best[0] - r, best[1] - c) / math.hypot(11, 9)]
            torch.testing.assert_close(heading[b, i], torch.tensor(expected), atol=1e-4, rtol=0)


def test_heading_is_zero_when_every_free_cell_is_covered():
    cfg = EnvConfig(grid_height=8, grid_width=8, num_uavs=2, num_obstacles=3, state_pool=4, launch_size=2)
    p2 = 16
    state = torch.zeros(2, cfg.state_dim)
    state[:, :p2] = 0.25  # a quarter of each block blocked, the rest covered
    state[:, p2 : 2 * p2] = 0.75
    state[:, 2 * p2 : 2 * p2 + 4] = 0.5
    assert torch.equal(MapHeading(cfg)(state), torch.zeros(2, 2, 3))
    assert list(MapHeading(cfg).state_dict()) == []  # nothing to checkpoint


def test_heading_is_exact_from_a_bfloat16_state():
    # Positions in a bf16 state are rounded fractions of the map's size: the heading rounds them
    # back to whole cells, so it equals the float32 state's heading exactly (the trainer's
    # observations are bf16), ties included (lowest block index).
    cfg = EnvConfig()
    env = UAVSwarmEnv(cfg, num_envs=64, seed=5, device="cpu")
    obs, heading = env.reset(), MapHeading(cfg)
    for _ in range(40):
        obs, *_ = env.step(torch.randint(0, cfg.num_actions, (64, cfg.num_uavs)))
        assert torch.equal(heading(obs["state"].bfloat16()), heading(obs["state"]))


def test_squared_distances_fit_their_integer_tables():
    small, large = MapHeading(EnvConfig()), MapHeading(EnvConfig(grid_height=200, grid_width=150, num_obstacles=10))
    assert small.sq_dtype == torch.int16 and large.sq_dtype == torch.int32
    for h in (small, large):  # "far" must exceed every real squared distance, and fit the dtype
        assert h.far > int(h.row_sq.max()) + int(h.col_sq.max())
        assert h.far <= torch.iinfo(h.sq_dtype).max


# What DDP can broadcast when it wraps a module: gloo and NCCL take no int16 or other odd widths.
COLLECTIVE_DTYPES = {
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.bool,
}


def test_every_buffer_of_the_networks_can_be_broadcast_by_ddp(make_config):
    from agents.algo.learner import build_learner

    learner = build_learner(make_config("model.actor_shared_map=true"), torch.device("cpu"))
    assert any(isinstance(m, MapHeading) for m in learner.actor.modules())
    for net in (learner.actor, learner.critic):
        odd = {name: b.dtype for name, b in net.named_buffers() if b.dtype not in COLLECTIVE_DTYPES}
        assert not odd, f"buffers DDP cannot broadcast: {odd}"
