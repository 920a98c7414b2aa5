"""stream_train's optimisation: a split or accumulated batch is one optimizer step; AMP, clipping."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from agents.placement import stream_train


def cuda_oom(rows: int) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {rows} MiB (GPU 0; 79.11 GiB total)")


class FailBackward(torch.autograd.Function):
    """Identity whose backward "runs out of memory" on more than ``limit`` rows (after the layers
    behind it in backward order have their gradients: the partial accumulation to survive)."""

    @staticmethod
    def forward(ctx, x, limit, seen):
        ctx.limit, ctx.seen = limit, seen
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if grad.shape[0] > ctx.limit:
            ctx.seen.append(grad.shape[0])
            raise cuda_oom(grad.shape[0])
        return grad, None, None


class Net(nn.Module):
    def __init__(self, limit=math.inf):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 1)
        self.limit, self.failed_backwards, self.l2_had_grad = limit, [], []

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        if self.limit < math.inf:
            self.l2_had_grad.append(self.l2.weight.grad is not None)
            h = FailBackward.apply(h, self.limit, self.failed_backwards)
        return self.l2(h).squeeze(-1)


def data(n, rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 8, generator=g), torch.randn(rows, generator=g)) for _ in range(n)]


def train(batches, *, net=None, oom_on_call=(), **kwargs):
    """Train a fresh Net with AdamW (not linear in the gradient: two steps never equal one)."""
    net = net or Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    calls = []

    def loss_fn(batch):
        x, y = batch
        calls.append(len(x))
        if len(calls) in oom_on_call:
            raise cuda_oom(len(x))
        return nn.functional.mse_loss(net(x), y)

    stats = stream_train(loss_fn, batches, opt, **kwargs)
    return [p.detach().clone() for p in net.parameters()], stats, calls


def assert_same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_a_split_batch_is_one_step_giving_the_unsplit_parameters():
    batches = data(3, 12)
    want, want_stats, _ = train(batches)
    got, stats, calls = train(batches, oom_on_call={1})  # the first full-batch attempt runs out of memory
    assert calls == [12, 6, 6, 6, 6, 6, 6] and stats.backoffs == 1 and stats.micro_batch == 6
    assert stats.steps == stats.batches == 3 and stats.samples == 36
    assert_same(got, want)
    assert stats.losses == pytest.approx(want_stats.losses, rel=1e-5)
    # what each part as its own step (the old behaviour) gives instead: far outside the tolerance
    halves = [(x[s : s + 6], y[s : s + 6]) for x, y in batches for s in (0, 6)]
    old, _, _ = train(halves)
    assert max((o - w).abs().max().item() for o, w in zip(old, want)) > 1e-3


def test_an_oom_inside_backward_counts_no_gradient_twice():
    batches = data(2, 12)
    want, _, _ = train(batches)
    net = Net(limit=3)  # backward fails on 12 rows (l2 done), on 6 rows (owing l1 only), fits at 3
    got, stats, calls = train(batches, net=net)
    assert net.failed_backwards == [12, 6] and calls == [12, 6] + [3] * 8
    assert stats.micro_batch == 3 and stats.backoffs == 2 and stats.steps == 2
    assert net.l2_had_grad[:2] == [False, True]  # l2 kept the 12 rows' gradient when l1's failed
    assert_same(got, want)


def test_accumulate_k_batches_is_one_step_on_their_union():
    batches = data(5, 6)
    union = [(torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])) for a, b in zip(batches[0:4:2], batches[1:4:2])]
    want, _, _ = train(union + batches[4:])  # the last group holds one batch: a step on it alone
    got, stats, calls = train(batches, accumulate=2, oom_on_call={3})  # and a split inside a group
    assert stats.steps == 3 and stats.batches == 5 and stats.backoffs == 1
    assert calls[:4] == [6, 6, 6, 3]
    assert_same(got, want)


def test_bf16_runs_the_forward_under_autocast_and_keeps_fp32_parameters():
    for precision, dtype in ((None, torch.float32), ("bf16", torch.bfloat16), (torch.bfloat16, torch.bfloat16)):
        net, seen = Net(), []
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        before = [p.detach().clone() for p in net.parameters()]

        def loss_fn(batch, net=net, seen=seen):
            out = net(batch[0])
            seen.append(out.dtype)
            return nn.functional.mse_loss(out.float(), batch[1])

        stats = stream_train(loss_fn, data(2, 4), opt, precision=precision)
        assert seen == [dtype, dtype] and all(math.isfinite(v) for v in stats.losses)
        assert all(p.dtype == torch.float32 for p in net.parameters())
        assert all(not torch.equal(p, b) for p, b in zip(net.parameters(), before))


def test_fp16_scales_the_loss_and_skips_a_step_whose_gradients_overflow():
    for precision in ("fp16", None):
        net, calls = Net(), []
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def loss_fn(batch, net=net, calls=calls):
            calls.append(1)
            loss = nn.functional.mse_loss(net(batch[0]).float(), batch[1])
            return loss * math.inf if len(calls) == 1 else loss  # the first step's gradients are inf

        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        stats = stream_train(loss_fn, data(2, 4), opt, precision=precision, scheduler=scheduler)
        finite = all(torch.isfinite(p).all() for p in net.parameters())
        if precision == "fp16":  # the scaler skipped the inf step and took the second; the schedule waited
            assert stats.skipped_steps == 1 and stats.steps == 2 and finite and scheduler.last_epoch == 1
        else:  # without it the inf gradients reach the parameters
            assert stats.skipped_steps == 0 and not finite and scheduler.last_epoch == 2


def test_max_grad_norm_clips_the_unscaled_gradient_and_the_scheduler_steps_per_optimizer_step():
    for precision in (None, "fp16"):
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=1.0)
        before = [p.detach().clone() for p in net.parameters()]
        x, y = data(1, 8)[0]
        # a gradient norm near 1e-3, small enough for fp16 at the scaler's first scale (65536)
        stats = stream_train(
            lambda b, net=net: 1e-3 * nn.functional.mse_loss(net(b[0]).float(), b[1]),
            [(x, y)],
            opt,
            precision=precision,
            max_grad_norm=1e-5,
        )
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(net.parameters(), before)]).norm()
        # lr 1: the step is the gradient clipped to 1e-5 (clipping the scaled one would move 65536x less)
        assert stats.skipped_steps == 0 and moved.item() == pytest.approx(1e-5, rel=1e-2)

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    stats = stream_train(
        lambda b: nn.functional.mse_loss(net(b[0]), b[1]), data(5, 4), opt, accumulate=2, scheduler=scheduler
    )
    assert stats.steps == 3 and scheduler.last_epoch == 3


def test_empty_batches_are_skipped_without_a_step_or_a_loss():
    # a shard filtered to nothing used to divide by its 0 rows (ZeroDivisionError)
    batches, empty = data(4, 6), (torch.zeros(0, 8), torch.zeros(0))
    want, want_stats, _ = train(batches, accumulate=2)
    got, stats, calls = train([empty, batches[0], empty, batches[1], batches[2], empty, batches[3]], accumulate=2)
    assert_same(got, want)  # the empties count towards no group: the same two steps
    assert calls == [6, 6, 6, 6] and stats.steps == 2 and stats.batches == 4 and stats.losses == want_stats.losses
    _, stats, calls = train([empty, empty])
    assert calls == [] and stats.steps == stats.batches == 0
