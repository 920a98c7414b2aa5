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

The critic's input is MAPPO's "agent-specific global state": the global state concatenated with
the agent's own observation, so one shared critic can tell the agents' values apart. The critic
stays feed-forward under `model.recurrent`: what a UAV must remember (where it has been) the global
state shows, and the critic sees it (see `GRU`).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import math
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from agents.config import Activation, CriticKind, ModelConfig
from agents.algo.action_noise import ActionNoise
from agents.algo.heading import HEADING_DIM, MapHeading
from uavsim.config import EnvConfig


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0,
               generator: torch.Generator | None = None) -> nn.Linear:
    """Orthogonal weights with gain `std`, constant bias (CleanRL's `layer_init`)."""
    nn.init.orthogonal_(layer.weight, std, generator=generator)
    nn.init.constant_(layer.bias, bias)
    return layer


class Form(str, enum.Enum):
    """How a network computes its layers where gradients are off (where they are on: always `chain`).
    Chosen once, where the network is built (`Actor(form=...)`, `with_form`), not per call."""

    chain = "chain"  # plain ops: what autograd and vmap (TorchRL's value estimators) need; the default
    epilogue = "epilogue"  # each ReLU layer's GEMM applies bias and ReLU in its epilogue: the same numbers
    fused = "fused"  # and the first layer as one product plus one pointwise pass: compiled callers only


ACTIVATIONS = {Activation.tanh: nn.Tanh, Activation.relu: lambda: nn.ReLU(inplace=True)}
FIRST_ACTIVATIONS = {Activation.tanh: nn.Tanh, Activation.relu: nn.ReLU}


