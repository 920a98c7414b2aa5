"""OOM back-off (injected and real out-of-memory errors) and streaming training's flat memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from agents.placement import is_oom_error, oom_backoff, split_batch, stream_train
from agents.placement.tensors import batch_len, to_device
from uavsim.machine.host_memory import host_memory, process_rss

MiB = 2**20


def cuda_oom(rows: int) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {rows} MiB (GPU 0; 79.11 GiB total)")


# ---------------------------------------------------------------------------- oom_backoff
def test_backoff_halves_until_it_fits_and_remembers_the_size():
    tried, backoffs = [], []

    @oom_backoff(start=128, on_backoff=lambda old, new, msg: backoffs.append((old, new, msg)))
    def score(batch_size, scale):
        tried.append(batch_size)
        if batch_size > 24:
            raise cuda_oom(batch_size)
        return batch_size * scale

    assert score(2) == 32
    assert tried == [128, 64, 32, 16]
    assert [b[:2] for b in backoffs] == [(128, 64), (64, 32), (32, 16)]
    assert backoffs[0][2].startswith("OutOfMemoryError: CUDA out of memory")
    assert score(3) == 48 and tried[-1] == 16 and score.batch_size == 16  # no second descent


def test_backoff_recognises_message_only_ooms_and_passes_other_errors_through():
    calls = []

    @oom_backoff(start=8, factor=0.5)
    def old_style(batch_size):
        calls.append(batch_size)
        if batch_size > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size

    assert old_style() == 2 and calls == [8, 4, 2]

    @oom_backoff(start=8)
    def buggy(batch_size):
        calls.append(("buggy", batch_size))
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        buggy()
    assert calls[-1] == ("buggy", 8)  # tried once, not backed off


def test_backoff_gives_up_below_min_size():
    @oom_backoff(start=4, min_size=2)
    def never_fits(batch_size):
        raise cuda_oom(batch_size)

    with pytest.raises(torch.OutOfMemoryError, match="batch size 2.*min_size=2"):
        never_fits()


def test_backoff_tries_min_size_before_giving_up():
    tried = []

    @oom_backoff(start=128, min_size=100)  # halving would jump from 128 straight past 100
    def fits_at_100(batch_size):
        tried.append(batch_size)
        if batch_size > 100:
            raise cuda_oom(batch_size)
        return batch_size

    assert fits_at_100() == 100 and tried == [128, 100]
    tried.clear()

    @oom_backoff(start=128, min_size=100)
    def never_fits(batch_size):
        tried.append(batch_size)
        raise cuda_oom(batch_size)

    with pytest.raises(torch.OutOfMemoryError, match="batch size 100, min_size=100"):
        never_fits()
    assert tried == [128, 100]


def test_backoff_on_a_real_allocator_failure():
    total, _ = host_memory()
    try:
        torch.empty(2 * total, dtype=torch.uint8)
    except RuntimeError as exc:
        assert is_oom_error(exc)
    else:
        pytest.skip("this host overcommits memory without limit, so no allocation fails")
    unit = total // 3

    @oom_backoff(start=8)
    def allocate(batch_size):
        # asks the real CPU allocator for batch_size/3 of the RAM (not touched, so not resident)
        return torch.empty(batch_size * unit, dtype=torch.uint8).numel() // unit

    assert allocate() <= 2


def test_backoff_arguments_are_checked():
    with pytest.raises(ValueError, match="factor"):
        oom_backoff(lambda b: b, factor=1.5)
    with pytest.raises(ValueError, match="start"):
        oom_backoff(lambda b: b, start=0)
    with pytest.raises(ValueError, match="min_size"):
        oom_backoff(lambda b: b, start=4, min_size=8)
    with pytest.raises(TypeError, match="first positional argument"):
        oom_backoff(lambda: 1)


def test_is_oom_error():
    assert is_oom_error(cuda_oom(1))
    assert is_oom_error(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"))
    # the CPU allocator's words on Windows (c10/core/impl/alloc_cpu.cpp, _MSC_VER)
    assert is_oom_error(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
            "you tried to allocate 8589934592 bytes."
        )
    )
    assert not is_oom_error(RuntimeError("index out of range"))
    assert not is_oom_error(ValueError("out of memory"))  # not a RuntimeError from torch


# ---------------------------------------------------------------------------- stream_train
class Extractor(nn.Module):
    """Frozen feature extractor: (B, 64) -> (B, 4096) embeddings, 16 KiB per row (cheap to compute)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(-1.0, 1.0, 64))

    def forward(self, x):
        return torch.tanh(x.unsqueeze(-1) * self.scale).flatten(1)


