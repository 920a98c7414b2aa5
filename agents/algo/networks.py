"""MAPPO networks: a decentralized actor shared by all UAVs and a centralized (or local) critic.

Both take flat samples, one row per (environment, UAV): the rollout flattens `[B, N, ...]` to
`[B * N, ...]`, the update gathers whole environment steps (all N agents of each) from
`[T * B, N, ...]`, and both call the same `forward`, so a log-probability is computed the same way
in both places, and the global state's share of a first layer is computed once per environment step.

    Actor  : [local obs (L), one-hot agent id (N)]                      -> logits [A]
             + [heading (3), pooled map (2 P^2)] with `model.actor_shared_map` (configs/shared_map.yaml)
             with `model.recurrent`: encoder -> GRU (hidden state [H] per UAV) -> head
    Critic : [global state (S), local obs (L), one-hot agent id (N)]    -> value  (mappo)
             [local obs (L), one-hot agent id (N)]                      -> value  (ippo)
             [team state (3 P^2 + 2), local obs (L)]                    -> value  (mappo, `model.size_agnostic`)

With `model.size_agnostic` (and `model.agent_id=false`) no input depends on the team's size `N` or
the map's: the actor's local window is the same on any map, and the critic sees the UAVs as a
density map over the state's `P x P` blocks (`team_state`) instead of a list of N positions. One set
of parameters then plays, and trains on, any team and map size (mixed training: `agents.config.env_section`).

The critic's input is MAPPO's "agent-specific global state": the global state concatenated with
the agent's own observation, so one shared critic can tell the agents' values apart. The critic
stays feed-forward under `model.recurrent`: what a UAV must remember (where it has been) the global
state shows, and the critic sees it (see `GRU`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import torch
from torch import nn

from agents.algo.action_noise import ActionNoise
from agents.algo.heading import HEADING_DIM, MapHeading
from agents.algo.layers import GRU, MLP, Form, layer_init
from agents.config import CriticKind, ModelConfig
from uavsim.config import EnvConfig


class Actor(nn.Module):
    """The decentralized actor, shared by all UAVs: `forward` gives logits, `act` one policy step.

    With `model.actor_shared_map` (UAVs that share one coverage map by communication) it also sees
    the global state's pooled map and each UAV's heading to the nearest uncovered block
    (`agents.algo.heading`); off, its local observation (and id) only. With `model.recurrent` a
    `GRU` sits between the encoder and the head; the rollout calls it one step at a time, the update
    a chunk of `train.chunk_length` steps: the same function, so the same numbers.

    Args:
        local_dim: `L`, the local observation's width.
        num_agents: `N`, UAVs per environment (the agent id's one-hot, when `cfg.agent_id`; see `cfg.id_width`).
        num_actions: `A`.
        cfg: the model config.
        generator: the initialisation's random generator (None: torch's default).
        env_cfg: the task, for a shared-map actor (None: a local one).
        form: how its no-grad calls compute the first layers (`Form`).
    """

    def __init__(
        self,
        local_dim: int,
        num_agents: int,
        num_actions: int,
        cfg: ModelConfig,
        generator: torch.Generator | None = None,
        env_cfg: EnvConfig | None = None,
        form: Form = Form.chain,
    ):
        super().__init__()
        self.map_dim = 2 * env_cfg.state_pool**2 if env_cfg is not None else 0
        self.heading = MapHeading(env_cfg) if env_cfg is not None else None
        dims = [local_dim, HEADING_DIM, self.map_dim] if self.map_dim else [local_dim]
        self.recurrent = cfg.recurrent
        self.net = MLP(dims, num_agents, cfg, None if self.recurrent else num_actions, 0.01, generator)
        if self.recurrent:
            self.gru = GRU(cfg.hidden_size, cfg.gru_units, generator)
            self.head = layer_init(nn.Linear(cfg.gru_units, num_actions), std=0.01, generator=generator)
        self.net.first.form = Form(form)

    @property
    def hidden_size(self) -> int:
        """Size of a UAV's hidden state (0 for a feed-forward actor)."""
        return self.gru.hidden_size if self.recurrent else 0

    def initial_hidden(self, num_envs: int, num_agents: int, device: torch.device) -> torch.Tensor:
        """`[B, N, H]` float32 zeros: the hidden state at an episode's start."""
        return torch.zeros(num_envs, num_agents, self.hidden_size, dtype=torch.float32, device=device)

    def headings(self, state: torch.Tensor) -> torch.Tensor:
        """`[F, N, 3]` float32 headings of every UAV for states `[F, S]` (shared-map actors only).
        The rollout computes them once per step and stores them; the update reads them back."""
        if torch.is_autocast_enabled(state.device.type):
            state = state.to(torch.get_autocast_dtype(state.device.type))  # what the update will see
        return self.heading(state)

    def forward(
        self,
        local: torch.Tensor,
        agent: torch.Tensor,
        state: torch.Tensor | None = None,
        state_repeat: int = 1,
        heading: torch.Tensor | None = None,
        hidden: torch.Tensor | None = None,
        starts: torch.Tensor | None = None,
    ):
        """Logits for `M` rows (a recurrent actor reads them as `C` steps of `R` sequences, step-major).

        Args:
            local: `[M, L]` local observations (float32, or the AMP dtype).
            agent: `[M]` int64 agent ids.
            state: `[M / state_repeat, S]` global states (shared-map actors; None otherwise).
            state_repeat: consecutive rows that share one state (one environment's agents).
            heading: `[M, 3]` float32, each row's UAV's entry of `headings(state)` (shared-map actors).
            hidden: `[R, H]` float32, the state before the first step (recurrent actors: required).
            starts: `[C, R]` bool | None, where an episode began (recurrent actors; see `GRU`).

        Returns:
            `logits [M, A]` (the autocast dtype under AMP); a recurrent actor's
            `(logits, last hidden [R, H] float32)`.

        Raises:
            ValueError: a recurrent actor without `hidden`.
        """
        if not self.map_dim:
            x = self.net([local], agent, [1])
        else:
            x = self.net([local, heading, state[:, : self.map_dim]], agent, [1, 1, state_repeat])
        if not self.recurrent:
            return x
        if hidden is None:
            raise ValueError("a recurrent actor needs its hidden state: forward(..., hidden=[R, H] float32)")
        rows = hidden.shape[0]
        outputs, hidden = self.gru(x.view(-1, rows, x.shape[-1]), hidden, starts)
        return self.head(outputs.view(x.shape[0], -1)), hidden

    def act(
        self,
        obs: dict[str, torch.Tensor],
        agent: torch.Tensor,
        noise: ActionNoise | None,
        autocast: Callable[[], contextlib.AbstractContextManager],
        deterministic: bool = False,
        hidden: torch.Tensor | None = None,
        temperature: float = 1.0,
    ):
        """One policy step.

        Args:
            obs: `{"local": [B, N, L], "state": [B, S]}`.
            agent: `[B * N]` int64 agent ids (`agent_ids`).
            noise: this step's sampling noise (None when `deterministic`).
            autocast: the networks' autocast factory.
            deterministic: take the most likely action instead of sampling.
            hidden: `[B, N, H]` float32, a recurrent actor's state (None for a feed-forward one).
            temperature: sample from `softmax(logits / temperature)` (evaluation only: training
                samples at 1, and the log-probability returned is always the policy's own).

        Returns:
            `(actions [B, N] int64, log-probabilities [B, N] float32, headings [B, N, 3] float32 or
            None for a local actor, next hidden [B, N, H] float32 or None for a feed-forward actor)`.
        """
        local = obs["local"]
        b, n, _ = local.shape
        with autocast():
            heading = self.headings(obs["state"]) if self.map_dim else None
            out = self(
                local.reshape(b * n, -1),
                agent,
                obs["state"] if self.map_dim else None,
                state_repeat=n,
                heading=heading.view(b * n, -1) if heading is not None else None,
                hidden=hidden.view(b * n, -1) if hidden is not None else None,
            )
        logits, hidden = out if self.recurrent else (out, None)
        logits = logits.float()
        if deterministic:
            actions = torch.argmax(logits, dim=-1)
        else:
            actions = sample(logits if temperature == 1.0 else logits / temperature, noise.uniform().view(b * n))
        logprob = log_prob(logits, actions)
        return actions.view(b, n), logprob.view(b, n), heading, hidden.view(b, n, -1) if hidden is not None else None


