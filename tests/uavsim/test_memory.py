"""Onboard memory and range-limited sharing (`uavsim.memory`, ``EnvConfig.comm_radius``)."""

import pytest
import torch

from tests.uavsim.helpers import run_lockstep
from uavsim import EnvConfig, UAVSwarmEnv, rules
from uavsim.env import AUTORESET_MODES, RESET_MODES
from uavsim.memory import SEEN, known_counts

# Episodes of 6 steps at most: every reset path runs within a few dozen steps.
SMALL = EnvConfig(
    grid_height=10,
    grid_width=12,
    num_uavs=3,
    num_obstacles=6,
    max_steps=6,
    launch_size=2,
    sensor_radius=1,
    obs_radius=2,
    state_pool=4,
    comm_radius=0,
)


def truth(env: UAVSwarmEnv) -> torch.Tensor:
    """``[B, 1, H * W]`` the memory code of every map cell if it were seen now (4 + covered + 3 blocked)."""
    cfg, p = env.config, env.config.pad
    cells = env.state["cells"].view(-1, cfg.grid_height + 2 * p, cfg.grid_width + 2 * p)
    inside = cells[:, p:-p, p:-p].reshape(cells.shape[0], 1, -1)
    return SEEN + (inside == 1).to(torch.uint8) + 3 * (inside == 2).to(torch.uint8)


def in_window(env: UAVSwarmEnv) -> torch.Tensor:
    """``[B, N, H * W]`` bool: the map cells in each UAV's observation window now."""
    cfg = env.config
    rows = torch.arange(cfg.grid_height)[:, None].expand(-1, cfg.grid_width).reshape(-1)
    cols = torch.arange(cfg.grid_width)[None, :].expand(cfg.grid_height, -1).reshape(-1)
    pos = env.state["pos"].long()
    near_row = (rows - pos[..., 0:1]).abs() <= cfg.obs_radius
    return near_row & ((cols - pos[..., 1:2]).abs() <= cfg.obs_radius)


def test_memory_starts_with_what_each_uav_sees_at_launch_and_grows_monotonically():
    env = UAVSwarmEnv(SMALL.replace(max_steps=40), num_envs=4, seed=1)
    env.reset()
    assert env.local_obs_dim == 3 * 25 + 3 + 2 * 16 + 3 and env.state["memory"].shape == (4, 3, 120)
    memory, windows = env.state["memory"].clone(), in_window(env)
    assert torch.equal(memory, torch.where(windows, truth(env), 0))  # comm_radius 0: its own launch window
    seen = windows
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):  # within the episode (max_steps 40, target not reached)
        env.step(torch.randint(0, SMALL.num_actions, (4, 3), generator=gen))
        now = env.state["memory"]
        assert (now >= memory).all()  # codes only grow: unknown < free < covered < blocked
        seen = seen | in_window(env)
        assert torch.equal(now != 0, seen)  # comm_radius 0: exactly what it saw itself
        assert (torch.where(in_window(env), now, truth(env)) == truth(env)).all()  # its window is current
        memory = now.clone()


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
def test_memory_resets_with_the_episode_in_every_mode(reset_mode, autoreset_mode):
    env = UAVSwarmEnv(SMALL, num_envs=5, seed=2, reset_mode=reset_mode, autoreset_mode=autoreset_mode)
    env.reset()
    gen = torch.Generator().manual_seed(1)
    pending = torch.zeros(5, dtype=torch.bool)  # next_step: restarts at the next step
    starts = 0
    for t in range(20):
        if t == 9:  # a partial reset too
            restarted = torch.tensor([True, False, True, False, False])
            env.reset(restarted)
            pending &= ~restarted
        else:
            _, _, terminated, truncated, _ = env.step(torch.randint(0, SMALL.num_actions, (5, 3), generator=gen))
            ended = terminated | truncated
            restarted, pending = (ended, pending) if autoreset_mode == "same_step" else (pending, ended)
        fresh = torch.where(in_window(env), truth(env), 0)  # comm_radius 0: the launch windows only
        assert torch.equal(env.state["memory"][restarted], fresh[restarted]), t
        starts += int(restarted.sum())
    assert starts >= 5


@pytest.mark.parametrize("comm_radius", [1, 2])  # shorter than the launch square's spread: not everyone in range
@pytest.mark.parametrize("reset_mode", RESET_MODES)
def test_a_next_step_restart_shares_the_launch_windows_once(reset_mode, comm_radius):
    # the prepared start holds the launch's share; the restart's hover step shared it a second hop
    cfg = EnvConfig(comm_radius=comm_radius, max_steps=3)
    ended = run_lockstep(cfg, num_envs=3, seed=0, steps=12, reset_mode=reset_mode, autoreset_mode="next_step")
    assert ended >= 6


