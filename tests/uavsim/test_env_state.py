"""The env's state and checkpoints (`uavsim.env_state`, `uavsim.state_checks`): exact resume, each field's
dtype, and `load_state_dict` rejecting what does not fit, with a message naming it."""

import re

import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.env import AUTORESET_MODES, RESET_MODES

from .helpers import SMALL, play


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
def test_state_dict_resumes_exactly(reset_mode, autoreset_mode):
    actions = torch.randint(0, SMALL.num_actions, (60, 5, SMALL.num_uavs), generator=torch.Generator().manual_seed(0))
    modes = dict(reset_mode=reset_mode, autoreset_mode=autoreset_mode)
    env = UAVSwarmEnv(SMALL, num_envs=5, seed=7, **modes)
    env.reset()
    play(env, actions[:30])  # the first episodes end at step 30: next_step saves them pending
    saved = env.state_dict()
    assert saved["state"]["reset_pending"].any() == (autoreset_mode == "next_step")
    tail = play(env, actions[30:])
    other = UAVSwarmEnv(SMALL, num_envs=5, seed=7, **modes)
    other.load_state_dict(saved)
    for a, b in zip(tail, play(other, actions[30:])):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "config",
    [
        EnvConfig(grid_height=8, grid_width=8, num_uavs=2, num_obstacles=4, max_steps=400),  # t wider than counts
        EnvConfig(max_steps=70_000),  # t wider than the default map's counts
        SMALL,
    ],
)
def test_the_state_keeps_each_fields_dtype_where_the_record_widens_it(config):
    env = UAVSwarmEnv(config, num_envs=3, seed=1)
    env.reset()
    env.step(torch.zeros(3, config.num_uavs, dtype=torch.int64))
    state, spec = env.state, env.state_spec()
    assert {k: state[k].dtype for k in spec} == {k: dtype for k, (dtype, _) in spec.items()}
    other = UAVSwarmEnv(config, num_envs=3, seed=1)
    other.load_state_dict(env.state_dict())  # a checkpoint of such a task resumes
    assert all(torch.equal(other.state[k], state[k]) for k in spec)


def test_load_state_dict_rejects_mismatch():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=1)
    env.reset()
    saved = env.state_dict()
    with pytest.raises(ValueError, match="seed"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=2).load_state_dict(saved)
    with pytest.raises(ValueError, match="num_envs"):
        UAVSwarmEnv(SMALL, num_envs=3, seed=1).load_state_dict(saved)
    with pytest.raises(ValueError, match=r"mismatch in the config: max_steps: checkpoint 30, this env 31$"):
        UAVSwarmEnv(SMALL.replace(max_steps=31), num_envs=2, seed=1).load_state_dict(saved)  # named, not 24 fields
    saved["state"]["pos"] = saved["state"]["pos"][:, :2]
    with pytest.raises(ValueError, match="'pos'"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=1).load_state_dict(saved)


@pytest.mark.parametrize(
    "key, corrupt",
    [
        ("pos", lambda v: v + SMALL.grid_height),  # off the map
        ("cells", lambda v: v + 3),  # no such cell code
        ("t", lambda v: v - 1 - SMALL.max_steps),
        ("covered", lambda v: torch.full_like(v, 200)),  # more than the 144 cells (uint8 holds no more than 255)
    ],
)
def test_load_state_dict_rejects_out_of_range_values(key, corrupt):
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=1)
    env.reset()
    saved = env.state_dict()
    saved["state"][key] = corrupt(saved["state"][key])
    other = UAVSwarmEnv(SMALL, num_envs=2, seed=1)
    with pytest.raises(ValueError, match=f"out of range in \\['{key}'\\]"):
        other.load_state_dict(saved)
    with pytest.raises(TypeError, match="state_dict"):
        other.load_state_dict(None)


def corrupt_first_env(v, value):
    v = v.clone()
    v[0] = value
    return v


@pytest.mark.parametrize(
    "key, corrupt",
    [
        ("free", lambda v: v + 1),
        ("free", lambda v: v - 1),
        ("covered", lambda v: v - 1),
        ("pool_blocked", lambda v: v - 7),  # the global state would go negative
        ("pool_blocked", lambda v: v + 1),  # a wrong count, not a negative one
        ("pool_covered", lambda v: corrupt_first_env(v, 0)),
        ("ep_reward", lambda v: corrupt_first_env(v, float("nan"))),
        ("ep_collisions", lambda v: corrupt_first_env(v, -1)),
        ("ep_near_misses", lambda v: corrupt_first_env(v, -1)),
        ("cells (border)", lambda v: corrupt_first_env(v, torch.cat([v[0, :1] * 0, v[0, 1:]]))),  # a border cell FREE
        ("ep_collisions", lambda v: v + 4 * 31),  # more than one per UAV and step
    ],
)
def test_load_state_dict_rejects_counts_that_disagree_with_the_map(key, corrupt):
    actions = torch.randint(0, SMALL.num_actions, (70, 3, SMALL.num_uavs), generator=torch.Generator().manual_seed(1))
    env = UAVSwarmEnv(SMALL, num_envs=3, seed=1)
    env.reset()
    play(env, actions)  # past max_steps: some environments have been reset, and every one has moved
    saved = env.state_dict()
    UAVSwarmEnv(SMALL, num_envs=3, seed=1).load_state_dict(saved)  # the true state loads
    state_key = key.split(" ")[0]
    saved["state"][state_key] = corrupt(saved["state"][state_key])
    with pytest.raises(ValueError, match=f"\\['{re.escape(key)}'\\] disagree with the map"):
        UAVSwarmEnv(SMALL, num_envs=3, seed=1).load_state_dict(saved)