def agent_ids(num_envs: int, num_agents: int, device: torch.device) -> torch.Tensor:
    """`[B * N]` int64 agent index of each flattened (env, agent) row."""
    return torch.arange(num_agents, device=device).repeat(num_envs)


def make_actor(
    env_cfg: EnvConfig, cfg: ModelConfig, generator: torch.Generator | None = None, form: Form = Form.chain
) -> Actor:
    """The actor for a task: local observation, plus the shared map when `actor_shared_map`."""
    return Actor(
        env_cfg.local_obs_dim,
        env_cfg.num_uavs,
        env_cfg.num_actions,
        cfg,
        generator,
        env_cfg if cfg.actor_shared_map else None,
        form,
    )


def with_form(net: nn.Module, form: Form) -> nn.Module:
    """`net` (an `Actor` or `Critic`) computing its layers in `form`, sharing its parameters and
    buffers: one set of weights, two ways to compute them (the compiled rollout's `fused` actor
    beside the update's). A copy of the module tree whose parameter dicts are `net`'s own."""

    def copy_tree(module: nn.Module) -> nn.Module:
        twin = copy.copy(module)
        twin._modules = {name: copy_tree(child) for name, child in module._modules.items()}
        return twin

    twin = copy_tree(net)
    twin.net.first.form = Form(form)
    return twin


