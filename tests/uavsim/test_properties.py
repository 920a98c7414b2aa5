"""Invariants of the batched env, checked on configs and seeds drawn by hypothesis."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.env import AUTORESET_MODES, RESET_MODES
from uavsim.episode_start import launch_can_end, min_episode_length
from uavsim.policies import GreedyFrontierPolicy
from uavsim.rules import BLOCKED

MODES = st.fixed_dictionaries(
    {"reset_mode": st.sampled_from(RESET_MODES), "autoreset_mode": st.sampled_from(AUTORESET_MODES)}
)


@st.composite
def configs(draw):
    h, w = draw(st.integers(4, 14)), draw(st.integers(4, 14))
    launch = draw(st.integers(1, min(h, w, 3)))
    wall_max = draw(st.integers(1, min(h, w)))
    return EnvConfig(
        grid_height=h,
        grid_width=w,
        launch_size=launch,
        num_uavs=draw(st.integers(1, launch * launch)),
        num_obstacles=draw(st.integers(0, 12)),
        obstacle_max_size=draw(st.integers(1, min(h, w, 4))),
        num_walls=draw(st.integers(0, 3)),
        wall_min_length=draw(st.integers(1, wall_max)),
        wall_max_length=wall_max,
        max_steps=draw(st.integers(1, 25)),
        sensor_radius=draw(st.integers(0, 2)),
        obs_radius=draw(st.integers(1, 3)),
        moves=draw(st.sampled_from([4, 8])),
        target_coverage=draw(st.floats(0.3, 1.0)),
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
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1), num_envs=st.integers(1, 6), modes=MODES)
def test_invariants_hold_every_step(cfg, seed, num_envs, modes):
    env = UAVSwarmEnv(cfg, num_envs=num_envs, seed=seed, **modes)
    env.reset()
    next_step = modes["autoreset_mode"] == "next_step"
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
        stepped = ~before["reset_pending"]  # next_step: the others start their next episode now
        # Coverage never decreases within an episode: after-step count >= before-step count.
        after_count = (cov * before["free"].float()).round().long()
        assert (after_count >= before["covered"])[stepped].all()
        # Reward = scale * newly covered fraction - time cost - individual penalties.
        newly = (after_count - before["covered"]).float()
        team = cfg.coverage_reward * newly / before["free"].float() - cfg.time_penalty
        expected = (
            team[:, None]
            - cfg.collision_penalty * info["collisions"].float()
            - cfg.near_miss_penalty * info["near_misses"].float()
        )
        torch.testing.assert_close(reward[stepped], expected[stepped], rtol=1e-5, atol=1e-5)
        # A collision means the UAV asked to move and stayed put.
        done = terminated | truncated
        last = info["final_obs"] if not next_step else {"local": env.observe()["local"]}
        stayed = (last["local"][..., -3:-1] == (before["pos"].float() / env._scale)).all(-1)
        assert (stayed | ~info["collisions"]).all()
        if next_step:  # an ended episode waits for the next step, which restarts it at t = 0
            restarted = before["reset_pending"]
            assert torch.equal(s["reset_pending"], done) and not (done & restarted).any()
            assert torch.equal(s["t"], torch.where(restarted, 0, before["t"] + 1))
            assert not reward[restarted].any()
        else:  # ended episodes restart at t = 0; the others advance by one
            assert torch.equal(s["t"], torch.where(done, 0, before["t"] + 1))
        prev_cov = s["covered"]
    assert prev_cov.shape == (num_envs,)


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1), data=st.data(), modes=MODES)
def test_partial_reset_touches_only_masked_envs(cfg, seed, data, modes):
    num_envs = 5
    env, _ = rollout(cfg, num_envs, seed, steps=3, **modes)
    before = {k: v.clone() for k, v in env.state.items()}
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=num_envs, max_size=num_envs)))
    env.reset(mask)
    for key, value in env.state.items():
        assert torch.equal(value[~mask], before[key][~mask]), key
    assert torch.equal(env.state["episode"], before["episode"] + mask.long())
    assert (env.state["t"][mask] == 0).all() and not env.state["reset_pending"][mask].any()


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_envs=st.integers(1, 8), modes=MODES)
def test_env_does_not_depend_on_batch_size_and_seed_reproduces(seed, num_envs, modes):
    cfg = EnvConfig(grid_height=12, grid_width=12, num_uavs=4, num_obstacles=8, max_steps=15, launch_size=2)
    actions = torch.randint(0, cfg.num_actions, (40, 9, cfg.num_uavs), generator=torch.Generator().manual_seed(seed))

    def play(batch):
        env = UAVSwarmEnv(cfg, num_envs=batch, seed=seed, **modes)
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


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), seed=st.integers(0, 2**31 - 1), autoreset_mode=st.sampled_from(AUTORESET_MODES))
def test_prepared_starts_are_exact_however_soon_episodes_end(cfg, seed, autoreset_mode):
    # A greedy team ends episodes about as soon as the task allows: no episode is shorter than the
    # bound the prepared starts are rebuilt by, and every reset mode plays the same episodes.
    envs = [UAVSwarmEnv(cfg, num_envs=4, seed=seed, reset_mode=m, autoreset_mode=autoreset_mode) for m in RESET_MODES]
    outs = [[env.reset()] for env in envs]
    policy = GreedyFrontierPolicy(envs[0], seed=seed % 1000)
    lengths = []
    for _ in range(3 * cfg.max_steps + 2):
        actions = policy(envs[0])
        for env, out in zip(envs, outs):
            obs, reward, terminated, truncated, info = env.step(actions)
            out += [obs, reward, terminated, truncated]
        lengths += info["episode_length"][terminated | truncated].tolist()
    for out in outs[1:]:
        for a, b in zip(outs[0], out):
            if isinstance(a, dict):
                assert torch.equal(a["local"], b["local"]) and torch.equal(a["state"], b["state"])
            else:
                assert torch.equal(a, b)
    assert lengths and min(lengths) >= min_episode_length(cfg)


def test_the_episode_length_bound_is_tight_enough_to_matter_on_the_default_task():
    # The prepared starts are rebuilt every min_episode_length steps: on the default task that is
    # 18 steps (the 32x32 map cannot be 95 % covered sooner by 10 UAVs starting in one corner).
    assert min_episode_length(EnvConfig()) == 18
    tiny = EnvConfig(
        grid_height=4,
        grid_width=4,
        num_uavs=2,
        num_obstacles=2,
        obstacle_max_size=2,
        launch_size=2,
        sensor_radius=1,
        obs_radius=1,
        state_pool=2,
        target_coverage=0.01,
    )
    assert min_episode_length(tiny) == 1 and launch_can_end(tiny)  # the launch alone covers 1 %
    assert min_episode_length(EnvConfig(max_steps=5)) == 5 and not launch_can_end(EnvConfig())
