"""Whole models: their size in bytes (:func:`model_bytes`, on the meta device too) and their placement,
``{name: bytes}`` + free memory per device + strategy -> ``{name: device}``.

Each model goes whole onto one device. Splitting one model across devices is accelerate's
``infer_auto_device_map``; :func:`remaining_memory` and :func:`to_max_memory` hand it what is left
after the whole-model placement (see docs/placement.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn

from .checks import device_key, is_int, is_real
from .inventory import format_bytes, inventory

Strategy = Literal["spread", "pack"]

# Backtracking visits at most this many partial assignments before giving up (a dozen models on
# eight devices is far below it; the cap only keeps a pathological input from running for long).
_SEARCH_BUDGET = 200_000


def _modules_of(model: Any) -> list[nn.Module]:
    if isinstance(model, nn.Module):
        return [model]
    # diffusers pipelines are not nn.Modules; they expose their parts in a `components` dict
    components = getattr(model, "components", None)
    if isinstance(components, Mapping):
        return [m for m in components.values() if isinstance(m, nn.Module)]
    if isinstance(model, Mapping):
        model = model.values()
    if isinstance(model, Iterable) and not isinstance(model, (str, bytes)):
        mods = list(model)
        if mods and all(isinstance(m, nn.Module) for m in mods):
            return mods
    raise TypeError(
        "model_bytes expects an nn.Module, a diffusers-style pipeline (with a `components` dict) or "
        f"a list/dict of nn.Modules, got {type(model).__name__}"
    )


def model_bytes(model: Any, dtype: torch.dtype | None = None, *, buffers: bool = True) -> int:
    """Bytes the parameters (and buffers, if ``buffers``) of ``model`` take at ``dtype``.

    ``dtype=None`` counts each tensor at its own dtype. With a dtype, floating-point tensors are
    counted at that dtype and the others (integer position ids, masks) at their own, as
    ``model.to(dtype)`` would convert them. Shared (tied) tensors are counted once. Works on meta
    modules, so the size of a model too large for this machine is known before loading it::

        with torch.device("meta"):
            big = AutoModelForCausalLM.from_config(config)
        model_bytes(big, torch.bfloat16)
    """
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if dtype is not None and not dtype.is_floating_point:  # model.to(torch.int8) raises too
        raise TypeError(f"dtype must be a floating-point dtype (what model.to(dtype) accepts), got {dtype}")
    seen: set[int] = set()
    total = 0
    for module in _modules_of(model):
        tensors = list(module.parameters())
        if buffers:
            tensors += list(module.buffers())
        for t in tensors:
            # identity, not data_ptr: meta tensors all report data_ptr 0
            if id(t) in seen:
                continue
            seen.add(id(t))
            if dtype is not None and t.is_floating_point():
                itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
            else:
                itemsize = t.element_size()
            total += t.numel() * itemsize
    return total


class PlacementError(ValueError):
    """No device has room for a model (the message names the model and the largest free space)."""


def _check_bytes(value, what: str) -> int:
    """``value`` as a Python int number of bytes (NumPy integers converted), >= 0."""
    if not is_int(value):
        raise TypeError(f"{what} must be an int number of bytes, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {value}")
    return int(value)


def _check_mapping(value, what: str, expected: str) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a {expected} dict, got {type(value).__name__}")


def _by_device(memory: Mapping, what: str, value: str) -> dict[str, int]:
    """``{canonical device: bytes}`` of the mapping ``what``; two names of one device ("cuda" and
    "cuda:0") are an error, since one of their two values would be dropped silently."""
    out = {device_key(d): _check_bytes(b, f"{value} of {d!r}") for d, b in memory.items()}
    if len(out) != len(memory):
        raise ValueError(f"the keys of {what} name a device twice ({list(memory)}): 'cuda' is 'cuda:0'")
    return out


def _capacities(devices, headroom) -> dict[str, int]:
    """``{device: usable bytes}``: free memory minus the headroom reserve."""
    if devices is None:
        free = inventory().free()
    elif isinstance(devices, Mapping):
        free = _by_device(devices, "devices", "free memory")
    elif isinstance(devices, (str, torch.device)):
        raise TypeError("devices must be a list of devices or a {device: free bytes} dict, not one device")
    elif not isinstance(devices, Iterable):
        raise TypeError(
            f"devices must be a list of devices, a {{device: free bytes}} dict or None, got {type(devices).__name__}"
        )
    else:
        wanted = [device_key(d) for d in devices]
        twice = sorted({d for d in wanted if wanted.count(d) > 1})
        if twice:  # as for a dict's keys: a typo ("cuda:0" for "cuda:1") would otherwise lose a device silently
            raise ValueError(f"devices names {twice} more than once ({list(devices)}): 'cuda' is 'cuda:0'")
        inv = inventory()
        known = {d.device: d.free for d in inv.devices}
        known["cpu"] = inv.host_available
        missing = [d for d in wanted if d not in known]
        if missing:
            raise ValueError(f"devices {missing} are not visible here; visible: {sorted(known)}")
        free = {d: known[d] for d in wanted}
    if not free:
        raise ValueError("devices is empty; expected at least one device")
    if is_int(headroom):
        headroom = _check_bytes(headroom, "headroom")
        return {d: max(0, b - headroom) for d, b in free.items()}
    if not is_real(headroom):
        raise TypeError(f"headroom must be a float fraction or an int of bytes, got {headroom!r}")
    headroom = float(headroom)  # np.float32 too: a non-integer number is a fraction
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom as a fraction must be in [0, 1), got {headroom}")
    return {d: int(b * (1.0 - headroom)) for d, b in free.items()}


def _greedy(order, sizes, caps, strategy, left, count, placed) -> str | None:
    """Place ``order`` greedily into ``left``/``count``/``placed``; return the first model that fits nowhere."""
    devs = list(caps)
    for name in order:
        fits = [d for d in devs if sizes[name] <= left[d]]
        if not fits:
            return name
        if strategy == "pack":
            dev = fits[0]  # first device in the given order: fill it before the next
        else:  # spread: fewest models first, then most room, then device order
            dev = min(fits, key=lambda d: (count[d], -left[d], devs.index(d)))
        placed[name] = dev
        left[dev] -= sizes[name]
        count[dev] += 1
    return None


def _search(order, sizes, left, count, strategy: Strategy) -> tuple[dict[str, str] | None, bool]:
    """Any assignment of ``order`` into ``left`` (depth-first, largest first), devices tried in
    the strategy's order (``spread``: fewest models, then most room). Returns ``(assignment or
    None, gave_up)``: ``gave_up`` when the budget ran out before the search could finish."""
    budget, gave_up = [_SEARCH_BUDGET], [False]
    devs = list(left)
    count = dict(count)
    rest = [sum(sizes[n] for n in order[i:]) for i in range(len(order) + 1)]
    assignment: dict[str, str] = {}

    def go(i: int) -> bool:
        if i == len(order):
            return True
        if rest[i] > sum(left.values()):  # what is left to place exceeds all the room left
            return False
        budget[0] -= 1
        if budget[0] < 0:
            gave_up[0] = True
            return False
        name, tried = order[i], set()
        ranked = sorted(devs, key=lambda d: (count[d], -left[d])) if strategy == "spread" else devs
        for d in ranked:
            # two devices with the same room left are interchangeable for the rest of the search
            if sizes[name] > left[d] or (left[d], count[d] if strategy == "spread" else 0) in tried:
                continue
            tried.add((left[d], count[d] if strategy == "spread" else 0))
            left[d] -= sizes[name]
            count[d] += 1
            assignment[name] = d
            if go(i + 1):
                return True
            left[d] += sizes[name]
            count[d] -= 1
            del assignment[name]
        return False

    return (dict(assignment) if go(0) else None), gave_up[0]


def place_models(
    sizes: Mapping[str, int],
    devices: Sequence[str | torch.device] | Mapping[str, int] | None = None,
    *,
    strategy: Strategy = "spread",
    headroom: float | int = 0.1,
    pinned: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Assign every model (``{name: bytes}``) whole to one device; returns ``{name: device}``.

    ``devices``: ``{device: free bytes}``, or a list of devices whose free memory is read from
    :func:`inventory`, or None for every visible CUDA device (the host when there is none).
    ``strategy="spread"`` puts models on different devices while they fit (VLM, SD3, CLIP on
    three GPUs -> cuda:0, cuda:1, cuda:2); ``"pack"`` fills the first device before using the next
    (what ``device_map="auto"`` does). ``headroom`` is kept free on every device for activations:
    a float is a fraction of its free memory, an int a number of bytes. ``pinned`` fixes some
    models to a device (e.g. the trained policy on the trainer's own GPU).

    Models are placed largest first. When the greedy pass leaves a model without room, an exact
    search looks for an assignment that fits (within a budget of partial assignments); when there
    is none, or the search gives up, PlacementError says which, naming the model.
    """
    if not isinstance(sizes, Mapping):
        raise TypeError(f"sizes must be a {{name: bytes}} mapping, got {type(sizes).__name__}")
    for name in sizes:
        if not isinstance(name, str):
            raise TypeError(f"model names must be str, got {type(name).__name__} {name!r}")
    # Python ints from here on: NumPy's unsigned ones would wrap in the subtractions below
    sizes = {name: _check_bytes(b, f"size of model {name!r}") for name, b in sizes.items()}
    if strategy not in ("spread", "pack"):
        raise ValueError(f"strategy must be 'spread' or 'pack', got {strategy!r}")
    caps = _capacities(devices, headroom)
    if pinned is not None and not isinstance(pinned, Mapping):
        raise TypeError(f"pinned must be a {{model: device}} dict, got {type(pinned).__name__}")
    pinned = {n: device_key(d) for n, d in (pinned or {}).items()}
    for name, dev in pinned.items():
        if name not in sizes:
            raise ValueError(f"pinned model {name!r} is not in sizes ({sorted(sizes)})")
        if dev not in caps:
            raise ValueError(f"model {name!r} is pinned to {dev}, which is not among devices {sorted(caps)}")

    left = dict(caps)
    count = dict.fromkeys(caps, 0)
    placed: dict[str, str] = {}
    for name, dev in pinned.items():
        if sizes[name] > left[dev]:
            raise PlacementError(
                f"model {name!r} ({format_bytes(sizes[name])}) is pinned to {dev}, which has only "
                f"{format_bytes(left[dev])} left after headroom"
            )
        placed[name] = dev
        left[dev] -= sizes[name]
        count[dev] += 1

    order = sorted((n for n in sizes if n not in pinned), key=lambda n: (-sizes[n], list(sizes).index(n)))
    greedy_left, greedy_placed = dict(left), dict(placed)
    stuck = _greedy(order, sizes, caps, strategy, greedy_left, dict(count), greedy_placed)
    if stuck is None:
        return {n: greedy_placed[n] for n in sizes}

    found, gave_up = _search(order, sizes, dict(left), count, strategy)
    if found is not None:
        placed.update(found)
        return {n: placed[n] for n in sizes}
    widest = max(caps, key=lambda d: caps[d])
    if sizes[stuck] > caps[widest]:
        where = f"the largest free space is {format_bytes(caps[widest])} on {widest} (after headroom)"
    elif gave_up:
        where = (
            f"the greedy placement left no room for it and the exact search gave up after "
            f"{_SEARCH_BUDGET:,} partial assignments (an assignment may still exist: pin some models)"
        )
    else:
        best = max(greedy_left, key=lambda d: greedy_left[d])
        where = (
            f"no assignment of all models fits: with the others placed, the largest free space is "
            f"{format_bytes(greedy_left[best])} on {best} (after headroom)"
        )
    raise PlacementError(
        f"model {stuck!r} needs {format_bytes(sizes[stuck])} but {where}; split it across devices with "
        "accelerate.infer_auto_device_map (docs/placement.md), use a smaller dtype, or free memory"
    )