def make_trainer():
    """(extractor, loss_fn, optimizer) of seed 001's shape: frozen embeddings, a trained head."""
    torch.manual_seed(0)
    extractor, head = Extractor(), nn.Linear(4096, 1)

    def loss_fn(batch):
        with torch.no_grad():
            emb = extractor(batch["x"])
        return nn.functional.mse_loss(head(emb).squeeze(-1), batch["y"])

    return extractor, loss_fn, torch.optim.SGD(head.parameters(), lr=1e-3)


def batches(n, rows=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield {"x": torch.randn(rows, 64, generator=g), "y": torch.randn(rows, generator=g)}


def test_streaming_memory_stays_flat_while_accumulating_grows():
    _, loss_fn, opt = make_trainer()
    stats = stream_train(loss_fn, batches(160), opt, device="cpu", track_memory=True)
    assert stats.steps == stats.batches == 160 and stats.samples == 160 * 64 and len(stats.losses) == 160
    assert all(isinstance(v, float) for v in stats.losses)
    # 160 batches x 1 MiB of embeddings went through; after warm-up nothing may accumulate
    growth = max(stats.memory[30:]) - stats.memory[30]
    assert growth < 24 * MiB, f"streaming grew by {growth / MiB:.1f} MiB"

    # the same measurement sees the seed-001 bug: keeping every batch's embeddings
    extractor, _, _ = make_trainer()
    kept, rss = [], []
    with torch.no_grad():
        for b in batches(160):
            kept.append(extractor(b["x"]))
            rss.append(process_rss())
    assert rss[-1] - rss[30] > 100 * MiB  # 130 more batches kept, 1 MiB each


def test_stream_splits_a_batch_that_runs_out_of_memory_and_goes_on():
    seen, w = [], nn.Parameter(torch.zeros(()))

    def loss_fn(batch):
        if batch_len(batch) > 8:
            raise cuda_oom(batch_len(batch))
        seen.extend(batch["id"].tolist())
        return batch["id"].float().mean() + w

    data = [{"id": torch.arange(i * 32, (i + 1) * 32), "tag": "same"} for i in range(5)]
    stats = stream_train(loss_fn, data, torch.optim.SGD([w], lr=0.1))
    assert seen == list(range(160))  # every row exactly once, in order
    assert stats.micro_batch == 8 and stats.backoffs == 2  # 32 -> 16 -> 8, then pre-split
    assert stats.steps == stats.batches == 5 and stats.samples == 160  # one step per batch, split or not
    assert stats.losses == pytest.approx([31.9 * i + 15.5 for i in range(5)])  # batch means (w: -0.1 a step)
    assert w.item() == pytest.approx(-0.5)  # 5 steps of lr x d(loss)/dw = 1, not 20


def test_stream_gives_up_at_the_smallest_piece_and_passes_other_errors():
    w = nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)

    def always_oom(batch):
        raise cuda_oom(1)

    with pytest.raises(torch.OutOfMemoryError, match="min_micro_batch=2"):
        stream_train(always_oom, [torch.zeros(8, 2)], opt, min_micro_batch=2)
    with pytest.raises(torch.OutOfMemoryError):
        stream_train(always_oom, [torch.zeros(8, 2)], opt, split_on_oom=False)

    def buggy(batch):
        raise KeyError("labels")

    with pytest.raises(KeyError):
        stream_train(buggy, [torch.zeros(8, 2)], opt)


