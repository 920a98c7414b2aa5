"""Drive a batched env and one ReferenceEnv per environment with the same actions, comparing all."""

from __future__ import annotations

import numpy as np
import torch

from uavsim import EnvConfig, UAVSwarmEnv
from uavsim.reference import ReferenceEnv


def assert_obs_equal(batched: dict, refs: list[dict], where: str, dtype: torch.dtype = torch.float32) -> None:
    """Each observation is the reference's float32 one, cast to the env's ``obs_dtype``, exactly."""
    for i, ref in enumerate(refs):
        for key in ("local", "state"):
            got, want = batched[key][i], torch.from_numpy(ref[key])
            assert got.dtype == dtype and want.dtype == torch.float32, (where, key)
            want = want.to(dtype)
            if not torch.equal(got, want):
                bad = torch.nonzero(got != want)[:5].tolist()
                raise AssertionError(f"{where}: env {i} obs[{key!r}] differs at {bad}")


def run_lockstep(
    cfg: EnvConfig,
    num_envs: int,
    seed: int,
    steps: int,
    reset_mode: str,
    partial_reset_every: int = 0,
    action_seed: int = 0,
    autoreset_mode: str = "same_step",
    obs_dtype: torch.dtype = torch.float32,
) -> int:
    """Step both implementations ``steps`` times; return how many episodes ended."""
    env = UAVSwarmEnv(
        cfg, num_envs=num_envs, seed=seed, reset_mode=reset_mode, autoreset_mode=autoreset_mode, obs_dtype=obs_dtype
    )
    refs = [ReferenceEnv(cfg, seed=seed, env_index=i) for i in range(num_envs)]
    obs = env.reset()
    ref_obs = [r.reset() for r in refs]
    assert_obs_equal(obs, ref_obs, "reset", obs_dtype)
    gen = torch.Generator().manual_seed(action_seed)
    next_step = autoreset_mode == "next_step"
    pending = [False] * num_envs  # next_step: the env starts its next episode at this step
    ended = 0
    for t in range(steps):
        if partial_reset_every and t % partial_reset_every == partial_reset_every - 1:
            mask = torch.rand(num_envs, generator=gen) < 0.5
            obs = env.reset(mask)
            ref_obs = [r.reset() if m else o for r, o, m in zip(refs, ref_obs, mask.tolist())]
            pending = [p and not m for p, m in zip(pending, mask.tolist())]
            assert_obs_equal(obs, ref_obs, f"partial reset before step {t}", obs_dtype)
        actions = torch.randint(0, cfg.num_actions, (num_envs, cfg.num_uavs), generator=gen)
        obs, reward, terminated, truncated, info = env.step(actions)
        assert ("final_obs" in info) != next_step
        final = []
        for i, ref in enumerate(refs):
            where = f"step {t} env {i}"
            if pending[i]:  # next_step: this step is the reset
                ref_obs[i], pending[i] = ref.reset(), False
                final.append(ref_obs[i])
                assert not reward[i].any() and not terminated[i] and not truncated[i], where
                assert not info["collisions"][i].any() and not info["near_misses"][i].any(), where
                continue
            r_obs, r_reward, r_term, r_trunc, r_info = ref.step(actions[i].numpy())
            assert np.array_equal(reward[i].numpy(), r_reward), where
            assert bool(terminated[i]) == r_term and bool(truncated[i]) == r_trunc, where
            assert info["coverage"][i].numpy() == r_info["coverage"], where
            assert np.array_equal(info["collisions"][i].numpy(), r_info["collisions"]), where
            assert np.array_equal(info["near_misses"][i].numpy(), r_info["near_misses"]), where
            final.append(r_obs)
            if r_term or r_trunc:
                ended += 1
                assert int(info["episode_length"][i]) == r_info["episode_length"], where
                assert int(info["episode_collisions"][i]) == r_info["episode_collisions"], where
                assert int(info["episode_near_misses"][i]) == r_info["episode_near_misses"], where
                assert info["episode_coverage"][i].numpy() == r_info["episode_coverage"], where
                assert info["episode_return"][i].numpy() == r_info["episode_return"], where
                if next_step:
                    pending[i] = True
                else:
                    r_obs = ref.reset()
            ref_obs[i] = r_obs
        if not next_step:
            assert_obs_equal(info["final_obs"], final, f"final_obs after step {t}", obs_dtype)
        assert_obs_equal(obs, ref_obs, f"obs after step {t}", obs_dtype)
    return ended


# a small task for the env tests (test_env_misc, test_env_state)
SMALL = EnvConfig(grid_height=12, grid_width=12, num_uavs=4, num_obstacles=8, max_steps=30, launch_size=2)


def play(env, actions):
    out = []
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out += [obs["local"], obs["state"], reward, terminated, truncated, info.get("final_obs", obs)["state"]]
    return out
