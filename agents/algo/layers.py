"""The layers MAPPO's networks are built from: `SplitInputLinear` (a first layer over several inputs
without their concatenation, computed in the `Form` chosen at build time), `MLP` and `GRU`."""

from __future__ import annotations

import enum
import math

import torch
from torch import nn
from torch.nn import functional as F

from agents.config import Activation, ModelConfig


def layer_init(
    layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0, generator: torch.Generator | None = None
) -> nn.Linear:
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
    sum of per-part products without building the concatenation. A part can be given once per
    environment and shared by its agents (`repeats`). The weight is one `[out, sum(dims) + num_agents]`
    matrix, initialised as the equivalent `nn.Linear` (orthogonal over the whole input).

    `form` (`Form`, set where the network is built) says how no-grad calls compute it: `chain`,
    `epilogue` (the same numbers) or `fused` (compiled callers; differs from `chain` by rounding).

    Args:
        dims: the parts' widths, in order.
        num_agents: the agent id's one-hot width (0: no agent id).
        out_dim: the output width.
        generator: the initialisation's random generator (None: torch's default).
        wrap_ids: the one-hot is of the id mod `num_agents` (`model.agent_roles`: any team size).
    """

    def __init__(
        self,
        dims: list[int],
        num_agents: int,
        out_dim: int,
        generator: torch.Generator | None,
        wrap_ids: bool = False,
    ):
        super().__init__()
        self.dims, self.num_agents, self.wrap_ids = dims, num_agents, wrap_ids
        self.linear = layer_init(nn.Linear(sum(dims) + num_agents, out_dim), generator=generator)
        self.register_buffer("agent_ids", torch.arange(num_agents), persistent=False)
        self.form = Form.chain

    def forward(
        self, parts: list[torch.Tensor], agent: torch.Tensor, repeats: list[int], relu: bool = False
    ) -> torch.Tensor:
        """The layer's output for `M` rows.

        Args:
            parts: per part, `[M / r, d]` with `r` its entry of `repeats` and `d` of `dims`.
            agent: `[M]` int64 agent ids (ignored when `num_agents` is 0).
            repeats: per part, how many consecutive rows share one of its rows (1: one row each).
            relu: return the ReLU of the sum.

        Returns:
            `[M, out]` in the compute dtype (autocast's, or the weight's).
        """
        # The products accumulate in one [M, out] tensor in a fixed order whatever the form (so the
        # rollout and the update compute the same numbers): the shared parts' product (with the
        # bias) copied to its rows, then the narrow per-row parts' (the heading, the agent id), then
        # the first per-row part's (the local observation), each GEMM adding the sum so far.
        w, bias = self.linear.weight, self.linear.bias
        # Cast explicitly (autocast would, for `linear` and `addmm`, but has no rule for `_addmm_activation`).
        dtype = torch.get_autocast_dtype(w.device.type) if torch.is_autocast_enabled(w.device.type) else w.dtype
        w, bias = w.to(dtype), bias.to(dtype)
        form = Form.chain if torch.is_grad_enabled() else self.form
        if self.num_agents and self.wrap_ids:
            agent = agent.remainder(self.num_agents)  # the role: one op, on the roles' networks only
        # epilogue and fused: GEMMs accumulate in place and the last applies the ReLU in its epilogue
        # (torch._addmm_activation: autograd has no derivative for it, vmap no rule for in-place GEMMs)
        in_place = form != Form.chain
        per_row, shared, narrow, narrow_w, col = [], [], [], [], 0
        for x, d, r in zip(parts, self.dims, repeats):
            w_part, col = w[:, col : col + d], col + d
            if r > 1:
                shared.append((x, w_part, r))
            elif not per_row:
                if torch.is_grad_enabled():
                    # A contiguous copy (out x d, 165 KB in bf16 on the default task): autograd then takes the weight's
                    # gradient as (dy^T x)^T, 1.5x faster than x^T dy in bf16 on an AVX512-BF16 CPU (the update's
                    # largest product: 191 -> 129 ms an iteration, Zen 4 EPYC), the same numbers bit for bit
                    w_part = w_part.contiguous()
                per_row.append((x, w_part))
            else:
                narrow.append(x)
                narrow_w.append(w_part)
        if form == Form.fused and per_row:
            return self._pointwise_tail(per_row[0], shared, narrow, narrow_w, agent, w[:, col:], bias, dtype, relu)
        if self.num_agents:
            # A one-hot product rather than a row lookup `w[:, col:].t()[agent]`: the lookup's
            # backward is a serial index_put on the CPU (docs/performance.md, "Design choices, measured").
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


class MLP(nn.Module):
    """`SplitInputLinear` -> activation -> (`num_layers` - 1) x (Linear -> activation) -> head
    (no head when `out_dim` is None: the encoder of a recurrent actor)."""

    def __init__(
        self,
        dims: list[int],
        num_agents: int,
        cfg: ModelConfig,
        out_dim: int | None,
        out_std: float,
        generator: torch.Generator | None,
    ):
        super().__init__()
        act = ACTIVATIONS[cfg.activation]
        self.relu = cfg.activation == Activation.relu
        wrap = not cfg.agent_id and cfg.agent_roles > 0
        self.first = SplitInputLinear(dims, cfg.id_width(num_agents), cfg.hidden_size, generator, wrap)
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
                raise TypeError(f"MLP: unexpected layer {type(layer).__name__} in a ReLU network")
        return x


class GRU(nn.Module):
    """One GRU layer, shared by all UAVs, over `C` steps of `R` independent sequences. Its parameters
    are an `nn.GRUCell`'s (same names, shapes and gate order r, z, n); orthogonal weights per gate,
    zero biases (as rMAPPO).

    Args:
        input_size: `E`, the input width.
        hidden_size: `H`, the hidden state's width.
        generator: the initialisation's random generator (None: torch's default).
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

    def forward(
        self, x: torch.Tensor, hidden: torch.Tensor, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the `C` steps.

        Args:
            x: `[C, R, E]` inputs, step-major.
            hidden: `[R, H]` float32, the state before the first step.
            starts: `[C, R]` bool | None; where `starts[c]` (c >= 1) is True an episode began at step
                c and the state is zeroed before it (`starts[0]` is not read: the given state is).

        Returns:
            `(outputs [C, R, H] float32, last hidden [R, H] float32)`.
        """
        # The step is written out rather than calling the cell: the input product of all C steps is
        # one matmul (the cell would do C small ones), and the gates and the state stay float32 under
        # autocast (the cell would round the state to bf16 each step, and the stored state must be
        # exactly what the next step saw). nn.GRU cannot zero the state mid-sequence.
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