class Critic(nn.Module):
    """The critic, centralized (`mappo`: global state and local observation) or local (`ippo`).

    Args:
        state_dim: `S`, the global state's width.
        local_dim: `L`, the local observation's width.
        num_agents: `N`, UAVs per environment (the agent id's one-hot, when `cfg.agent_id`; see `cfg.id_width`).
        cfg: the model config.
        generator: the initialisation's random generator (None: torch's default).
        form: how its no-grad calls compute the first layers (`Form`).
        state_pool: `P`, the state's pooled map side; with `cfg.size_agnostic` the critic reads the
            state as `team_state` (any `S`: any team size).
        window_values: the local observation's leading values that are the window's channels; the
            critic skips them when `cfg.critic_window` is false.
    """

    def __init__(
        self,
        state_dim: int,
        local_dim: int,
        num_agents: int,
        cfg: ModelConfig,
        generator: torch.Generator | None = None,
        form: Form = Form.chain,
        state_pool: int = 0,
        window_values: int = 0,
    ):
        super().__init__()
        self.centralized = cfg.critic == CriticKind.mappo
        self.state_pool = state_pool if cfg.size_agnostic else 0  # > 0: the state as `team_state`
        if self.state_pool:
            state_dim = 3 * state_pool**2 + 2
        # a column slice of the rows, no copy: the first layer's GEMM reads it with the rows' stride
        self.local_from = 0 if cfg.critic_window else window_values
        local_dim -= self.local_from
        dims = [state_dim, local_dim] if self.centralized else [local_dim]
        self.net = MLP(dims, num_agents, cfg, 1, 1.0, generator)
        self.net.first.form = Form(form)

    def forward(
        self, state: torch.Tensor | None, local: torch.Tensor, agent: torch.Tensor, state_repeat: int = 1
    ) -> torch.Tensor:
        """Values of `M` rows.

        Args:
            state: `[M / state_repeat, S]` global states (ignored by an `ippo` critic).
            local: `[M, L]` local observations.
            agent: `[M]` int64 agent ids.
            state_repeat: consecutive rows that share one state (one environment's agents).

        Returns:
            `value [M]` float32, on the normalized scale when value normalization is on.
        """
        local = local[:, self.local_from :] if self.local_from else local
        if self.centralized:
            state = team_state(state, self.state_pool) if self.state_pool else state
            value = self.net([state, local], agent, [state_repeat, 1])
        else:
            value = self.net([local], agent, [1])
        return value.squeeze(-1).float()


def make_critic(
    env_cfg: EnvConfig, cfg: ModelConfig, generator: torch.Generator | None = None, form: Form = Form.chain
) -> Critic:
    """The critic for a task (with `cfg.size_agnostic`, for every task of its `state_pool`)."""
    return Critic(
        env_cfg.state_dim,
        env_cfg.local_obs_dim,
        env_cfg.num_uavs,
        cfg,
        generator,
        form,
        env_cfg.state_pool,
        env_cfg.window_obs_dim,
    )


def team_state(state: torch.Tensor, pool: int) -> torch.Tensor:
    """`[F, 3 P^2 + 2]` of global states `[F, S]` (`S = 2 P^2 + 2 N + 2`, any N): the pooled map
    (blocked and covered fractions), the fraction of the UAVs in each of its `P x P` blocks, the
    time and the coverage. A UAV's block is read from its normalized position (row / (H - 1),
    col / (W - 1)): `floor(x P)`, the env's block but for a cell at the edge of two."""
    p2 = pool * pool
    num_uavs = (state.shape[1] - 2 * p2 - 2) // 2
    position = state[:, 2 * p2 : 2 * p2 + 2 * num_uavs].view(-1, num_uavs, 2).float()
    block_rc = (position * pool).long().clamp_(0, pool - 1)
    block = block_rc[..., 0] * pool + block_rc[..., 1]  # [F, N]
    share = torch.full(block.shape, 1.0 / num_uavs, dtype=state.dtype, device=state.device)
    density = torch.zeros(state.shape[0], p2, dtype=state.dtype, device=state.device).scatter_add_(1, block, share)
    return torch.cat([state[:, : 2 * p2], density, state[:, -2:]], dim=1)


def log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """`log_prob [M]` float32 of int `actions [M]` under `logits [M, A]` (any float dtype), without
    the entropy (the rollout needs none).

    The one expression the rollout (here) and the update (`categorical`) both compute, so the PPO
    ratio is exactly 1 before the first update (within 1e-4 under `Form.fused`)."""
    return _log_prob(torch.log_softmax(logits.float(), dim=-1), actions)


def _log_prob(logp_all: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical(logits: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(log_prob [M] float32, entropy [M] float32)` of int `actions [M]` under `logits [M, A]`.

    Always float32 whatever the autocast dtype of `logits`, and the log-probability is `log_prob`'s.
    """
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return _log_prob(logp_all, actions), entropy


def sample(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Sample actions `[M]` int64 from `logits [M, A]`: the first action whose cumulative
    probability exceeds `uniform [M]` float32 in (0, 1) (`agents.algo.action_noise`: a counter hash, no
    generator state). One number per sample, where the Gumbel-max trick needs one per action."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(-1)
    return (cdf < uniform[:, None]).sum(-1).clamp_max(logits.shape[-1] - 1)  # rounding may leave cdf[-1] < 1