def test_stream_max_steps_and_argument_checks():
    w = nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)
    read = []

    def loss_fn(b):
        read.append(b)
        return b.sum() * w

    stats = stream_train(loss_fn, [torch.zeros(4, 1)] * 10, opt, max_steps=3, accumulate=2)
    assert stats.steps == 3 and stats.batches == len(read) == 6
    bad = [
        (dict(max_steps=-1), ValueError, "max_steps"),
        (dict(accumulate=0), ValueError, "accumulate"),
        (dict(precision="fp8"), ValueError, "precision"),
        (dict(max_grad_norm=0.0), ValueError, "max_grad_norm"),
        (dict(scheduler=5), TypeError, "scheduler"),
    ]
    for kwargs, error, name in bad:
        with pytest.raises(error, match=name):
            stream_train(loss_fn, [], opt, **kwargs)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer, got list"):
        stream_train(loss_fn, [], [w])
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        stream_train("step", [], opt)
    with pytest.raises(ValueError, match="scalar loss"):
        stream_train(lambda b: b * w, [torch.zeros(4, 2)], opt)
    with pytest.raises(TypeError, match="scalar loss tensor, got float"):
        stream_train(lambda b: 0.5, [torch.zeros(4, 2)], opt)
    with pytest.raises(ValueError, match="does not require grad"):
        stream_train(lambda b: b.sum(), [torch.zeros(4, 2)], opt)


def test_split_and_move_nested_batches():
    batch = {"x": torch.arange(10), "pair": (torch.zeros(10, 2), torch.ones(10)), "name": "b"}
    pieces = split_batch(batch, 4)
    assert [batch_len(p) for p in pieces] == [4, 4, 2]
    assert pieces[2]["x"].tolist() == [8, 9] and pieces[1]["name"] == "b" and isinstance(pieces[0]["pair"], tuple)
    moved = to_device(batch, "cpu")
    assert moved["x"] is batch["x"] and moved["name"] == "b"
    with pytest.raises(ValueError, match="to_device's device 'gpu' is not a device string"):
        to_device(batch, "gpu")
    with pytest.raises(TypeError, match="to_device's device must be a str, int or torch.device, got float"):
        to_device(batch, 0.5)
    if not torch.cuda.is_available():  # a CPU-only build: not torch's "Torch not compiled with CUDA enabled"
        with pytest.raises(ValueError, match="to_device asks for cuda:0, but CUDA is not available"):
            to_device(batch, "cuda:0")
    with pytest.raises(ValueError, match="disagree"):
        batch_len({"a": torch.zeros(3), "b": torch.zeros(4)})
    with pytest.raises(TypeError, match="without tensors"):
        batch_len({"a": 1})


def test_to_cpu_ships_only_a_views_own_elements():
    import pickle

    from agents.placement import to_cpu

    big = torch.zeros(1000, 256)
    row = big[3]
    assert len(pickle.dumps(row)) > 1000 * 256 * 4  # plain pickling carries the whole batch
    small = to_cpu({"row": row, "tag": 1})
    assert len(pickle.dumps(small)) < 4 * 256 * 4 and small["tag"] == 1
    assert torch.equal(small["row"], row)
    whole = torch.ones(4, requires_grad=True) * 2
    assert to_cpu(whole).requires_grad is False
    # sparse tensors have no one storage to measure (to_cpu raised, so dp_map could not ship them); they pickle
    coo, csr = torch.eye(3).to_sparse(), torch.eye(3).to_sparse_csr()
    moved = pickle.loads(pickle.dumps(to_cpu({"coo": coo, "csr": csr})))
    assert torch.equal(moved["coo"].to_dense(), torch.eye(3)) and moved["csr"].layout == torch.sparse_csr