def test_load_state_dict_rejects_a_map_without_free_cells():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=1)
    env.reset()
    saved = env.state_dict()
    saved["state"]["cells"] = torch.full_like(saved["state"]["cells"], 2)  # all BLOCKED
    saved["state"]["free"] = torch.zeros_like(saved["state"]["free"])  # consistent, but coverage would be 0 / 0
    saved["state"]["covered"] = torch.zeros_like(saved["state"]["covered"])
    saved["state"]["pool_blocked"] = torch.full_like(saved["state"]["pool_blocked"], 9)
    saved["state"]["pool_covered"] = torch.zeros_like(saved["state"]["pool_covered"])
    with pytest.raises(ValueError, match="'free'"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=1).load_state_dict(saved)


def test_load_state_dict_rejects_a_pending_reset_where_autoreset_is_same_step():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=1, autoreset_mode="next_step")
    env.reset()
    saved = env.state_dict()
    saved["state"]["reset_pending"][0] = True
    env.load_state_dict(saved)  # next_step writes such states
    with pytest.raises(ValueError, match="out of range in \\['reset_pending'\\]"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=1).load_state_dict(saved)


def test_load_state_dict_rejects_a_clock_at_max_steps_unless_a_restart_waits():
    # a same_step env never holds t == max_steps (the truncated episode restarts in the step); next_step does,
    # with the restart pending. Taken otherwise, a step advanced the clock past max_steps (a uint8 clock at 255
    # wrapped to 0, the episode never truncated).
    cfg = SMALL.replace(max_steps=255)
    env = UAVSwarmEnv(cfg, num_envs=2, seed=1, autoreset_mode="next_step")
    env.reset()
    saved = env.state_dict()
    saved["state"]["t"][0] = cfg.max_steps
    with pytest.raises(ValueError, match="out of range in \\['t'\\]"):
        UAVSwarmEnv(cfg, num_envs=2, seed=1, autoreset_mode="next_step").load_state_dict(saved)
    saved["state"]["reset_pending"][0] = True
    UAVSwarmEnv(cfg, num_envs=2, seed=1, autoreset_mode="next_step").load_state_dict(saved)


def grid_of(state, b):
    p = SMALL.pad
    return state["cells"][b].view(SMALL.grid_height + 2 * p, -1), p


def test_load_state_dict_rejects_a_uav_inside_an_obstacle_or_an_uncovered_footprint():
    env = UAVSwarmEnv(SMALL, num_envs=2, seed=1)
    env.reset()
    saved = env.state_dict()
    inside = {k: v.clone() for k, v in saved["state"].items()}
    grid, p = grid_of(inside, 0)
    row, col = inside["pos"][0, 0].tolist()
    grid[row + p, col + p] = 2  # BLOCKED under UAV 0 (counts and pools made to agree below)
    covered_under = saved["state"]["cells"][0].view_as(grid)[row + p, col + p] == 1
    inside["covered"][0] -= int(covered_under)
    inside["free"][0] -= 1
    block = (
        row * SMALL.state_pool // SMALL.grid_height
    ) * SMALL.state_pool + col * SMALL.state_pool // SMALL.grid_width
    inside["pool_blocked"][0, block] += 1
    inside["pool_covered"][0, block] -= int(covered_under)
    with pytest.raises(ValueError, match="'pos \\(on a blocked cell\\)'"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=1).load_state_dict({**saved, "state": inside})
    uncovered = {k: v.clone() for k, v in saved["state"].items()}
    grid, p = grid_of(uncovered, 1)
    row, col = uncovered["pos"][1, 0].tolist()
    grid[row + p, col + p] = 0  # FREE under UAV 0 of env 1: its footprint is always covered
    uncovered["covered"][1] -= 1
    block = (
        row * SMALL.state_pool // SMALL.grid_height
    ) * SMALL.state_pool + col * SMALL.state_pool // SMALL.grid_width
    uncovered["pool_covered"][1, block] -= 1
    with pytest.raises(ValueError, match="'cells \\(a free cell in a footprint\\)'"):
        UAVSwarmEnv(SMALL, num_envs=2, seed=1).load_state_dict({**saved, "state": uncovered})


def test_read_state_computes_only_the_keys_asked_for(monkeypatch):
    # the planners read the cells and positions each call: without decoding every UAV's memory (most of a
    # whole `state`'s cost), and equal to `state`'s
    from uavsim import state_checks

    env = UAVSwarmEnv(EnvConfig(comm_radius=0), num_envs=3, seed=1)
    with pytest.raises(RuntimeError, match="reset"):
        env.read_state("cells")
    env.reset()
    env.step(torch.zeros(3, env.num_uavs, dtype=torch.int64))
    whole = env.state
    assert "memory" in whole
    keys = tuple(reversed(list(whole)))
    assert all(torch.equal(a, whole[k]) for a, k in zip(env.read_state(*keys), keys))

    def no_decoding(*args):
        raise AssertionError("the memories were decoded")

    monkeypatch.setattr(state_checks, "codes", no_decoding)
    cells, pos = env.read_state("cells", "pos")
    assert torch.equal(cells, whole["cells"]) and torch.equal(pos, whole["pos"])
    with pytest.raises(ValueError, match="'cover'.*covered"):
        env.read_state("cells", "cover")
    a, b = env.read_state("pos", "pos")  # a key named twice: twice, as a tuple unpacking expects
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match=r"state keys are strings, got \['cells'\]"):  # was "unhashable type"
        env.read_state(["cells"])