class SplitInputLinear(nn.Module):
    """A linear layer over the concatenation `[part_0, ..., part_k, one_hot(agent)]`, computed as a
    sum of per-part products without building the concatenation. The one-hot product is a row
    lookup, and a part can be given once per environment and shared by that environment's agents
    (`repeat`), which saves the critic most of its global-state product in the rollout.

    The products accumulate in one `[M, out]` tensor, in a fixed order whatever the mode (so the
    rollout and the update compute the same numbers): the shared parts' product (with the bias)
    copied to its rows, then the narrow per-row parts' (the heading, the agent id), then the first
    per-row part's (the local observation), each GEMM adding the tensor so far into its output. With
    `relu` the layer returns the ReLU of that sum.

    `form` (`Form`, set where the network is built; used only where gradients are off): `epilogue`
    accumulates the GEMMs in place and applies the ReLU in the last one's epilogue
    (`torch._addmm_activation`: autograd has no derivative for it, vmap no rule for in-place GEMMs),
    the same numbers; `fused` computes one product, then every other term and the activation in one
    pointwise pass (`_pointwise_tail`), which inductor makes one kernel; its numbers differ from the
    chain's by rounding. docs/performance.md measures both.

    The weight is one `[out, sum(dims) + num_agents]` matrix, initialised exactly as the equivalent
    `nn.Linear` would be (orthogonal over the full concatenated input).
    """

    def __init__(self, dims: list[int], num_agents: int, out_dim: int, generator: torch.Generator | None):
        super().__init__()
        self.dims, self.num_agents = dims, num_agents
        self.linear = layer_init(nn.Linear(sum(dims) + num_agents, out_dim), generator=generator)
        self.register_buffer("agent_ids", torch.arange(num_agents), persistent=False)
        self.form = Form.chain

    def forward(self, parts: list[torch.Tensor], agent: torch.Tensor, repeats: list[int],
                relu: bool = False) -> torch.Tensor:
        w, bias = self.linear.weight, self.linear.bias
        # Cast explicitly (autocast would, for `linear` and `addmm`, but has no rule for `_addmm_activation`).
        dtype = torch.get_autocast_dtype(w.device.type) if torch.is_autocast_enabled(w.device.type) else w.dtype
        w, bias = w.to(dtype), bias.to(dtype)
        form = Form.chain if torch.is_grad_enabled() else self.form
        in_place = form != Form.chain
        per_row, shared, narrow, narrow_w, col = [], [], [], [], 0
        for x, d, r in zip(parts, self.dims, repeats):
            w_part, col = w[:, col:col + d], col + d
            if r > 1:
                shared.append((x, w_part, r))
            elif not per_row:
                per_row.append((x, w_part))
            else:
                narrow.append(x)
                narrow_w.append(w_part)
        if form == Form.fused and per_row:
            return self._pointwise_tail(per_row[0], shared, narrow, narrow_w, agent, w[:, col:], bias, dtype, relu)
        if self.num_agents:
            # A one-hot product rather than a row lookup `w[:, col:].t()[agent]`: the lookup's
            # backward is a serial index_put on the CPU, measured at a quarter of the update.
            # A comparison, not F.one_hot: that checks the ids' range by reading them back to the
            # host (a sync per call, and a graph break under torch.compile).
            narrow.append(agent[:, None] == self.agent_ids)
            narrow_w.append(w[:, col:])
        if narrow:
            # The narrow per-row parts (a few columns each) in one product: each product reads and
            # writes the whole [M, out] activation, whatever its width.
            x = narrow[0].to(dtype) if len(narrow) == 1 else torch.cat([part.to(dtype) for part in narrow], 1)
            per_row.insert(0, (x, narrow_w[0] if len(narrow_w) == 1 else torch.cat(narrow_w, 1)))
        out = None
        for x, w_part, r in shared:  # one product per run of `r` rows, copied to the run's rows
            y = F.linear(x.to(dtype), w_part, bias if out is None else None)
            # contiguous(): always a copy (reshape would return a stride-0 view for one run)
            rows = y.unsqueeze(1).expand(-1, r, -1).contiguous().view(-1, y.shape[-1])
            out = rows if out is None else out + rows
        fused = relu and in_place
        for i, (x, w_part) in enumerate(per_row):
            x = x.to(dtype)
            if fused and i == len(per_row) - 1:  # the last product, with the ReLU in its epilogue
                if out is None:
                    return torch._addmm_activation(bias, x, w_part.t())
                return torch._addmm_activation(out, x, w_part.t(), out=out)
            if out is None:
                out = F.linear(x, w_part, bias)
            else:
                out = out.addmm_(x, w_part.t()) if in_place else torch.addmm(out, x, w_part.t())
        return F.relu(out) if relu else out

    # Narrow parts up to this many columns enter the pointwise pass column by column (under bf16 a
    # bf16 x bf16 product is exact in float32, so a compiler's fused multiply-add rounds as the
    # separate ops do); wider ones (a shared part given once per row) through a product of their own.
    POINTWISE_COLUMNS = 8

    def _pointwise_tail(self, first, shared, narrow, narrow_w, agent, w_agent, bias, dtype, relu) -> torch.Tensor:
        """The `fused` form (no-grad): the first per-row part's product, then, in float32 and
        in one pointwise expression rounded once, the shared parts' products broadcast to their
        rows (the first with the bias), the narrow parts, the agent's weight column (looked up)
        and the activation. Each product is rounded to the compute dtype first, as a GEMM's output."""
        x, w_first = first
        acc = torch.mm(x.to(dtype), w_first.t()).float()
        rows, out_dim = acc.shape
        for i, (x, w_part, r) in enumerate(shared):
            y = F.linear(x.to(dtype), w_part, bias if i == 0 else None).float()
            acc = (acc.view(-1, r, out_dim) + y[:, None]).view(rows, out_dim)
        if not shared:
            acc = acc + bias.float()
        for x, w_part in zip(narrow, narrow_w):
            x = x.to(dtype)
            if x.shape[1] > self.POINTWISE_COLUMNS:
                acc = acc + torch.mm(x, w_part.t()).float()
                continue
            x, w_part = x.float(), w_part.float()
            for j in range(x.shape[1]):
                acc = acc + x[:, j, None] * w_part[:, j]
        if self.num_agents:
            acc = acc + w_agent.t().float()[agent]
        return (acc.relu() if relu else acc).to(dtype)


class _MLP(nn.Module):
    """`SplitInputLinear` -> activation -> (`num_layers` - 1) x (Linear -> activation) -> head
    (no head when `out_dim` is None: the encoder of a recurrent actor)."""

    def __init__(self, dims: list[int], num_agents: int, cfg: ModelConfig, out_dim: int | None, out_std: float,
                 generator: torch.Generator | None):
        super().__init__()
        act = ACTIVATIONS[cfg.activation]
        self.relu = cfg.activation == Activation.relu
        self.first = SplitInputLinear(dims, num_agents, cfg.hidden_size, generator)
        # rest[0], the first activation: a ReLU network applies it in `SplitInputLinear` instead
        # (in the last GEMM's epilogue where it can); kept here for tanh and the state dict's keys.
        layers: list[nn.Module] = [FIRST_ACTIVATIONS[cfg.activation]()]
        for _ in range(cfg.num_layers - 1):
            layers += [layer_init(nn.Linear(cfg.hidden_size, cfg.hidden_size), generator=generator), act()]
        if out_dim is not None:
            layers.append(layer_init(nn.Linear(cfg.hidden_size, out_dim), std=out_std, generator=generator))
        self.rest = nn.Sequential(*layers)

    def forward(self, parts: list[torch.Tensor], agent: torch.Tensor, repeats: list[int]) -> torch.Tensor:
        """Outside `Form.chain` and without gradients, each ReLU layer's GEMM applies bias and ReLU
        in its epilogue (`SplitInputLinear`): the same numbers."""
        if not self.relu:
            return self.rest(self.first(parts, agent, repeats))
        x = self.first(parts, agent, repeats, relu=True)  # rest[0], the ReLU, applied
        if self.first.form == Form.chain or torch.is_grad_enabled():
            return self.rest[1:](x)
        dtype = x.dtype
        layers = list(self.rest)
        for i in range(1, len(layers)):
            layer = layers[i]
            if isinstance(layer, nn.Linear):
                w, b = layer.weight.to(dtype), layer.bias.to(dtype)
                followed_by_relu = i + 1 < len(layers) and isinstance(layers[i + 1], nn.ReLU)
                x = torch._addmm_activation(b, x, w.t()) if followed_by_relu else F.linear(x, w, b)
            elif not isinstance(layer, nn.ReLU):  # the ReLUs ran in the GEMMs before them
                raise TypeError(f"_MLP: unexpected layer {type(layer).__name__} in a ReLU network")
        return x