def test_comm_radius_past_the_map_makes_all_memories_equal_after_a_step():
    env = UAVSwarmEnv(SMALL.replace(comm_radius=100, max_steps=40), num_envs=3, seed=4)
    env.reset()
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        env.step(torch.randint(0, SMALL.num_actions, (3, 3), generator=gen))
        memory = env.state["memory"]
        assert torch.equal(memory, memory[:, :1].expand_as(memory))
        assert torch.equal(memory != 0, (memory != 0).any(1, keepdim=True).expand_as(memory))


def two_uavs_apart(gap: int, comm_radius: int) -> UAVSwarmEnv:
    """Two UAVs on row 1 of an empty 3 x 14 map, ``gap`` columns apart, memories empty (a loaded state)."""
    cfg = EnvConfig(
        grid_height=3,
        grid_width=14,
        num_uavs=2,
        num_obstacles=0,
        obstacle_max_size=1,
        launch_size=2,
        sensor_radius=0,
        obs_radius=1,
        state_pool=1,
        comm_radius=comm_radius,
    )
    env = UAVSwarmEnv(cfg, num_envs=1)
    env.reset()
    d = env.state_dict()
    s, wp = d["state"], cfg.grid_width + 2 * cfg.pad
    s["pos"][0] = torch.tensor([[1, 1], [1, 1 + gap]], dtype=torch.int16)
    s["cells"].zero_()
    s["cells"].view(-1, wp)[[0, -1]] = 2  # the blocked border
    s["cells"].view(-1, wp)[:, [0, -1]] = 2
    s["cells"][0, ((s["pos"][0, :, 0] + 1) * wp + s["pos"][0, :, 1] + 1).long()] = 1  # their footprints
    s["covered"][0] = s["pool_covered"][0, 0] = (s["cells"] == 1).sum()  # one cell if they share it
    s["memory"].zero_()
    env.load_state_dict(d)
    return env


@pytest.mark.parametrize("gap, shared", [(3, True), (4, False)])
def test_two_uavs_share_only_within_comm_radius_chebyshev(gap, shared):
    env = two_uavs_apart(gap, comm_radius=3)
    env.step(torch.zeros(1, 2, dtype=torch.int64))  # hover: each senses its window, then shares
    memory = env.state["memory"][0].view(2, 3, 14) != 0
    assert memory[0, :, 1 + gap].all() == shared  # UAV 0 knows UAV 1's cell only if it was in range
    assert torch.equal(memory[0], memory[1]) == shared
    assert memory[0, :, :3].all() and memory[1, :, gap : gap + 3].all()  # each its own window


def test_comm_radius_zero_shares_nothing_even_on_one_cell():
    env = two_uavs_apart(0, comm_radius=0)
    env.step(torch.tensor([[0, 4]]))  # UAV 1 moves east: the two windows differ
    memory = env.state["memory"][0].view(2, 3, 14) != 0
    assert memory[1, :, 3].all() and not memory[0, :, 3].any()


def test_the_pooled_memory_is_the_local_observations_tail():
    env = UAVSwarmEnv(SMALL.replace(comm_radius=2), num_envs=2, seed=3)
    obs = env.reset()
    for _ in range(4):
        obs = env.step(torch.randint(0, SMALL.num_actions, (2, 3)))[0]
    block = torch.as_tensor(rules.block_of_cell(env.config))  # uneven blocks: 10 x 12 cells in 4 x 4
    cells = torch.bincount(block, minlength=16).float()
    for code, part in ((SEEN | 3, 0), (SEEN | 1, 1)):
        known = torch.zeros(2, 3, 16).index_add_(2, block, (env.state["memory"] == code).float()) / cells
        start = 3 * 25 + 3 + 16 * part
        assert torch.equal(obs["local"][..., start : start + 16], known)


