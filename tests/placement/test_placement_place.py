"""Model sizes and whole-model placement, including the hand-off to accelerate for splitting."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from agents.placement import PlacementError, model_bytes, place_models, remaining_memory, to_max_memory

GiB = 2**30
GPUS3 = {"cuda:0": 80 * GiB, "cuda:1": 80 * GiB, "cuda:2": 80 * GiB}
SEED000 = {"vlm": 14 * GiB, "sd3": 12 * GiB, "clip": 2 * GiB}


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8)  # 800 params
        self.head = nn.Linear(8, 100, bias=False)
        self.head.weight = self.emb.weight  # tied: counted once
        self.norm = nn.LayerNorm(8)  # 16 params
        self.register_buffer("position_ids", torch.arange(10))  # int64 buffer


def test_model_bytes_counts_params_buffers_once_and_keeps_int_buffers():
    m = Tied()
    assert model_bytes(m) == (800 + 16) * 4 + 10 * 8
    assert model_bytes(m, torch.bfloat16) == (800 + 16) * 2 + 10 * 8  # the int64 buffer stays int64
    assert model_bytes(m, buffers=False) == (800 + 16) * 4
    assert model_bytes([m, nn.Linear(2, 2)]) == model_bytes(m) + 6 * 4
    with pytest.raises(TypeError, match="floating-point dtype"):
        model_bytes(m, torch.int8)  # as m.to(torch.int8) refuses


def test_model_bytes_on_meta_matches_the_real_model_without_allocating():
    with torch.device("meta"):
        meta = nn.Sequential(nn.Linear(1000, 1000), nn.Linear(1000, 10))
    real = nn.Sequential(nn.Linear(1000, 1000), nn.Linear(1000, 10))
    assert next(meta.parameters()).is_meta
    assert model_bytes(meta) == model_bytes(real) == (1000 * 1000 + 1000 + 1000 * 10 + 10) * 4


def test_model_bytes_rejects_non_models():
    with pytest.raises(TypeError, match="nn.Module"):
        model_bytes("a model")
    with pytest.raises(TypeError, match="dtype"):
        model_bytes(nn.Linear(2, 2), "bf16")


def test_spread_puts_seed000_trio_on_three_gpus_and_pack_on_one():
    assert place_models(SEED000, GPUS3) == {"vlm": "cuda:0", "sd3": "cuda:1", "clip": "cuda:2"}
    assert place_models(SEED000, GPUS3, strategy="pack") == dict.fromkeys(SEED000, "cuda:0")


def test_pack_moves_on_when_the_first_gpu_is_full():
    free = {"cuda:0": 20 * GiB, "cuda:1": 20 * GiB}
    assert place_models(SEED000, free, strategy="pack", headroom=0) == {
        "vlm": "cuda:0",
        "sd3": "cuda:1",
        "clip": "cuda:0",
    }


def test_spread_with_more_models_than_gpus_balances_counts():
    sizes = {f"m{i}": GiB for i in range(6)}
    out = place_models(sizes, GPUS3)
    assert sorted(out.values()) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1", "cuda:2", "cuda:2"]


def test_exact_fit_fits_and_one_byte_more_does_not():
    assert place_models({"a": 100}, {"cuda:0": 100}, headroom=0) == {"a": "cuda:0"}
    with pytest.raises(PlacementError, match=r"'a' needs 101 B but the largest free space is 100 B on cuda:0"):
        place_models({"a": 101}, {"cuda:0": 100}, headroom=0)


def test_headroom_as_fraction_and_as_bytes():
    assert place_models({"a": 90}, {"cuda:0": 100}, headroom=0.1) == {"a": "cuda:0"}
    with pytest.raises(PlacementError):
        place_models({"a": 91}, {"cuda:0": 100}, headroom=0.1)
    with pytest.raises(PlacementError):
        place_models({"a": 91}, {"cuda:0": 100}, headroom=10)


def test_no_fit_names_the_model_and_the_largest_free_space():
    with pytest.raises(PlacementError) as info:
        place_models({"small": GiB, "qwen30b": 60 * GiB}, {"cuda:0": 40 * GiB, "cuda:1": 50 * GiB}, headroom=0)
    msg = str(info.value)
    assert "'qwen30b' needs 60.00 GiB" in msg and "50.00 GiB on cuda:1" in msg and "infer_auto_device_map" in msg


def test_exact_search_finds_a_placement_the_greedy_pass_misses():
    sizes = {"a": 6, "b": 4, "c": 4, "d": 3, "e": 3}  # only {a, b} + {c, d, e} fills two 10-byte GPUs
    out = place_models(sizes, {"cuda:0": 10, "cuda:1": 10}, headroom=0)
    load = {d: sum(sizes[n] for n, dev in out.items() if dev == d) for d in ("cuda:0", "cuda:1")}
    assert load == {"cuda:0": 10, "cuda:1": 10}
    with pytest.raises(PlacementError, match="no assignment of all models fits"):
        place_models({**sizes, "f": 1}, {"cuda:0": 10, "cuda:1": 10}, headroom=0)


def test_one_device_and_cpu_only():
    assert place_models({"a": 1, "b": 2}, {"cuda:0": 10}) == {"a": "cuda:0", "b": "cuda:0"}
    assert place_models({"a": 1, "b": 2}, ["cpu"]) == {"a": "cpu", "b": "cpu"}
    if not torch.cuda.is_available():  # with no GPU, None means the host
        assert place_models({"a": 1}) == {"a": "cpu"}


def test_pinned_models_stay_where_they_are_pinned():
    out = place_models(SEED000, GPUS3, pinned={"clip": "cuda:0"})
    assert out["clip"] == "cuda:0" and out["vlm"] != "cuda:0"
    with pytest.raises(PlacementError, match="pinned to cuda:0"):
        place_models({"vlm": 90 * GiB}, GPUS3, pinned={"vlm": "cuda:0"})
    with pytest.raises(ValueError, match="not in sizes"):
        place_models(SEED000, GPUS3, pinned={"llama": "cuda:0"})


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="size of model 'vlm' must be an int"):
        place_models({"vlm": 1.5}, GPUS3)
    with pytest.raises(ValueError, match=">= 0 bytes"):
        place_models({"vlm": -1}, GPUS3)
    with pytest.raises(ValueError, match="strategy"):
        place_models(SEED000, GPUS3, strategy="balanced")
    with pytest.raises(ValueError, match="headroom"):
        place_models(SEED000, GPUS3, headroom=1.5)
    with pytest.raises(ValueError, match="empty"):
        place_models(SEED000, {})
    with pytest.raises(TypeError, match="not one device"):
        place_models(SEED000, "cuda:0")
    with pytest.raises(ValueError, match="not a device string"):
        place_models(SEED000, {"gpu0": GiB})
    if torch.cuda.device_count() <= 7:
        with pytest.raises(ValueError, match="not visible"):
            place_models(SEED000, ["cuda:7"])


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 50), min_size=1, max_size=6),
    caps=st.lists(st.integers(0, 80), min_size=1, max_size=4),
    strategy=st.sampled_from(["spread", "pack"]),
)
def test_placements_never_overfill_and_errors_only_when_nothing_fits(sizes, caps, strategy):
    named = {f"m{i}": s for i, s in enumerate(sizes)}
    free = {f"cuda:{i}": c for i, c in enumerate(caps)}
    try:
        out = place_models(named, free, strategy=strategy, headroom=0)
    except PlacementError:
        # brute force: no assignment of the models to the devices fits
        import itertools

        for combo in itertools.product(free, repeat=len(named)):
            load = dict.fromkeys(free, 0)
            for name, dev in zip(named, combo):
                load[dev] += named[name]
            assert any(load[d] > free[d] for d in free), f"missed a fitting placement {combo}"
        return
    assert set(out) == set(named)
    for dev, cap in free.items():
        assert sum(named[n] for n, d in out.items() if d == dev) <= cap


def test_remaining_memory_feeds_accelerate_max_memory():
    placement = place_models({"sd3": 12 * GiB, "clip": 2 * GiB}, GPUS3, headroom=0)
    left = remaining_memory({"sd3": 12 * GiB, "clip": 2 * GiB}, placement, GPUS3, headroom=0)
    assert left == {"cuda:0": 68 * GiB, "cuda:1": 78 * GiB, "cuda:2": 80 * GiB}
    assert to_max_memory(left) == {0: 68 * GiB, 1: 78 * GiB, 2: 80 * GiB}
    assert to_max_memory({"cpu": 5}) == {"cpu": 5}


def test_a_model_too_big_for_any_gpu_is_split_by_accelerate_over_what_is_left():
    accelerate = pytest.importorskip("accelerate", reason="the [pipelines] extra provides accelerate")
    with torch.device("meta"):
        big = nn.Sequential(*[nn.Linear(256, 256) for _ in range(8)])  # 8 x 257 KiB in fp32
    per_layer = model_bytes(big[0])
    sizes = {"reward": 3 * per_layer, "policy": model_bytes(big)}
    free = {"cuda:0": 6 * per_layer, "cuda:1": 6 * per_layer}
    with pytest.raises(PlacementError, match="'policy'"):
        place_models(sizes, free, headroom=0)
    placement = place_models({"reward": sizes["reward"]}, free, headroom=0)
    left = remaining_memory(sizes, placement, free, headroom=0)
    device_map = accelerate.infer_auto_device_map(big, max_memory=to_max_memory(left))
    used = {d for d in device_map.values()}
    assert used == {0, 1}  # split over both GPUs' leftovers, nothing offloaded to cpu/disk
    assert len(device_map) >= 2


def test_exact_search_keeps_spreading_and_finds_tight_fits(monkeypatch):
    import random

    from agents.placement import whole_models as placement_module

    # greedy spread strands m3; the search must still spread, not fall back to packing
    out = place_models({"m0": 6, "m1": 1, "m2": 6, "m3": 8}, {"cuda:0": 10, "cuda:1": 5, "cuda:2": 12}, headroom=0.0)
    assert set(out.values()) == {"cuda:0", "cuda:1", "cuda:2"}
    # 24 models that fill 8 devices exactly (each device's room cut in three): always found
    for seed in range(5):
        rng = random.Random(seed)
        sizes = {}
        for d in range(8):
            a, b = sorted(rng.sample(range(1, 80), 2))
            sizes.update({f"m{d}_0": a, f"m{d}_1": b - a, f"m{d}_2": 80 - b})
        items = list(sizes.items())
        rng.shuffle(items)
        placed = place_models(dict(items), {f"cuda:{d}": 80 for d in range(8)}, headroom=0.0)
        assert remaining_memory(dict(items), placed, {f"cuda:{d}": 80 for d in range(8)}) == {
            f"cuda:{d}": 0 for d in range(8)
        }
    # a search that runs out of budget says so instead of claiming that nothing fits
    monkeypatch.setattr(placement_module, "_SEARCH_BUDGET", 1)
    with pytest.raises(PlacementError, match="exact search gave up after 1 partial assignments"):
        place_models({"m0": 6, "m1": 1, "m2": 6, "m3": 8}, {"cuda:0": 10, "cuda:1": 5, "cuda:2": 12}, headroom=0.0)


def test_aliases_pins_and_sizes_are_checked():
    with pytest.raises(ValueError, match="name a device twice"):
        place_models({"a": 1}, {"cuda": 10, "cuda:0": 1}, headroom=0.0)
    # a list as well: ["cpu", "cpu"] used to collapse to one device silently (a typo for another device)
    with pytest.raises(ValueError, match=r"devices names \['cpu'\] more than once \(\['cpu', 'cpu'\]\)"):
        place_models({"a": 1}, ["cpu", "cpu"], headroom=0.0)
    assert place_models({"a": 1}, ["cpu"], headroom=0.0) == {"a": "cpu"}
    with pytest.raises(TypeError, match="pinned must be a"):
        place_models({"a": 1}, {"cuda:0": 10}, headroom=0.0, pinned=["a"])
    with pytest.raises((TypeError, ValueError), match="size of 'a'"):
        remaining_memory({"a": 2.5}, {"a": "cuda:0"}, {"cuda:0": 10}, headroom=0.0)


def test_to_max_memory_refuses_two_names_of_one_device():
    # {"cuda": 5, "cuda:0": 7} used to become {0: 7}, one of the two values dropped silently
    with pytest.raises(ValueError, match=r"the keys of memory name a device twice \(\['cuda', 'cuda:0'\]\)"):
        to_max_memory({"cuda": 5, "cuda:0": 7})
    assert to_max_memory({"cuda": 5, "cpu": 7}) == {0: 5, "cpu": 7}


def test_arguments_of_the_wrong_type_are_named():
    # each used to end in an AttributeError ('list' object has no attribute 'items')
    with pytest.raises(TypeError, match=r"placement must be a \{name: device\} dict, got list"):
        remaining_memory({"a": 1}, ["a"], {"cuda:0": 10})
    with pytest.raises(TypeError, match=r"sizes must be a \{name: bytes\} dict, got list"):
        remaining_memory([1], {"a": "cuda:0"}, {"cuda:0": 10})
    with pytest.raises(TypeError, match=r"devices must be a list of devices, a \{device: free bytes\} dict or None"):
        remaining_memory({"a": 1}, {"a": "cuda:0"}, 5)
    with pytest.raises(TypeError, match=r"memory must be a \{device: bytes\} dict, got list"):
        to_max_memory([("cuda:0", 1)])


def test_numpy_numbers_are_accepted_and_bools_are_not():
    free = {"cuda:0": np.int64(100), "cuda:1": np.int64(100)}
    sizes = {"a": np.int64(60), "b": np.int32(30)}
    assert place_models(sizes, free, headroom=np.float32(0.1)) == {"a": "cuda:0", "b": "cuda:1"}
    with pytest.raises(PlacementError, match="'a' needs 60 B"):
        place_models(sizes, free, headroom=np.int64(50))  # an integer headroom is bytes
    left = remaining_memory(sizes, {"a": "cuda:0"}, free, headroom=np.float64(0.0))
    assert left == {"cuda:0": 40, "cuda:1": 100} and all(type(v) is int for v in left.values())
    assert to_max_memory({"cuda:1": np.uint64(7)}) == {1: 7}
    with pytest.raises(TypeError, match="size of model 'a' must be an int"):
        place_models({"a": np.bool_(True)}, free)
    with pytest.raises(TypeError, match="size of model 'a' must be an int"):
        place_models({"a": True}, free)
    with pytest.raises(TypeError, match="headroom"):
        place_models(sizes, free, headroom=False)
    with pytest.raises(TypeError, match="headroom"):
        place_models(sizes, free, headroom="10%")


def test_numpy_unsigned_sizes_place_as_python_ints():
    import numpy as np

    free = {"cuda:0": 138, "cuda:1": 84, "cuda:2": 117, "cuda:3": 7}
    sizes = {"m0": 44, "m1": 0, "m2": 68}
    as_uint64 = {k: np.uint64(v) for k, v in sizes.items()}
    assert place_models(as_uint64, {k: np.uint64(v) for k, v in free.items()}, headroom=0) == place_models(
        sizes, free, headroom=0
    )
