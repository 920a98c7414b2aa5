"""The baseline pipeline of `benchmarks.train_throughput`: the same MAPPO iteration assembled from
TorchRL's stock parts (``Collector`` over ``uavsim.adapters.torchrl_env.UAVTorchRLEnv``, ``GAE``,
``ClipPPOLoss``), around our networks or TorchRL's own (``MLP``, ``MultiAgentMLP``)."""

from __future__ import annotations

import contextlib

import torch

from benchmarks.common import TRAINER_CONFIG

SAME_TASK = ["model.actor_shared_map=false"]  # every pipeline's actor is local: TorchRL's recipe has no shared map


class _AgentsActor(torch.nn.Module):
    """Our `Actor` on TorchRL's layout: ``[..., N, L]`` observations -> ``[..., N, A]`` logits."""

    def __init__(self, actor):
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        n = obs.shape[-2]
        flat = obs.reshape(-1, obs.shape[-1])
        agent = torch.arange(n, device=obs.device).repeat(flat.shape[0] // n)
        return self.actor(flat, agent).float().view(*obs.shape[:-1], -1)


class _CatWithAgentId(torch.nn.Module):
    """A stock TorchRL ``MLP`` on ``[state (broadcast to the UAVs), obs, one-hot id]`` per UAV."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        obs = inputs[-1]
        n = obs.shape[-2]
        parts = [x.unsqueeze(-2).expand(*obs.shape[:-1], x.shape[-1]) for x in inputs[:-1]]
        eye = torch.eye(n, device=obs.device, dtype=obs.dtype).expand(*obs.shape[:-1], n)
        return self.mlp(torch.cat([*parts, obs, eye], dim=-1))


class _AgentsCritic(torch.nn.Module):
    """Our `Critic` on TorchRL's layout: ``state [..., S]`` and ``[..., N, L]`` -> ``[..., N, 1]``."""

    def __init__(self, critic):
        super().__init__()
        self.critic = critic

    def forward(self, state: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        n = obs.shape[-2]
        flat = obs.reshape(-1, obs.shape[-1])
        agent = torch.arange(n, device=obs.device).repeat(flat.shape[0] // n)
        value = self.critic(state.reshape(-1, state.shape[-1]), flat, agent, state_repeat=n)
        return value.view(*obs.shape[:-1], 1)


def torchrl_runner(networks: str):
    """TorchRL's collector, GAE and ClipPPOLoss around ``networks``: ``"ours"`` (the trainer's own
    actor and critic, so both pipelines do the same arithmetic), ``"mlp"`` (the same architecture
    from TorchRL's stock ``MLP`` on concatenated inputs) or ``"multiagentmlp"`` (TorchRL's
    MAPPO recipe: MultiAgentMLP actor, centralized MultiAgentMLP critic over all local observations)."""

    def run(args, amp, device):
        return torchrl_iteration_runner(args, amp, device, networks)

    return run


def torchrl_iteration_runner(args, amp: str, device: str, networks: str = "ours"):
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.collectors import Collector
    from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor
    from torchrl.objectives import ClipPPOLoss, ValueEstimators

    from agents.algo.networks import Critic, make_actor
    from agents.config import load_config
    from uavsim.adapters.torchrl_env import UAVTorchRLEnv

    cfg = load_config(TRAINER_CONFIG, [f"model.hidden_size={args.hidden}", *SAME_TASK])
    env_cfg = cfg.env_config()
    env = UAVTorchRLEnv(args.num_envs, env_cfg, seed=cfg.seed, device=device, check_action_range=False)
    n, obs_dim, num_actions = env_cfg.num_uavs, env_cfg.local_obs_dim, env_cfg.num_actions
    activation = {"relu": nn.ReLU, "tanh": nn.Tanh}[cfg.model.activation.value]  # the trainer's default
    if networks == "ours":
        gen = torch.Generator().manual_seed(cfg.seed)
        actor_net = _AgentsActor(make_actor(env_cfg, cfg.model, gen)).to(device)
        critic = TensorDictModule(
            _AgentsCritic(Critic(env_cfg.state_dim, obs_dim, n, cfg.model, gen)).to(device),
            in_keys=["state", ("agents", "observation")],
            out_keys=[("agents", "state_value")],
        )
    elif networks == "mlp":
        mlp = dict(depth=cfg.model.num_layers, num_cells=args.hidden, activation_class=activation, device=device)
        actor_net = _CatWithAgentId(MLP(in_features=obs_dim + n, out_features=num_actions, **mlp))
        critic = TensorDictModule(
            _CatWithAgentId(MLP(in_features=env_cfg.state_dim + obs_dim + n, out_features=1, **mlp)),
            in_keys=["state", ("agents", "observation")],
            out_keys=[("agents", "state_value")],
        )
    else:
        mlp = dict(
            n_agents=n,
            share_params=True,
            depth=cfg.model.num_layers,
            num_cells=args.hidden,
            activation_class=activation,
            device=device,
        )
        actor_net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=num_actions, centralized=False, **mlp)
        critic = TensorDictModule(
            MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=1, centralized=True, **mlp),
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "state_value")],
        )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=[("agents", "observation")], out_keys=[("agents", "logits")]),
        spec=env.full_action_spec[env.action_key],
        in_keys=[("agents", "logits")],
        out_keys=[env.action_key],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    tc = cfg.train
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=tc.clip_coef,
        entropy_coeff=tc.ent_coef,
        critic_coeff=tc.vf_coef,
        normalize_advantage=tc.norm_adv,
        loss_critic_type="l2",
    )
    loss.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=tc.gamma, lmbda=tc.gae_lambda)
    optimizer = torch.optim.Adam(loss.parameters(), lr=tc.actor_lr, eps=tc.adam_eps)
    frames = args.num_steps * args.num_envs
    collector = Collector(
        env, actor, frames_per_batch=frames, total_frames=-1, device=device, auto_register_policy_transforms=False
    )
    batches = iter(collector)
    autocast = amp_context(amp, device)
    scaler = torch.amp.GradScaler(torch.device(device).type) if amp == "fp16" else None
    minibatch = frames // args.minibatches

    def iteration():
        with autocast():
            data = next(batches)
            with torch.no_grad():
                loss.value_estimator(
                    data, params=loss.critic_network_params, target_params=loss.target_critic_network_params
                )
        flat = data.reshape(-1)
        for _ in range(args.epochs):
            perm = torch.randperm(frames, device=device)
            for start in range(0, frames, minibatch):
                with autocast():
                    out = loss(flat[perm[start : start + minibatch]])
                    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optimizer.zero_grad(set_to_none=True)
                if scaler is None:
                    total.backward()
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), tc.max_grad_norm)
                    optimizer.step()
                else:  # fp16, as ours: loss scaling, unscale before clipping, skip non-finite steps
                    scaler.scale(total).backward()
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), tc.max_grad_norm)
                    scaler.step(optimizer)
                    scaler.update()
        total.item()  # the iteration's host read, as the trainer's logging would do

    iteration.close = collector.shutdown  # type: ignore[attr-defined]
    iteration.scaler, iteration.parameters = scaler, loss.parameters  # type: ignore[attr-defined]  # for tests
    return iteration


def amp_context(amp: str, device: str):
    if amp == "off":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=torch.device(device).type, dtype=dtype)
