"""MAPPO networks: a decentralized actor shared by all UAVs and a centralized (or local) critic.

Both take flat samples, one row per (environment, UAV): the rollout flattens `[B, N, ...]` to
`[B * N, ...]`, the update gathers minibatch rows from `[T * B * N, ...]`, and both call the same
`forward`, so a log-probability is computed the same way in both places.

    Actor  : [local obs (L), one-hot agent id (N)]                      -> logits [A]
    Critic : [global state (S), local obs (L), one-hot agent id (N)]    -> value  (mappo)
             [local obs (L), one-hot agent id (N)]                      -> value  (ippo)

The critic's input is MAPPO's "agent-specific global state": the global state concatenated with
the agent's own observation, so one shared critic can tell the agents' values apart.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from agents.config import CriticKind, ModelConfig


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0,
               generator: torch.Generator | None = None) -> nn.Linear:
    """Orthogonal weights with gain `std`, constant bias (CleanRL's `layer_init`)."""
    nn.init.orthogonal_(layer.weight, std, generator=generator)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden: int, layers: int, out_dim: int, out_std: float,
        generator: torch.Generator | None) -> nn.Sequential:
    """`layers` tanh hidden layers, orthogonal init drawn from `generator` (not the global RNG)."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [layer_init(nn.Linear(in_dim if i == 0 else hidden, hidden), generator=generator), nn.Tanh()]
    mods.append(layer_init(nn.Linear(hidden, out_dim), std=out_std, generator=generator))
    return nn.Sequential(*mods)


class _AgentIdInput(nn.Module):
    """Appends the one-hot id of each row's agent to its features (or nothing when disabled)."""

    def __init__(self, num_agents: int, enabled: bool):
        super().__init__()
        self.enabled = enabled
        self.register_buffer("eye", torch.eye(num_agents), persistent=False)

    @property
    def dim(self) -> int:
        return self.eye.shape[0] if self.enabled else 0

    def forward(self, parts: list[torch.Tensor], agent: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            parts = parts + [self.eye[agent]]
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


class Actor(nn.Module):
    """`forward(local [M, L] f32, agent [M] int64) -> logits [M, A]` (autocast dtype under AMP)."""

    def __init__(self, local_dim: int, num_agents: int, num_actions: int, cfg: ModelConfig,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.ids = _AgentIdInput(num_agents, cfg.agent_id)
        self.net = mlp(local_dim + self.ids.dim, cfg.hidden_size, cfg.num_layers, num_actions, 0.01, generator)

    def forward(self, local: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        return self.net(self.ids([local], agent))


class Critic(nn.Module):
    """`forward(state [M, S], local [M, L], agent [M]) -> value [M] float32` (normalized scale
    when value normalization is on). With `ippo` the state is ignored (pass None)."""

    def __init__(self, state_dim: int, local_dim: int, num_agents: int, cfg: ModelConfig,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.centralized = cfg.critic == CriticKind.mappo
        self.ids = _AgentIdInput(num_agents, cfg.agent_id)
        in_dim = (state_dim if self.centralized else 0) + local_dim + self.ids.dim
        self.net = mlp(in_dim, cfg.hidden_size, cfg.num_layers, 1, 1.0, generator)

    def forward(self, state: torch.Tensor | None, local: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
        parts = [state, local] if self.centralized else [local]
        return self.net(self.ids(parts, agent)).squeeze(-1).float()


def categorical(logits: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(log_prob [M] float32, entropy [M] float32)` of int `actions [M]` under `logits [M, A]`.

    Always float32 whatever the autocast dtype of `logits`: the rollout and the update call this
    same function, so the PPO ratio is exactly 1 before the first update.
    """
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    log_prob = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return log_prob, entropy


def sample(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Sample actions `[M]` int64 by the Gumbel-max trick, drawing from `generator` (no host sync,
    no global RNG)."""
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float32).tiny)))
    return torch.argmax(logits.float() + gumbel, dim=-1)
