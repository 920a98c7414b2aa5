"""The onboard memory as bit rows (`uavsim.memory_bits`) plays exactly the byte memory's episodes."""

import pytest
import torch

from tests.uavsim.helpers import run_lockstep
from uavsim import EnvConfig, UAVSwarmEnv, memory_bits
from uavsim.env import AUTORESET_MODES, RESET_MODES
from uavsim.memory import known_counts

PRESET = EnvConfig(comm_radius=0, obs_radius=6, window_paths=True, max_steps=30)  # the default preset's task
UNEVEN = EnvConfig(grid_height=30, grid_width=30, num_uavs=6, comm_radius=0, max_steps=12)  # blocks of 3-4 cells


def pair(cfg: EnvConfig, monkeypatch, **kwargs) -> tuple[UAVSwarmEnv, UAVSwarmEnv]:
    """An env with the bit memory and one with the byte memory (as with sharing), alike otherwise."""
    assert memory_bits.fits(cfg)
    bits = UAVSwarmEnv(cfg, num_envs=3, seed=2, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(memory_bits, "fits", lambda cfg: False)
        plain = UAVSwarmEnv(cfg, num_envs=3, seed=2, **kwargs)
    assert bits._lay.memory_bits is not None and plain._lay.memory_bits is None
    assert bits._lay.record.nbytes < plain._lay.record.nbytes
    return bits, plain


def assert_same(bits: UAVSwarmEnv, plain: UAVSwarmEnv, a: dict, b: dict, where) -> None:
    assert torch.equal(a["local"], b["local"]) and torch.equal(a["state"], b["state"]), where
    assert all(torch.equal(x, plain.state[k]) for k, x in bits.state.items()), where  # the memory's codes too
    assert torch.equal(bits._v["known"], plain._v["known"]), where
    assert torch.equal(bits._v["known"], known_counts(bits._lay, bits._v["memory"])), where  # a full recount


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
@pytest.mark.parametrize("reset_mode", RESET_MODES)
@pytest.mark.parametrize("cfg", [PRESET, UNEVEN], ids=["preset", "uneven-blocks"])
def test_bit_rows_and_bytes_give_the_same_steps(cfg, reset_mode, autoreset_mode, monkeypatch):
    bits, plain = pair(cfg, monkeypatch, reset_mode=reset_mode, autoreset_mode=autoreset_mode)
    a, b = bits.reset(), plain.reset()
    gen = torch.Generator().manual_seed(1)
    for t in range(45):  # past the episodes' ends: restarts, and partial resets
        assert_same(bits, plain, a, b, t)
        if t in (9, 23):
            mask = torch.tensor([True, False, t == 23])
            a, b = bits.reset(mask), plain.reset(mask)
            continue
        actions = torch.randint(0, cfg.num_actions, (3, cfg.num_uavs), generator=gen)
        a, b = bits.step(actions)[0], plain.step(actions)[0]


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
def test_one_uav_with_the_bit_memory_plays_the_reference(autoreset_mode):
    # with one UAV the sensing's table read came back with strides its byte view refused (a RuntimeError at reset)
    cfg = EnvConfig(num_uavs=1, comm_radius=0, obs_radius=6, window_paths=True, max_steps=20)
    assert memory_bits.fits(cfg)
    assert run_lockstep(cfg, num_envs=3, seed=0, steps=45, reset_mode="prepared", autoreset_mode=autoreset_mode) >= 3


def test_a_saved_bit_memory_loads_into_either(monkeypatch):
    bits, plain = pair(UNEVEN, monkeypatch)
    bits.reset(), plain.reset()
    gen = torch.Generator().manual_seed(3)
    for _ in range(7):
        bits.step(torch.randint(0, UNEVEN.num_actions, (3, UNEVEN.num_uavs), generator=gen))
    saved = bits.state_dict()
    again, other = pair(UNEVEN, monkeypatch)
    again.reset(), other.reset()
    again.load_state_dict(saved), other.load_state_dict(saved)
    assert_same(again, other, again.observe(), other.observe(), "loaded")
    assert torch.equal(again._v["known"], bits._v["known"])
    for t in range(20):
        actions = torch.randint(0, UNEVEN.num_actions, (3, UNEVEN.num_uavs), generator=gen)
        a, b, c = again.step(actions)[0], other.step(actions)[0], bits.step(actions)[0]
        assert_same(again, other, a, b, t)
        assert torch.equal(a["local"], c["local"]) and torch.equal(again._v["memory"], bits._v["memory"]), t


def test_small_maps_wide_maps_shared_memories_and_memory_paths_keep_the_bytes():
    assert not memory_bits.fits(EnvConfig(comm_radius=0, grid_width=16, grid_height=16))  # 3 int64 > 19 bytes a row
    assert not memory_bits.fits(EnvConfig(comm_radius=2))
    assert not memory_bits.fits(EnvConfig(comm_radius=0, window_paths=True, path_radius=6))
    assert not memory_bits.fits(EnvConfig(comm_radius=0, grid_width=60, grid_height=8))  # 60 + 2 x 3 > 63


def test_the_sensings_env_index_is_one_tensor_whatever_the_batch_sizes():
    # sparse restarts sense batches of every size: one arange, sliced, not one kept per size
    env = UAVSwarmEnv(EnvConfig(comm_radius=0), num_envs=4, seed=0)
    bits = env._lay.memory_bits
    for m in (3, 5, 2):
        index = memory_bits.env_index(bits, m, torch.device("cpu"))
        assert index.shape == (m, 1, 1, 1, 1) and torch.equal(index.flatten(), torch.arange(m))
    assert bits.env_index.shape[0] == 5
