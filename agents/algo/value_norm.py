"""Running return normalization for the critic (MAPPO's `ValueNorm`).

The critic predicts returns on a normalized scale. Running first and second moments decay by
`beta` per `update`, with a debiasing term (as in Adam) so early estimates are not pulled to zero:

    m1 <- beta * m1 + (1 - beta) * mean(x)        m2 <- beta * m2 + (1 - beta) * mean(x^2)
    d  <- beta * d  + (1 - beta)                  mean = m1 / d,  var = max(m2 / d - mean^2, var_min)

Everything stays a device tensor (no host sync); the statistics are buffers, so they travel in
`state_dict()` with checkpoints. With `enabled=False` it is the identity.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class ValueNorm(nn.Module):
    """The running mean and variance of the critic's targets (the recursion of the module docstring).

    Args:
        beta: the moments' decay per `update`, in (0, 1).
        epsilon: the smallest debiasing term divided by.
        var_min: the smallest variance.
        enabled: False makes it the identity.
        device: where the statistics live.

    Raises:
        ValueError: `beta` outside (0, 1).
    """

    def __init__(
        self,
        beta: float = 0.995,
        epsilon: float = 1e-5,
        var_min: float = 1e-2,
        enabled: bool = True,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        if not 0.0 < beta < 1.0:
            raise ValueError(f"beta must be in (0, 1), got {beta!r}")
        self.beta, self.epsilon, self.var_min, self.enabled = beta, epsilon, var_min, enabled
        self.register_buffer("running_mean", torch.zeros((), device=device))
        self.register_buffer("running_mean_sq", torch.zeros((), device=device))
        self.register_buffer("debiasing_term", torch.zeros((), device=device))

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.debiasing_term.clamp_min(self.epsilon)
        mean = self.running_mean / d
        var = (self.running_mean_sq / d - mean * mean).clamp_min(self.var_min)
        return mean, var

    @torch.no_grad()
    def update(self, x: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        """Fold a batch of returns into the running statistics.

        Args:
            x: returns, any shape, float32.
            reduce: (data-parallel runs) maps this rank's `[mean, mean of squares]` to the mean over
                ranks, so every replica keeps the same statistics.
        """
        if not self.enabled:
            return
        x = x.detach().float()
        moments = torch.stack([x.mean(), (x * x).mean()])
        if reduce is not None:
            moments = reduce(moments)
        b = self.beta
        self.running_mean.mul_(b).add_((1 - b) * moments[0])
        self.running_mean_sq.mul_(b).add_((1 - b) * moments[1])
        self.debiasing_term.mul_(b).add_(1 - b)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        mean, var = self.mean_var()
        return (x - mean) / var.sqrt()

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        mean, var = self.mean_var()
        return x * var.sqrt() + mean
