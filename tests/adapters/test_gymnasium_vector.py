"""CoverageVectorEnv: Gymnasium 1.x vector API over the batched env, against ReferenceEnv episodes."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import uavsim  # noqa: F401 -- registers the ids
from tests.adapters.helpers import EASY, SMALL, as_np, assert_obs_row
from uavsim import rules
from uavsim.adapters.gymnasium_vector import CoverageVectorEnv
from uavsim.reference import ReferenceEnv


def test_make_vec_gives_the_batched_env():
    env = gym.make_vec("uavsim/Coverage-v0", num_envs=3, config=SMALL.to_dict())
    assert isinstance(env, CoverageVectorEnv)
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert env.num_envs == 3 and env.swarm.config == SMALL
    assert env.single_action_space == gym.spaces.MultiDiscrete([SMALL.num_actions] * SMALL.num_uavs)
    assert env.action_space.shape == (3, SMALL.num_uavs)
    assert env.single_observation_space["local"].shape == (SMALL.num_uavs, SMALL.local_obs_dim)
    assert env.observation_space["state"].shape == (3, SMALL.state_dim)
    same = gym.make_vec("uavsim/Coverage-v0", num_envs=3, vectorization_mode="vector_entry_point", config=SMALL)
    assert isinstance(same, CoverageVectorEnv)


@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_episodes_match_reference_with_same_step_autoreset(output):
    """Step, autoreset and partial reset (options['reset_mask']) against one ReferenceEnv per env."""
    num_envs, seed = 4, 5
    env = CoverageVectorEnv(num_envs, EASY, seed=seed, output=output)
    env.action_space.seed(0)
    refs = [ReferenceEnv(EASY, seed=seed, env_index=i) for i in range(num_envs)]
    obs, _ = env.reset()
    ref_obs = [r.reset() for r in refs]
    kind = torch.Tensor if output == "torch" else np.ndarray
    ends = {"terminated": 0, "truncated": 0}
    for t in range(45):
        if t == 17:
            mask = np.array([True, False, False, True])
            obs, _ = env.reset(options={"reset_mask": mask})
            ref_obs = [r.reset() if m else o for r, o, m in zip(refs, ref_obs, mask)]
        for i in range(num_envs):
            assert_obs_row(obs, i, ref_obs[i], f"obs before step {t}")
        actions = env.action_space.sample()
        obs, rewards, terminated, truncated, infos = env.step(actions)
        assert isinstance(rewards, kind) and isinstance(obs["local"], kind) and isinstance(infos["_episode"], kind)
        for i, ref in enumerate(refs):
            r_obs, r_reward, r_term, r_trunc, r_info = ref.step(actions[i])
            assert as_np(rewards[i]) == rules.mean_return(r_reward)
            assert np.array_equal(as_np(infos["uav_rewards"][i]), r_reward)
            assert bool(terminated[i]) == r_term and bool(truncated[i]) == r_trunc
            assert bool(infos["_final_obs"][i]) == bool(infos["_episode"][i]) == (r_term or r_trunc)
            assert as_np(infos["coverage"][i]) == r_info["coverage"] and bool(infos["_coverage"][i])
            if r_term or r_trunc:
                ends["terminated" if r_term else "truncated"] += 1
                assert_obs_row(infos["final_obs"], i, r_obs, f"final_obs at step {t}")
                assert int(infos["episode"]["l"][i]) == r_info["episode_length"]
                # counts as int64: the state's uint8 wrapped in a user's arithmetic and torch's mean refused it
                assert str(infos["episode"]["l"].dtype).endswith("int64")
                assert str(infos["final_info"]["episode_collisions"].dtype).endswith("int64")
                assert int(infos["episode"]["collisions"][i]) == r_info["episode_collisions"]
                assert as_np(infos["episode"]["coverage"][i]) == r_info["episode_coverage"]
                np.testing.assert_allclose(as_np(infos["episode"]["r"][i]), r_info["episode_return"], rtol=1e-6)
                assert bool(infos["_final_info"][i]) and bool(infos["final_info"]["_episode_length"][i])
                # the single env's info at the episode's end, key for key (they were episode_r, episode_l)
                final = {k: as_np(v[i]) for k, v in infos["final_info"].items() if not k.startswith("_")}
                assert sorted(final) == sorted({*r_info, "uav_rewards"} - {"final_obs"})  # as CoverageReferenceEnv
                assert final["episode_return"] == r_info["episode_return"]
                r_obs = ref.reset()
            ref_obs[i] = r_obs
    assert min(ends.values()) >= 2, ends  # both kinds of episode end went through the autoreset
    if output == "numpy":
        assert env.observation_space.contains(obs)


def test_seeded_reset_restarts_the_stream():
    a = CoverageVectorEnv(2, SMALL, seed=0)
    a.reset()
    a.step(torch.zeros(2, SMALL.num_uavs, dtype=torch.int64))
    obs, _ = a.reset(seed=3)
    ref = ReferenceEnv(SMALL, seed=3, env_index=1).reset()
    assert_obs_row(obs, 1, ref, "seeded reset")
    assert a.np_random_seed == 3  # as Gymnasium's vector envs keep it


@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_episodes_match_reference_with_next_step_autoreset(output):
    """Gymnasium's NEXT_STEP: the step after an episode's end starts the next one (actions ignored, reward 0)."""
    num_envs, seed = 3, 2
    env = gym.make_vec(
        "uavsim/Coverage-v0", num_envs=num_envs, config=EASY, seed=seed, output=output, autoreset_mode="next_step"
    )
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert CoverageVectorEnv(1, EASY).metadata["autoreset_mode"] is AutoresetMode.SAME_STEP  # per instance
    env.action_space.seed(1)
    refs = [ReferenceEnv(EASY, seed=seed, env_index=i) for i in range(num_envs)]
    obs, _ = env.reset()
    ref_obs, pending, restarts = [r.reset() for r in refs], [False] * num_envs, 0
    for t in range(40):
        actions = env.action_space.sample()
        obs, rewards, terminated, truncated, infos = env.step(actions)
        assert "final_obs" not in infos and "final_info" not in infos
        for i, ref in enumerate(refs):
            if pending[i]:
                ref_obs[i], pending[i], restarts = ref.reset(), False, restarts + 1
                assert as_np(rewards[i]) == 0 and not terminated[i] and not truncated[i]
            else:
                ref_obs[i], r_reward, r_term, r_trunc, r_info = ref.step(actions[i])
                assert as_np(rewards[i]) == rules.mean_return(r_reward)
                assert bool(terminated[i]) == r_term and bool(truncated[i]) == r_trunc
                assert bool(infos["_episode"][i]) == (r_term or r_trunc)
                if r_term or r_trunc:
                    assert int(infos["episode"]["l"][i]) == r_info["episode_length"]
                    pending[i] = True
            assert_obs_row(obs, i, ref_obs[i], f"obs after step {t}")
    assert restarts >= num_envs


def test_gymnasiums_vector_observation_wrappers_take_the_next_step_env():
    env = CoverageVectorEnv(2, SMALL, output="numpy", autoreset_mode="next_step")
    wrapped = gym.wrappers.vector.NormalizeObservation(gym.wrappers.vector.FlattenObservation(env))
    obs, _ = wrapped.reset(seed=0)
    for _ in range(3):
        obs, *_ = wrapped.step(wrapped.action_space.sample())
    assert obs.shape == (2, SMALL.num_uavs * SMALL.local_obs_dim + SMALL.state_dim)
    with pytest.raises(ValueError, match="NEXT_STEP"):  # Gymnasium's own refusal of the default
        gym.wrappers.vector.FlattenObservation(CoverageVectorEnv(2, SMALL, output="numpy"))
    with pytest.raises(ValueError, match="autoreset_mode must be 'same_step' or 'next_step', got 'disabled'"):
        CoverageVectorEnv(2, SMALL, autoreset_mode="disabled")
    assert CoverageVectorEnv(1, SMALL, autoreset_mode=AutoresetMode.NEXT_STEP).swarm.autoreset_mode == "next_step"


def test_sync_and_async_modes_run_the_reference_env():
    env = gym.make_vec("uavsim/Coverage-v0", num_envs=2, vectorization_mode="sync", config=SMALL)
    obs, _ = env.reset(seed=7)
    assert isinstance(obs["local"], np.ndarray) and obs["local"].shape == (2, SMALL.num_uavs, SMALL.local_obs_dim)
    # Gymnasium seeds copy i with seed + i: copy 1 plays the stream (seed=8, env_index=0).
    assert np.array_equal(obs["state"][1], ReferenceEnv(SMALL, seed=8).reset()["state"])
    env.step(env.action_space.sample())
    env.close()


def test_render_gives_every_environments_frame_and_render_tiled_one_image():
    one = CoverageVectorEnv(1, SMALL, render_mode="rgb_array", cell_px=3)
    one.reset()
    (frame,) = one.render()
    assert frame.shape == (SMALL.grid_height * 3, SMALL.grid_width * 3, 3)
    many = CoverageVectorEnv(5, SMALL, render_mode="rgb_array", cell_px=2, render_envs=4)
    many.reset()
    many.step(many.action_space.sample())
    frames = many.render()  # Gymnasium's vector contract: a tuple, one frame per environment
    assert isinstance(frames, tuple) and len(frames) == 5
    for i, f in enumerate(frames):
        assert np.array_equal(f, many.render_env(i)) and f.dtype == np.uint8  # as each is drawn alone
    tiled = many.render_tiled()
    assert tiled.dtype == np.uint8 and tiled.shape == (2 * 24 + 2, 2 * 24 + 2, 3)  # 2 x 2 tiles, 2 px gaps
    assert np.array_equal(tiled[24 + 2 :, :24], frames[2])  # the third tile: environment 2
    assert many.render_env(4).shape == (24, 24, 3)
    assert CoverageVectorEnv(1, SMALL).render() is None  # render_mode=None


def test_gymnasiums_vector_video_wrapper_records_the_env(tmp_path, monkeypatch):
    import sys
    import types

    from gymnasium.wrappers.vector import RecordVideo

    monkeypatch.setitem(sys.modules, "moviepy", sys.modules.get("moviepy") or types.ModuleType("moviepy"))
    env = CoverageVectorEnv(2, SMALL, render_mode="rgb_array", cell_px=2)
    env = RecordVideo(env, str(tmp_path), episode_trigger=lambda episode: True)
    saved = []  # moviepy is not a dependency: what the wrapper would write is its frames
    monkeypatch.setattr(type(env), "stop_recording", lambda self: saved.append(list(self.recorded_frames)))
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.stop_recording()
    assert len(saved[0]) == 2 and saved[0][0].shape == (24, 2 * 24, 3)  # the two environments side by side


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(cell_px=1), ValueError, "cell_px must be >= 2, got 1"),
        (dict(cell_px=2.5), TypeError, "cell_px must be an int >= 2, got float"),
        (dict(render_envs=0), ValueError, "render_envs must be >= 1"),
        (dict(render_envs=True), TypeError, "render_envs must be an int >= 1, got bool"),
    ],
)
def test_bad_render_arguments_fail_when_built_not_at_render(kwargs, error, name):
    with pytest.raises(error, match=name):
        CoverageVectorEnv(2, SMALL, render_mode="rgb_array", **kwargs)


def test_numpy_integers_size_the_drawings():
    env = CoverageVectorEnv(2, SMALL, render_mode="rgb_array", cell_px=np.int64(2), render_envs=np.int32(1))
    env.reset()
    assert env.render()[0].shape == env.render_tiled().shape == env.render_env(0, cell_px=np.int64(2)).shape
    assert type(env.cell_px) is int and type(env.render_envs) is int


class TestBadInput:
    @pytest.fixture
    def env(self):
        e = CoverageVectorEnv(3, SMALL)
        e.reset()
        return e

    def test_wrong_shape(self, env):
        with pytest.raises(ValueError, match=r"shape \(3, 4\).*got \(3, 5\)"):
            env.step(np.zeros((3, 5), dtype=np.int64))
        with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
            env.step(torch.zeros(4, dtype=torch.int64))

    def test_wrong_dtype(self, env):
        with pytest.raises(TypeError, match="integers.*float"):
            env.step(np.zeros((3, 4), dtype=np.float32))
        with pytest.raises(TypeError, match="torch.int64.*torch.int32"):
            env.step(torch.zeros(3, 4, dtype=torch.int32))
        with pytest.raises(TypeError, match="torch.Tensor or a NumPy array"):
            env.step("north")

    def test_out_of_range(self, env):
        actions = np.zeros((3, 4), dtype=np.int64)
        actions[2, 1] = 9
        with pytest.raises(ValueError, match=r"\[0, 5\).*9"):
            env.step(actions)

    def test_bad_reset_arguments(self, env):
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(options={"mask": np.ones(3, dtype=bool)})
        with pytest.raises(ValueError, match=r"mask must have shape \(3,\)"):
            env.reset(options={"reset_mask": np.ones(4, dtype=bool)})
        # named as what it was given (it said "got tensor([1, 1, 1])")
        with pytest.raises(TypeError, match=r"reset_mask'\] must be a bool array of shape \(3,\), got a int64 array"):
            env.reset(options={"reset_mask": np.ones(3, dtype=np.int64)})
        with pytest.raises(TypeError, match="one int"):
            env.reset(seed=[1, 2, 3])
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=-4)

    def test_bad_constructor_arguments(self):
        with pytest.raises(ValueError, match="output"):
            CoverageVectorEnv(2, SMALL, output="jax")
        with pytest.raises(ValueError, match="num_envs"):
            CoverageVectorEnv(0, SMALL)
        with pytest.raises(ValueError, match="num_drones"):
            gym.make_vec("uavsim/Coverage-v0", num_envs=2, config={"num_drones": 3})
        with pytest.raises(ValueError, match="render_mode"):
            CoverageVectorEnv(2, SMALL, render_mode="human")


@pytest.mark.parametrize("output", ["torch", "numpy"])
@pytest.mark.parametrize(
    "autoreset_mode, reset_mode", [("next_step", "prepared"), ("same_step", "sparse"), ("same_step", "prepared")]
)
def test_writing_into_the_returned_observation_leaves_the_infos_as_they_were(output, autoreset_mode, reset_mode):
    env = CoverageVectorEnv(3, SMALL, output=output, reset_mode=reset_mode, autoreset_mode=autoreset_mode)
    env.reset(seed=0)
    obs, _, _, _, infos = env.step(np.zeros((3, SMALL.num_uavs), np.int64))  # no episode ends in one step
    coverage = np.array(infos["coverage"]).copy()
    final = {k: np.array(v).copy() for k, v in infos.get("final_obs", {}).items()}
    for x in obs.values():
        x[:] = 0  # a user normalizing the observation in place
    assert coverage.min() > 0 and np.array_equal(np.array(infos["coverage"]), coverage)
    for k, x in final.items():
        assert np.array_equal(np.array(infos["final_obs"][k]), x)


def test_flipped_and_read_only_numpy_arrays_are_taken_as_any_other():
    import warnings

    env, same = CoverageVectorEnv(3, SMALL), CoverageVectorEnv(3, SMALL)
    env.reset(seed=0)
    same.reset(seed=0)
    actions = np.arange(3 * SMALL.num_uavs).reshape(3, SMALL.num_uavs) % 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on a read-only array it would share
        got = env.step(np.flip(actions, 1))  # negative strides, which torch cannot view
        want = same.step(np.ascontiguousarray(np.flip(actions, 1)))
        assert all(torch.equal(a, b) for a, b in zip(got[1:4], want[1:4]))
        env.step(np.broadcast_to(np.int64(1), (3, SMALL.num_uavs)))  # read-only
        env.reset(options={"reset_mask": np.array([False, True, True])[::-1]})