def counts_agree(env: UAVSwarmEnv) -> bool:
    """Whether the block counts the step keeps (the record's ``known``, the live state's and the
    prepared starts') equal a full recount of the memories."""
    lay = env._lay
    records = [env._buf] + ([env._prep_buf] if env.reset_mode != "sparse" else [])
    views = [lay.record.views(buf) for buf in records]
    return all(torch.equal(v["known"], known_counts(lay, v["memory"])) for v in views)


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
@pytest.mark.parametrize(
    "comm_radius, state_pool", [(0, 4), (0, 1), (2, 4)], ids=["own", "own-int16-counts", "radius-2"]
)
def test_the_kept_block_counts_equal_a_full_recount_after_every_step(
    reset_mode, autoreset_mode, comm_radius, state_pool
):
    # comm_radius 0 updates them from the windows' changes only: a drift would show here.
    cfg = SMALL.replace(comm_radius=comm_radius, state_pool=state_pool)
    if state_pool == 1:  # one block of 17 x 16 = 272 cells: the counts are int16
        cfg = cfg.replace(grid_height=17, grid_width=16)
    env = UAVSwarmEnv(cfg, num_envs=4, seed=7, reset_mode=reset_mode, autoreset_mode=autoreset_mode)
    env.reset()
    assert counts_agree(env)
    assert (state_pool == 1) == (env._lay.record.fields["known"].dtype == torch.int16)
    gen = torch.Generator().manual_seed(3)
    for t in range(40):  # episodes of 6 steps at most: every env restarts several times
        if t in (9, 23):  # partial resets too
            env.reset(torch.tensor([True, False, t == 23, False]))
        else:
            env.step(torch.randint(0, cfg.num_actions, (4, cfg.num_uavs), generator=gen))
        assert counts_agree(env), t


@pytest.mark.parametrize("comm_radius", [0, 3])
def test_state_dict_round_trip_continues_exactly(comm_radius):
    cfg = SMALL.replace(comm_radius=comm_radius, max_steps=40)
    env = UAVSwarmEnv(cfg, num_envs=3, seed=5)
    env.reset()
    gen = torch.Generator().manual_seed(4)
    for _ in range(5):
        env.step(torch.randint(0, cfg.num_actions, (3, 3), generator=gen))
    saved = env.state_dict()
    assert set(saved["state"]) == set(env.state)  # the block counts are derived, not saved
    again = UAVSwarmEnv(cfg, num_envs=3, seed=5)
    again.reset()
    again.load_state_dict(saved)
    assert counts_agree(again) and torch.equal(again._v["known"], env._v["known"])
    for _ in range(50):  # past the episodes' ends (the target or max_steps): the restarts too
        actions = torch.randint(0, cfg.num_actions, (3, 3), generator=gen)
        assert torch.equal(env.step(actions)[0]["local"], again.step(actions)[0]["local"])
        assert all(torch.equal(x, again.state[k]) for k, x in env.state.items())
        assert torch.equal(again._v["known"], env._v["known"])


def test_load_state_dict_rejects_a_memory_that_disagrees_with_the_map():
    env = UAVSwarmEnv(SMALL.replace(max_steps=40), num_envs=2, seed=6)
    env.reset()
    d = env.state_dict()
    d["state"]["memory"][0, 0] = SEEN | 3  # blocked everywhere: the launch area is free
    with pytest.raises(ValueError, match="memory"):
        env.load_state_dict(d)
    d = env.state_dict()
    del d["state"]["memory"]
    with pytest.raises(ValueError, match="memory"):
        env.load_state_dict(d)


def test_no_memory_is_the_default_and_keeps_the_observation():
    cfg = EnvConfig()
    assert cfg.comm_radius is None and cfg.local_obs_dim == 150
    env = UAVSwarmEnv(cfg, num_envs=1)
    env.reset()
    assert "memory" not in env.state and "memory" not in env._lay.record.fields


@pytest.mark.parametrize("value, error", [(-1, ValueError), ("3", TypeError), (True, TypeError), (2.5, TypeError)])
def test_bad_comm_radius_values_are_errors_naming_the_key(value, error):
    with pytest.raises(error, match="comm_radius"):
        EnvConfig(comm_radius=value)
    with pytest.raises(error, match="comm_radius"):
        EnvConfig.from_dict({"comm_radius": value})


def test_the_step_with_memory_reads_nothing_back_to_the_host(monkeypatch):
    env = UAVSwarmEnv(SMALL.replace(comm_radius=2), num_envs=4, check_action_range=False)
    env.reset()
    actions = [torch.randint(0, SMALL.num_actions, (4, 3)) for _ in range(14)]

    def forbid(*args, **kwargs):
        raise AssertionError("host read inside the step")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero"):
            m.setattr(torch.Tensor, name, forbid)
        for a in actions:  # episodes end and restart, prepared starts are rebuilt
            env.step(a)
