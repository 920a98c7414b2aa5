"""Devices, reset and autoreset modes, rendering, scripted policies and import hygiene (checkpoints:
`test_env_state.py`)."""

import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.adapters._frames import render_reference
from uavsim.env import AUTORESET_MODES, RESET_MODES
from uavsim.policies import GreedyFrontierPolicy, RandomPolicy
from uavsim.reference import ReferenceEnv
from uavsim.render import render_tiled

from .helpers import SMALL, play


@pytest.mark.parametrize(
    ("device", "error", "message"),
    [
        ("gpu", ValueError, "'gpu' is not a device name: expected 'cpu', 'cuda' or 'cuda:N'"),
        (True, TypeError, "device must be a string such as 'cpu'"),
        pytest.param(
            0,
            ValueError,
            "torch sees no CUDA device",  # torch's convention: an int is a CUDA index
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible"),
        ),
        (None, TypeError, "device must be a string such as 'cpu'"),
        ("meta", ValueError, "runs on 'cpu' or 'cuda' devices, got 'meta'"),
        ("mps", ValueError, "runs on 'cpu' or 'cuda' devices, got 'mps'"),
        pytest.param(
            "cuda",
            ValueError,
            "torch sees no CUDA device",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible"),
        ),
        pytest.param(
            "cuda:64",
            ValueError,
            "'cuda:64': torch sees",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(
                    not torch.cuda.is_available(), reason="the index check needs CUDA (without it: 'no CUDA device')"
                ),
            ],
        ),
        (-1, ValueError, "a CUDA device index must be >= 0, got -1"),
    ],
)
def test_a_device_the_env_cannot_use_is_a_clear_error(device, error, message):
    with pytest.raises(error, match=re.escape(message)):
        UAVSwarmEnv(SMALL, num_envs=2, device=device)


@pytest.mark.parametrize("flag", ["no", None, 0])
def test_check_action_range_must_be_a_bool(flag):
    with pytest.raises(TypeError, match="check_action_range must be a bool"):
        UAVSwarmEnv(SMALL, num_envs=2, check_action_range=flag)


@pytest.mark.parametrize("device", ["cpu:0", torch.device("cpu", 0)])
def test_an_indexed_device_names_the_same_device_as_its_tensors(device):
    # torch.device("cpu:0") != torch.device("cpu"), the device tensors report: the env must accept
    # its own tensors and those of policies built on it (as "cuda" against a tensor's "cuda:0").
    env = UAVSwarmEnv(SMALL, num_envs=3, device=device, seed=0)
    assert env.device == torch.zeros(1, device=device).device
    obs = env.reset()
    for policy in (RandomPolicy(env, seed=0), GreedyFrontierPolicy(env)):
        obs, *_ = env.step(policy(env))
    env.reset(torch.ones(3, dtype=torch.bool, device=device))
    assert obs["local"].device == env.device


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
def test_every_reset_mode_plays_the_same_episodes(autoreset_mode):
    actions = torch.randint(0, SMALL.num_actions, (70, 6, SMALL.num_uavs), generator=torch.Generator().manual_seed(3))
    runs = []
    for mode in RESET_MODES:
        env = UAVSwarmEnv(SMALL, num_envs=6, seed=9, reset_mode=mode, autoreset_mode=autoreset_mode)
        env.reset()
        runs.append(play(env, actions))
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert torch.equal(a, b)


def test_next_step_autoreset_restarts_one_step_later():
    cfg = SMALL.replace(max_steps=2)
    same, nxt = (UAVSwarmEnv(cfg, num_envs=3, seed=5, autoreset_mode=m) for m in AUTORESET_MODES)
    same.reset(), nxt.reset()
    hover = torch.zeros(3, cfg.num_uavs, dtype=torch.int64)
    same.step(hover)
    nxt.step(hover)
    s_obs, _, _, s_trunc, s_info = same.step(hover)  # both end their first episode here
    n_obs, _, _, n_trunc, n_info = nxt.step(hover)
    assert s_trunc.all() and n_trunc.all() and "final_obs" not in n_info
    assert torch.equal(n_obs["state"], s_info["final_obs"]["state"])  # next_step shows the last observation
    assert nxt.state["reset_pending"].all() and (nxt.state["episode"] == 0).all()
    n_obs, reward, terminated, truncated, info = nxt.step(torch.ones_like(hover))  # ignored: this step restarts
    assert torch.equal(n_obs["state"], s_obs["state"]) and torch.equal(n_obs["local"], s_obs["local"])
    assert not reward.any() and not terminated.any() and not truncated.any() and not info["collisions"].any()
    assert (nxt.state["episode"] == 1).all() and (nxt.state["t"] == 0).all() and not nxt.state["reset_pending"].any()