class GRU(nn.Module):
    """One GRU layer, shared by all UAVs: `forward(x [C, R, E], hidden [R, H] float32, starts [C, R]
    bool | None) -> (outputs [C, R, H] float32, last hidden [R, H] float32)` over `C` steps of `R`
    independent sequences; where `starts[c]` (c >= 1) is True, an episode began at step c and the
    hidden state is zeroed before it (`starts[0]` is not read: a sequence's first hidden state comes
    zeroed already where it should be).

    The parameters are an `nn.GRUCell`'s (same names, shapes and gate order r, z, n), but the step is
    written out rather than calling the cell: the input product of all `C` steps is one matmul (the
    cell would do `C` small ones), and the gates and the hidden state stay float32 under autocast
    (the cell would round the state to bf16 at every step, and the stored state must be exactly
    what the next step saw). `nn.GRU` does not fit either: it cannot zero the state mid-sequence
    where one sample's episode ends. Orthogonal weights per gate, zero biases (as rMAPPO).
    """

    def __init__(self, input_size: int, hidden_size: int, generator: torch.Generator | None = None):
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)
        self.hidden_size = hidden_size
        with torch.no_grad():
            for weight in (self.cell.weight_ih, self.cell.weight_hh):
                for gate in weight.chunk(3, 0):
                    gate.copy_(nn.init.orthogonal_(torch.empty_like(gate), generator=generator))
            self.cell.bias_ih.zero_()
            self.cell.bias_hh.zero_()

    def forward(self, x: torch.Tensor, hidden: torch.Tensor,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        cell = self.cell
        gi = F.linear(x, cell.weight_ih, cell.bias_ih)  # [C, R, 3H], every step's input product at once
        outputs = []
        # unbind, not gi[c]: each indexing's backward would fill a zero gradient of all of gi
        for c, gi_c in enumerate(gi.unbind(0)):
            if c > 0 and starts is not None:
                hidden = torch.where(starts[c, :, None], torch.zeros_like(hidden), hidden)
            gh = F.linear(hidden, cell.weight_hh, cell.bias_hh)
            i_r, i_z, i_n = gi_c.float().chunk(3, -1)
            h_r, h_z, h_n = gh.float().chunk(3, -1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            hidden = n + z * (hidden - n)  # (1 - z) * n + z * h
            outputs.append(hidden)
        return torch.stack(outputs), hidden


class Actor(nn.Module):
    """`forward(local [M, L] f32, agent [M] int64, state | None, state_repeat=1, heading | None)
    -> logits [M, A]` (autocast dtype under AMP).

    With `model.actor_shared_map` the actor also sees the shared coverage map, from the global
    `state` (`[M / state_repeat, S]`, shared by runs of `state_repeat` consecutive rows): the
    pooled obstacle and coverage map (its product computed once per state) and each UAV's heading
    to the nearest uncovered block (`agents.algo.heading`). UAVs that share one coverage map by
    communication; off, the actor sees its local observation (and id) only.

    With `model.recurrent` (`self.recurrent`) a `GRU` sits between the encoder and the head, and
    `forward` also takes `hidden [R, H]` float32 (required) and `starts [C, R]` bool | None, reads
    the `M = C * R` rows as `C` consecutive steps of `R` sequences (step-major), and returns
    `(logits [M, A], last hidden [R, H] float32)`. The rollout calls it with one step (C = 1), the
    update with a chunk of `train.chunk_length` steps: the same function, so the same numbers.
    """

    def __init__(self, local_dim: int, num_agents: int, num_actions: int, cfg: ModelConfig,
                 generator: torch.Generator | None = None, env_cfg: EnvConfig | None = None,
                 form: Form = Form.chain):
        super().__init__()
        self.map_dim = 2 * env_cfg.state_pool**2 if env_cfg is not None else 0
        self.heading = MapHeading(env_cfg) if env_cfg is not None else None
        dims = [local_dim, HEADING_DIM, self.map_dim] if self.map_dim else [local_dim]
        self.recurrent = cfg.recurrent
        self.net = _MLP(dims, num_agents if cfg.agent_id else 0, cfg, None if self.recurrent else num_actions,
                        0.01, generator)
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

    def forward(self, local: torch.Tensor, agent: torch.Tensor, state: torch.Tensor | None = None,
                state_repeat: int = 1, heading: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
                starts: torch.Tensor | None = None):
        """`heading [M, 3]`: each row's UAV's entry of `headings(state)` (shared-map actors)."""
        if not self.map_dim:
            x = self.net([local], agent, [1])
        else:
            x = self.net([local, heading, state[:, :self.map_dim]], agent, [1, 1, state_repeat])
        if not self.recurrent:
            return x
        if hidden is None:
            raise ValueError("a recurrent actor needs its hidden state: forward(..., hidden=[R, H] float32)")
        rows = hidden.shape[0]
        outputs, hidden = self.gru(x.view(-1, rows, x.shape[-1]), hidden, starts)
        return self.head(outputs.view(x.shape[0], -1)), hidden

    def act(self, obs: dict[str, torch.Tensor], agent: torch.Tensor, noise: ActionNoise | None,
            autocast: Callable[[], contextlib.AbstractContextManager], deterministic: bool = False,
            hidden: torch.Tensor | None = None):
        """One policy step for observations `obs` (`local [B, N, L]`, `state [B, S]`) of agents
        `agent [B * N]` int64: actions `[B, N]` int64, their log-probabilities `[B, N]` float32, the
        shared-map actor's headings `[B, N, 3]` (None for a local actor) and a recurrent actor's next
        hidden state `[B, N, H]` float32 (None for a feed-forward one, which takes no `hidden`).
        Sampled actions draw this step's `noise` (none needed when `deterministic`)."""
        local = obs["local"]
        b, n, _ = local.shape
        with autocast():
            heading = self.headings(obs["state"]) if self.map_dim else None
            out = self(local.reshape(b * n, -1), agent, obs["state"] if self.map_dim else None, state_repeat=n,
                       heading=heading.view(b * n, -1) if heading is not None else None,
                       hidden=hidden.view(b * n, -1) if hidden is not None else None)
        logits, hidden = out if self.recurrent else (out, None)
        logits = logits.float()
        actions = torch.argmax(logits, dim=-1) if deterministic else sample(logits, noise.uniform().view(b * n))
        logprob = log_prob(logits, actions)
        return actions.view(b, n), logprob.view(b, n), heading, hidden.view(b, n, -1) if hidden is not None else None


def make_actor(env_cfg: EnvConfig, cfg: ModelConfig, generator: torch.Generator | None = None,
               form: Form = Form.chain) -> Actor:
    """The actor for a task: local observation, plus the shared map when `actor_shared_map`."""
    return Actor(env_cfg.local_obs_dim, env_cfg.num_uavs, env_cfg.num_actions, cfg, generator,
                 env_cfg if cfg.actor_shared_map else None, form)


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
    """`forward(state, local [M, L], agent [M]) -> value [M] float32` (normalized scale when value
    normalization is on). `state` is `[M, S]`, or `[M / state_repeat, S]` shared by runs of
    `state_repeat` consecutive rows (one environment's agents). With `ippo` it is ignored."""

    def __init__(self, state_dim: int, local_dim: int, num_agents: int, cfg: ModelConfig,
                 generator: torch.Generator | None = None, form: Form = Form.chain):
        super().__init__()
        self.centralized = cfg.critic == CriticKind.mappo
        dims = [state_dim, local_dim] if self.centralized else [local_dim]
        self.net = _MLP(dims, num_agents if cfg.agent_id else 0, cfg, 1, 1.0, generator)
        self.net.first.form = Form(form)

    def forward(self, state: torch.Tensor | None, local: torch.Tensor, agent: torch.Tensor,
                state_repeat: int = 1) -> torch.Tensor:
        if self.centralized:
            value = self.net([state, local], agent, [state_repeat, 1])
        else:
            value = self.net([local], agent, [1])
        return value.squeeze(-1).float()


def log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """`log_prob [M]` float32 of int `actions [M]` under `logits [M, A]` (any float dtype): the one
    expression the rollout (here) and the update (`categorical`) both compute, so the PPO ratio is
    exactly 1 before the first update (within 1e-4 where the compiled rollout's actor is in
    `Form.fused`, `agents.algo.rollout.compile_rollout_step`); the rollout needs no entropy."""
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