def remaining_memory(
    sizes: Mapping[str, int],
    placement: Mapping[str, str],
    devices: Mapping[str, int],
    *,
    headroom: float | int = 0.1,
) -> dict[str, int]:
    """``{device: bytes}`` still usable after ``placement`` (same headroom rule as :func:`place_models`)."""
    _check_mapping(sizes, "sizes", "{name: bytes}")
    _check_mapping(placement, "placement", "{name: device}")
    left = _capacities(devices, headroom)
    for name, dev in placement.items():
        key = device_key(dev)
        if name not in sizes:
            raise ValueError(f"placed model {name!r} has no size in sizes")
        if key not in left:
            raise ValueError(f"model {name!r} is placed on {key}, which is not among devices {sorted(left)}")
        left[key] = max(0, left[key] - _check_bytes(sizes[name], f"size of {name!r}"))
    return left


def to_max_memory(memory: Mapping[str, int]) -> dict[int | str, int]:
    """Convert ``{"cuda:1": bytes, "cpu": bytes}`` to accelerate's ``max_memory`` (``{1: bytes, "cpu": bytes}``)."""
    _check_mapping(memory, "memory", "{device: bytes}")
    by_device = _by_device(memory, "memory", "memory")
    return {"cpu" if k == "cpu" else int(k.split(":")[1]): b for k, b in by_device.items()}
