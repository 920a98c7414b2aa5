"""UAVTorchRLEnv: specs, TorchRL-driven resets against ReferenceEnv episodes, a collector with a
MultiAgentMLP policy feeding GAE + ClipPPOLoss as they are, and bad input."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector
from torchrl.envs import SerialEnv
from torchrl.envs.utils import check_env_specs
from torchrl.modules import MultiAgentMLP, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators

from tests.adapters.helpers import EASY, SMALL
from uavsim.adapters.torchrl_env import UAVTorchRLEnv
from uavsim.reference import ReferenceEnv


def random_policy(cfg, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def policy(td):
        b = td.batch_size[0]
        return td.set(("agents", "action"), torch.randint(0, cfg.num_actions, (b, cfg.num_uavs), generator=gen))

    return policy


class Lockstep:
    """One ReferenceEnv per environment, fed the actions TorchRL took."""

    def __init__(self, cfg, seed, num_envs):
        self.refs = [ReferenceEnv(cfg, seed=seed, env_index=i) for i in range(num_envs)]
        self.obs = [r.reset() for r in self.refs]
        self.pending = [False] * num_envs  # ended: the next reset request is already served

    def check_root(self, td, where):
        for i, obs in enumerate(self.obs):
            assert np.array_equal(td["agents", "observation"][i].numpy(), obs["local"]), (where, i)
            assert np.array_equal(td["state"][i].numpy(), obs["state"]), (where, i)

    def step(self, td, where):
        """``td``: one step of data (root = before, "next" = after); checks it and advances the refs."""
        for i, ref in enumerate(self.refs):
            assert np.array_equal(td["agents", "observation"][i].numpy(), self.obs[i]["local"]), (where, i)
            obs, reward, term, trunc, _ = ref.step(td["agents", "action"][i].numpy())
            nxt = td["next"]
            assert np.array_equal(nxt["agents", "observation"][i].numpy(), obs["local"]), (where, i)  # final obs
            assert np.array_equal(nxt["state"][i].numpy(), obs["state"]), (where, i)
            assert np.array_equal(nxt["agents", "reward"][i, :, 0].numpy(), reward), (where, i)
            assert bool(nxt["terminated"][i, 0]) == term and bool(nxt["truncated"][i, 0]) == trunc, (where, i)
            assert nxt["agents", "done"][i].all() == (term or trunc), (where, i)
            self.obs[i], self.pending[i] = obs, term or trunc
            if term or trunc:
                self.obs[i] = ref.reset()

    def reset(self, mask):
        for i, ref in enumerate(self.refs):
            if mask[i] and not self.pending[i]:
                self.obs[i] = ref.reset()
            self.pending[i] = self.pending[i] and not mask[i]


def test_check_env_specs_passes():
    check_env_specs(UAVTorchRLEnv(3, SMALL, seed=1), break_when_any_done="both")


def test_specs_follow_the_multi_agent_layout():
    env = UAVTorchRLEnv(5, SMALL)
    n = SMALL.num_uavs
    assert env.batch_size == (5,) and env.action_key == ("agents", "action") and env.reward_key == ("agents", "reward")
    assert env.full_action_spec[env.action_key].shape == (5, n) and env.full_action_spec[env.action_key].n == 5
    assert env.full_reward_spec[env.reward_key].shape == (5, n, 1)
    assert env.full_observation_spec["agents", "observation"].shape == (5, n, SMALL.local_obs_dim)
    assert env.full_observation_spec["state"].shape == (5, SMALL.state_dim)
    assert env.full_done_spec["done"].shape == (5, 1) and env.full_done_spec["agents", "terminated"].shape == (5, n, 1)


def test_rollout_with_autoreset_plays_reference_episodes():
    """step_and_maybe_reset: final obs in "next", the next episode's start after TorchRL's reset."""
    num_envs, seed = 4, 3
    env = UAVTorchRLEnv(num_envs, EASY, seed=seed)
    lock = Lockstep(EASY, seed, num_envs)
    data = env.rollout(45, random_policy(EASY), break_when_any_done=False)
    lock.check_root(data[:, 0], "first reset")
    ends = 0
    for t in range(data.shape[1]):
        lock.step(data[:, t], f"step {t}")
        lock.reset([bool(d) for d in data["next", "done"][:, t, 0]])
        ends += int(data["next", "done"][:, t].sum())
    assert ends >= 8 and data["next", "terminated"].any() and data["next", "truncated"].any()


def test_break_on_done_then_full_and_partial_resets_skip_no_episode():
    num_envs, seed = 5, 8
    env = UAVTorchRLEnv(num_envs, EASY, seed=seed)
    lock = Lockstep(EASY, seed, num_envs)
    policy = random_policy(EASY, seed=1)
    for round_ in range(4):
        if round_:
            lock.reset([True] * num_envs)  # rollout() starts with a full reset
        data = env.rollout(40, policy, break_when_any_done=True)  # ends with some envs done, others mid-episode
        assert data["next", "done"][:, -1].any()
        for t in range(data.shape[1]):
            lock.step(data[:, t], f"round {round_} step {t}")
    td = env.reset()
    lock.reset([True] * num_envs)
    lock.check_root(td, "full reset")
    td = env.rand_step(td)
    lock.step(td, "a step")
    td = env.step_mdp(td)
    mask = torch.tensor([True, False, True, False, False])
    td.set("_reset", mask[:, None])
    td = env.reset(td)  # a user's partial reset, mid-episode
    lock.reset(mask.tolist())
    lock.check_root(td, "partial reset")
    td = env.rand_step(td)
    lock.step(td, "a step after the partial reset")
    td = env.step_mdp(td)
    agents_mask = torch.tensor([False, True, False, False, True])
    td.set(("agents", "_reset"), agents_mask.view(-1, 1, 1).expand(-1, EASY.num_uavs, 1))
    td = env.reset(td)  # a reset asked for at the agents' level
    lock.reset(agents_mask.tolist())
    lock.check_root(td, "agents-level partial reset")


def test_set_seed_restarts_the_streams():
    env = UAVTorchRLEnv(2, SMALL, seed=0)
    env.rollout(3)
    env.set_seed(11)
    td = env.reset()
    assert np.array_equal(td["state"][1].numpy(), ReferenceEnv(SMALL, seed=11, env_index=1).reset()["state"])


def test_seeds_past_31_bits_wrap_as_torchrl_chains_them():
    # TorchRL derives the seeds of batched envs and collectors up to 2**32; the env's keys take 31 bits.
    env = UAVTorchRLEnv(2, SMALL, seed=0)
    env.set_seed(2**31 + 11)
    td = env.reset()
    assert np.array_equal(td["state"][1].numpy(), ReferenceEnv(SMALL, seed=11, env_index=1).reset()["state"])
    serial = SerialEnv(2, lambda: UAVTorchRLEnv(2, SMALL))
    serial.set_seed(1)  # the second worker's chained seed is above 2**31
    assert serial.rollout(3)["next", "agents", "reward"].shape == (2, 2, 3, SMALL.num_uavs, 1)  # workers, envs, steps
    serial.close()


def make_agents(env, hidden=32):
    cfg = env.config
    net = MultiAgentMLP(
        n_agent_inputs=cfg.local_obs_dim,
        n_agent_outputs=cfg.num_actions,
        n_agents=cfg.num_uavs,
        centralized=False,
        share_params=True,
        depth=1,
        num_cells=hidden,
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=[("agents", "observation")], out_keys=[("agents", "logits")]),
        spec=env.full_action_spec[env.action_key],
        in_keys=[("agents", "logits")],
        out_keys=[env.action_key],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=cfg.local_obs_dim,
        n_agent_outputs=1,
        n_agents=cfg.num_uavs,
        centralized=True,
        share_params=True,
        depth=1,
        num_cells=hidden,
    )
    critic = TensorDictModule(critic_net, in_keys=[("agents", "observation")], out_keys=[("agents", "state_value")])
    return actor, critic


def test_collector_with_multi_agent_mlp_feeds_gae_and_ppo_without_transforms():
    torch.manual_seed(0)
    env = UAVTorchRLEnv(6, SMALL, seed=2, check_action_range=False)
    actor, critic = make_agents(env)
    loss = ClipPPOLoss(actor, critic)
    loss.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    collector = Collector(
        env, actor, frames_per_batch=6 * 16, total_frames=6 * 32, auto_register_policy_transforms=False
    )
    batches = 0
    try:
        for data in collector:
            batches += 1
            assert data.batch_size == (6, 16)
            assert data["agents", "action"].shape == (6, 16, SMALL.num_uavs)
            assert data["next", "agents", "reward"].shape == (6, 16, SMALL.num_uavs, 1)
            assert data["next", "done"].any()  # max_steps=12 < 16: every env ended once per batch
            with torch.no_grad():
                loss.value_estimator(
                    data, params=loss.critic_network_params, target_params=loss.target_critic_network_params
                )
            assert data["advantage"].shape == (6, 16, SMALL.num_uavs, 1)
            losses = loss(data)
            total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            assert torch.isfinite(total)
            total.backward()
    finally:
        collector.shutdown()
    assert batches == 2


class TestBadInput:
    @pytest.fixture
    def env(self):
        e = UAVTorchRLEnv(3, SMALL)
        e.reset()
        return e

    def _td(self, env, action):
        agents = TensorDict({"action": action}, batch_size=action.shape[:1])
        return TensorDict({"agents": agents}, batch_size=[3])

    def test_wrong_action_shape(self, env):
        with pytest.raises(ValueError, match=r"shape \(3, 4\).*got \(3, 4, 5\)"):
            env.step(self._td(env, torch.zeros(3, 4, 5, dtype=torch.int64)))  # one-hot actions are not taken

    def test_wrong_action_dtype_and_range(self, env):
        with pytest.raises(TypeError, match="torch.int64.*torch.float32"):
            env.step(self._td(env, torch.zeros(3, 4)))
        with pytest.raises(ValueError, match=r"\[0, 5\).*7"):
            env.step(self._td(env, torch.full((3, 4), 7, dtype=torch.int64)))

    def test_missing_action(self, env):
        with pytest.raises(KeyError, match=r"'agents', 'action'"):
            env.step(TensorDict({}, batch_size=[3]))

    def test_partial_steps_are_refused(self, env):
        td = env.rand_action(env.reset())
        td.set("_step", torch.tensor([True, False, True]))
        with pytest.raises(ValueError, match="partial steps"):
            env.step(td)

    def test_moving_devices_is_refused(self, env):
        assert env.to("cpu") is env
        with pytest.raises(ValueError, match="runs on 'cpu' or 'cuda' devices, got 'meta'"):
            env.to("meta")
        with pytest.raises(ValueError, match="'gpu' is not a device name"):
            env.to("gpu")
        if torch.cuda.is_available():
            with pytest.raises(ValueError, match="build it with device='cuda'"):
                env.to("cuda")

    def test_bad_constructor_arguments(self):
        with pytest.raises(ValueError, match="num_envs"):
            UAVTorchRLEnv(0, SMALL)
        with pytest.raises(ValueError, match="num_drones"):
            UAVTorchRLEnv(2, {"num_drones": 1})
        with pytest.raises(ValueError, match="seed"):
            UAVTorchRLEnv(2, SMALL).set_seed(-1)
        with pytest.raises(TypeError, match="seed"):
            UAVTorchRLEnv(2, SMALL)._set_seed(1.5)
