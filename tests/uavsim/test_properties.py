"""Invariants of the batched env, checked on configs and seeds drawn by hypothesis."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.rules import BLOCKED


@st.composite
def configs(draw):
    h, w = draw(st.integers(4, 14)), draw(st.integers(4, 14))
    launch = draw(st.integers(1, min(h, w, 3)))
    return EnvConfig(
        grid_height=h, grid_width=w, launch_size=launch,
        num_uavs=draw(st.integers(1, launch * launch)),
        num_obstacles=draw(st.integers(0, 12)),
        obstacle_max_size=draw(st.integers(1, min(h, w, 4))),
        max_steps=draw(st.integers(1, 25)),
        sensor_radius=draw(st.integers(0, 2)), obs_radius=draw(st.integers(1, 3)),
        moves=draw(st.sampled_from([4, 8])), target_coverage=draw(st.floats(0.3, 1.0)),
        state_pool=draw(st.integers(1, min(h, w, 4))),
    )


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rollout(cfg, num_envs, seed, steps, action_seed=0, **kwargs):
    env = UAVSwarmEnv(cfg, num_envs=num_envs, seed=seed, **kwargs)
    obs = env.reset()
    gen = torch.Generator().manual_seed(action_seed)
    out = [obs]
    for _ in range(steps):
        actions = torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen)
        out.append(env.step(actions))
    return env, out


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1), num_envs=st.integers(1, 6))
def test_invariants_hold_every_step(cfg, seed, num_envs):
    env = UAVSwarmEnv(cfg, num_envs=num_envs, seed=seed)
    env.reset()
    gen = torch.Generator().manual_seed(seed % 1000)
    prev_cov = env.state["covered"].clone()
    for _ in range(2 * cfg.max_steps + 3):
        before = {k: v.clone() for k, v in env.state.items()}
        actions = torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen)
        _, reward, terminated, truncated, info = env.step(actions)
        assert not (terminated & truncated).any()
        s = env.state
        pos = s["pos"]
        assert ((pos[..., 0] >= 0) & (pos[..., 0] < cfg.grid_height)).all()
        assert ((pos[..., 1] >= 0) & (pos[..., 1] < cfg.grid_width)).all()
        assert (s["cells"].gather(1, env._flat(pos)) != BLOCKED).all()  # never inside an obstacle
        cov = info["coverage"]
        assert ((cov >= 0) & (cov <= 1)).all()
        # Coverage never decreases within an episode: after-step count >= before-step count.
        after_count = (cov * before["free"].float()).round().long()
        assert (after_count >= before["covered"]).all()
        # Reward = scale * newly covered fraction - time cost - individual penalties.
        newly = (after_count - before["covered"]).float()
        team = cfg.coverage_reward * newly / before["free"].float() - cfg.time_penalty
        expected = (team[:, None] - cfg.collision_penalty * info["collisions"].float()
                    - cfg.near_miss_penalty * info["near_misses"].float())
        torch.testing.assert_close(reward, expected, rtol=1e-5, atol=1e-5)
        # A collision means the UAV asked to move and stayed put.
        done = terminated | truncated
        stayed = (info["final_obs"]["local"][..., -3:-1] == (before["pos"].float() / env._scale)).all(-1)
        assert (stayed | ~info["collisions"]).all()
        # Ended episodes restart at t = 0; the others advance by one.
        assert torch.equal(s["t"], torch.where(done, 0, before["t"] + 1))
        prev_cov = s["covered"]
    assert prev_cov.shape == (num_envs,)


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_partial_reset_touches_only_masked_envs(cfg, seed, data):
    num_envs = 5
    env, _ = rollout(cfg, num_envs, seed, steps=3)
    before = {k: v.clone() for k, v in env.state.items()}
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=num_envs, max_size=num_envs)))
    env.reset(mask)
    for key, value in env.state.items():
        assert torch.equal(value[~mask], before[key][~mask]), key
    assert torch.equal(env.state["episode"], before["episode"] + mask.long())
    assert (env.state["t"][mask] == 0).all()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_envs=st.integers(1, 8))
def test_env_does_not_depend_on_batch_size_and_seed_reproduces(seed, num_envs):
    cfg = EnvConfig(grid_height=12, grid_width=12, num_uavs=4, num_obstacles=8, max_steps=15, launch_size=2)
    actions = torch.randint(0, cfg.num_actions, (40, 9, cfg.num_uavs), generator=torch.Generator().manual_seed(seed))

    def play(batch):
        env = UAVSwarmEnv(cfg, num_envs=batch, seed=seed)
        frames = [env.reset()["state"]]
        for a in actions[:, :batch]:
            obs, reward, terminated, truncated, _ = env.step(a.contiguous())
            frames += [obs["state"], obs["local"].flatten(1), reward, terminated[:, None], truncated[:, None]]
        return frames

    big, small, again = play(9), play(num_envs), play(num_envs)
    for b, s, a in zip(big, small, again):
        assert torch.equal(s, a)  # same seed, same trajectories
        assert torch.equal(s, b[:num_envs])  # environment i is the same in any batch size
    other = UAVSwarmEnv(cfg, num_envs=num_envs, seed=(seed + 1) % 2**31).reset()["state"]
    assert not torch.equal(other, small[0])  # and another seed gives other maps


def test_first_env_index_offsets_the_episode_stream():
    cfg = EnvConfig()
    whole = UAVSwarmEnv(cfg, num_envs=8, seed=4).reset()
    tail = UAVSwarmEnv(cfg, num_envs=3, seed=4, first_env_index=5).reset()
    assert torch.equal(tail["state"], whole["state"][5:])
    assert torch.equal(tail["local"], whole["local"][5:])
