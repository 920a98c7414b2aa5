"""ValueNorm: debiased running moments against a direct computation; normalize/denormalize."""

from __future__ import annotations

import pytest
import torch

from agents.algo.value_norm import ValueNorm


def test_running_moments_match_closed_form():
    beta = 0.9
    vn = ValueNorm(beta=beta, var_min=1e-6)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(50, generator=gen) * 3 + 5 for _ in range(4)]
    for x in batches:
        vn.update(x)
    # weights of batch k (of K): (1 - beta) * beta^(K-1-k), normalised by their sum (debiasing)
    w = torch.tensor([(1 - beta) * beta ** (3 - k) for k in range(4)], dtype=torch.float64)
    m1 = sum(wk * x.double().mean() for wk, x in zip(w, batches)) / w.sum()
    m2 = sum(wk * (x.double() ** 2).mean() for wk, x in zip(w, batches)) / w.sum()
    mean, var = vn.mean_var()
    assert mean.item() == pytest.approx(m1.item(), rel=1e-5)
    assert var.item() == pytest.approx((m2 - m1**2).item(), rel=1e-4)


def test_normalize_inverts_denormalize_and_whitens():
    vn = ValueNorm(beta=0.5)
    x = torch.linspace(-10, 30, 101)
    vn.update(x)
    torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x, rtol=1e-5, atol=1e-4)
    z = vn.normalize(x)
    assert abs(z.mean().item()) < 1e-4 and z.std(unbiased=False).item() == pytest.approx(1.0, rel=1e-4)


def test_disabled_is_identity_and_state_dict_round_trips():
    x = torch.randn(7)
    off = ValueNorm(enabled=False)
    off.update(x * 100)
    assert torch.equal(off.normalize(x), x) and torch.equal(off.denormalize(x), x)
    on = ValueNorm(beta=0.8)
    on.update(x * 100)
    copy = ValueNorm(beta=0.8)
    copy.load_state_dict(on.state_dict())
    assert torch.equal(copy.normalize(x), on.normalize(x))


def test_bad_beta_is_rejected():
    with pytest.raises(ValueError, match="beta"):
        ValueNorm(beta=1.0)