def test_render_shapes_and_content():
    env = UAVSwarmEnv(EnvConfig(), num_envs=4, seed=0)
    env.reset()
    img = env.render(env_index=2, cell_px=6)
    assert img.dtype == np.uint8 and img.shape == (32 * 6, 32 * 6, 3)
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 4  # map, obstacles, coverage and UAVs drawn
    ref = ReferenceEnv(EnvConfig(), seed=0, env_index=2)
    ref.reset()
    assert np.array_equal(img, render_reference(ref, 6))  # the same episode, drawn from the other implementation
    tiled = render_tiled(env, [0, 1, 2, 3], cell_px=2)
    assert tiled.shape == (2 * 64 + 2, 2 * 64 + 2, 3)
    for k, i in enumerate([0, 1, 2, 3]):  # 2 x 2 tiles with 2-pixel white gaps, in the order given
        r, c = divmod(k, 2)
        assert np.array_equal(tiled[r * 66 : r * 66 + 64, c * 66 : c * 66 + 64], env.render(i, 2))
    assert (tiled[64:66] == 255).all() and (tiled[:, 64:66] == 255).all()
    with pytest.raises(ValueError, match="env_index"):
        env.render(env_index=4)


def episode_end_coverage(policy_cls, **kwargs):
    env = UAVSwarmEnv(SMALL, num_envs=16, seed=0)
    env.reset()
    policy = policy_cls(env, **kwargs)
    seen = torch.zeros(16, dtype=torch.bool)
    coverage = torch.zeros(16)
    for _ in range(SMALL.max_steps):
        _, _, terminated, truncated, info = env.step(policy(env))
        first = (terminated | truncated) & ~seen
        coverage = torch.where(first, info["episode_coverage"], coverage)
        seen |= first
    assert seen.all()
    return coverage.mean().item()


def test_greedy_frontier_beats_random():
    greedy = episode_end_coverage(GreedyFrontierPolicy)
    random = episode_end_coverage(RandomPolicy, seed=0)
    assert greedy > random + 0.2, (greedy, random)
    assert greedy >= 0.8


def test_greedy_moves_toward_the_frontier():
    cfg = EnvConfig(
        grid_height=6,
        grid_width=6,
        num_uavs=1,
        num_obstacles=0,
        launch_size=1,
        sensor_radius=0,
        obs_radius=1,
        max_steps=50,
        state_pool=3,
    )
    env = UAVSwarmEnv(cfg, num_envs=1)
    env.reset()
    policy = GreedyFrontierPolicy(env)
    # From (0, 0) with only (0, 0) covered, the nearest uncovered cells are (1, 0) and (0, 1):
    # S (action 2) and E (action 4) tie, and the tie is broken at random.
    picks = {policy(env).item() for _ in range(40)}
    assert picks == {2, 4}


def test_greedy_separates_uavs_that_share_a_cell():
    cfg = EnvConfig(
        grid_height=8,
        grid_width=8,
        num_uavs=2,
        num_obstacles=0,
        launch_size=2,
        sensor_radius=1,
        obs_radius=1,
        max_steps=50,
        state_pool=4,
    )
    env = UAVSwarmEnv(cfg, num_envs=32, seed=0)
    env.reset()
    policy = GreedyFrontierPolicy(env, seed=1)
    shared = []
    for _ in range(12):
        env.step(policy(env))
        pos = env.state["pos"]
        shared.append((pos[:, 0] == pos[:, 1]).all(1).float().mean().item())
    assert max(shared[-6:]) < 0.5  # UAVs do not fly as one


def test_reference_does_not_import_torch():
    code = "import sys; import uavsim.reference as r; r.ReferenceEnv().reset(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("reset_mode", RESET_MODES)
def test_the_episode_index_wraps_at_the_end_of_the_key_range_in_every_reset_path(reset_mode):
    from uavsim.rng import MAX_KEY

    cfg = SMALL.replace(max_steps=1)
    env = UAVSwarmEnv(cfg, num_envs=2, seed=3, reset_mode=reset_mode)
    env.reset()
    fresh = UAVSwarmEnv(cfg, num_envs=2, seed=3).reset()  # episode 0's observation
    for restart in ("autoreset", "reset(mask)", "reset()"):
        state = env.state_dict()
        state["state"]["episode"][:] = MAX_KEY - 1
        env.load_state_dict(state)
        if restart == "autoreset":
            obs, *_ = env.step(torch.zeros(2, cfg.num_uavs, dtype=torch.int64))  # one-step episodes end
        elif restart == "reset(mask)":
            obs = env.reset(torch.tensor([True, True]))
        else:
            obs = env.reset()
        assert env.state["episode"].tolist() == [0, 0], restart
        assert torch.equal(obs["state"], fresh["state"]), restart  # episode 0's maps again


@pytest.mark.parametrize("reset_mode", ["prepared", "sparse", "dense"])
def test_a_partial_reset_right_after_an_autoreset_starts_the_next_episode(reset_mode):
    # Found by hypothesis: the prepared start an autoreset had just used was used again (a replay).
    cfg = EnvConfig(
        grid_height=4,
        grid_width=4,
        num_uavs=1,
        num_obstacles=0,
        max_steps=2,
        launch_size=3,
        sensor_radius=0,
        obs_radius=1,
        target_coverage=0.5,
        state_pool=1,
    )
    env = UAVSwarmEnv(cfg, num_envs=5, seed=0, reset_mode=reset_mode, autoreset_mode="next_step")
    env.reset()
    for _ in range(3):  # truncated at step 2, restarted by step 3
        env.step(torch.zeros(5, 1, dtype=torch.int64))
    before = env.state["episode"].clone()
    mask = torch.tensor([False, False, False, False, True])
    env.reset(mask)
    assert torch.equal(env.state["episode"], before + mask.long())