def test_containers_come_back_as_their_own_type():
    # a diffusers pipeline's output is a dataclass and an OrderedDict whose constructor takes its fields: it
    # came back from a worker as a plain dict (`result.images` then failed); a defaultdict lost its factory
    import collections
    import dataclasses

    from agents.placement import to_cpu

    diffusers = pytest.importorskip("diffusers")
    out = diffusers.pipelines.stable_diffusion.StableDiffusionPipelineOutput(
        images=[torch.ones(3, 2, 2)], nsfw_content_detected=None
    )
    moved = to_cpu(out)
    assert type(moved) is type(out) and torch.equal(moved.images[0], out.images[0])
    assert moved.nsfw_content_detected is None and list(moved.keys()) == ["images"]

    counts = collections.defaultdict(int, {"x": torch.zeros(2)})
    moved = to_device(counts, "cpu")
    assert type(moved) is collections.defaultdict and moved.default_factory is int and moved["x"] is counts["x"]

    @dataclasses.dataclass(frozen=True)
    class Edited:
        pixels: torch.Tensor
        prompt: str
        captions: list

    pieces = split_batch(Edited(torch.arange(4.0), "a cat", ["one", "two"]), 2)
    assert [type(p) for p in pieces] == [Edited, Edited] and pieces[1].pixels.tolist() == [2.0, 3.0]
    assert pieces[0].prompt == "a cat"
    with pytest.raises(ValueError, match=r"batch\.captions is a list of 4 values"):
        split_batch(Edited(torch.arange(4.0), "a cat", ["a", "b", "c", "d"]), 2)


def test_per_sample_lists_are_refused_rather_than_misaligned_on_back_off():
    batch = {"pixels": torch.arange(4.0).view(4, 1), "captions": ["c0", "c1", "c2", "c3"]}

    w = nn.Parameter(torch.zeros(()))

    def loss_fn(b):
        if b["pixels"].shape[0] > 2:
            raise cuda_oom(b["pixels"].shape[0])
        return b["pixels"].mean() * w

    with pytest.raises(ValueError, match=r"batch\['captions'\] is a list of 4 values, as many as the batch's rows"):
        stream_train(loss_fn, [batch], torch.optim.SGD([w], lr=0.1), device="cpu")
    # a list that is not per-sample (here: 2 values for 4 rows) is still repeated in every piece
    pieces = split_batch({"x": torch.zeros(4, 1), "names": ["a", "b"]}, 2)
    assert [p["names"] for p in pieces] == [["a", "b"], ["a", "b"]]


def test_a_backoff_hook_that_is_not_callable_is_refused_at_decoration():
    # it used to be accepted and fail at the first back-off: "'int' object is not callable"
    with pytest.raises(TypeError, match="on_backoff must be a callable .* got int"):
        oom_backoff(lambda b: b, on_backoff=5)
    with pytest.raises(TypeError, match="on_backoff must be a callable .* got str"):
        oom_backoff(on_backoff="print")(lambda b: b)


def test_numpy_numbers_are_accepted_and_bools_are_not():
    tried = []

    @oom_backoff(start=np.int64(8), min_size=np.int32(2), factor=np.float32(0.5))
    def fits_at_2(batch_size):
        tried.append(batch_size)
        if batch_size > 2:
            raise cuda_oom(batch_size)
        return batch_size

    assert fits_at_2() == 2 and tried == [8, 4, 2] and all(type(b) is int for b in tried)
    with pytest.raises(ValueError, match="start"):
        oom_backoff(lambda b: b, start=True)

    pieces = split_batch(torch.arange(5), np.int64(2))
    assert [p.tolist() for p in pieces] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="chunk"):
        split_batch(torch.arange(5), True)

    w = nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)
    stats = stream_train(
        lambda b: (b.sum() + 1) * w,
        [torch.zeros(2, 1)] * 3,
        opt,
        max_steps=np.int64(2),
        accumulate=np.int32(1),
        max_grad_norm=np.float32(10.0),
        min_micro_batch=np.int64(1),
    )
    assert stats.steps == 2 and all(type(v) is float for v in stats.losses)
    with pytest.raises(ValueError, match="max_steps"):
        stream_train(lambda b: b.sum() * w, [], opt, max_steps=False)
    with pytest.raises(ValueError, match="accumulate"):
        stream_train(lambda b: b.sum() * w, [], opt, accumulate=True)


@pytest.mark.parametrize("batches", [None, 5])
def test_batches_that_are_not_iterable_are_refused_by_name(batches):
    w = nn.Parameter(torch.zeros(()))
    with pytest.raises(TypeError, match=f"batches must be an iterable of batches .*got {type(batches).__name__}"):
        stream_train(lambda b: b.sum() * w, batches, torch.optim.SGD([w], lr=0.1))
