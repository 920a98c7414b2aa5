"""Counter-based random numbers shared, bit for bit, by the batched env and the NumPy reference.

Every random value of an episode is a pure function of four integers:
``(seed, env_index, episode_index, draw_index)``. There is no RNG state to carry, split or
synchronise: environment ``i`` of a batch and ``ReferenceEnv(seed=s, env_index=i)`` compute the
same numbers because they evaluate the same integer hash, whatever the batch size.

The hash is Chris Wellons' ``lowbias32`` finaliser applied once per key part. It is written with
operators only (``^ >> * &``), so one function body serves NumPy ``uint64`` arrays and torch
``int64`` tensors alike: products are reduced to their low 32 bits right away, and the low bits of
a product are the same under unsigned and two's-complement wrap-around, so both backends agree.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
MAX_KEY = 2**31  # seed, env index, episode index and draw index must lie in [0, MAX_KEY)

_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_SALTS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F)


def _mix32(x):
    return _mix32_tail(x ^ (x >> 16))


def _mix32_tail(x):
    """`_mix32` after its first round (``x ^ (x >> 16)``, which distributes over ``^``)."""
    x = (x * _M1) & MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & MASK32
    return x ^ (x >> 16)


def hash32(seed, env_index, episode, draw):
    """uint32 hash of the four keys (each an int or an integer array/tensor; they broadcast).

    NumPy inputs must be ``uint64`` (or Python ints), torch inputs ``int64``. Returns values in
    ``[0, 2**32)`` in the same dtype.
    """
    return draw_hash(episode_key(env_key(seed, env_index), episode), salted_draw(draw))


# The same hash in stages, for callers that keep keys fixed across many draws (the batched env
# keeps each environment's key and its salted draw indices, and hashes an episode's key once).
def env_key(seed, env_index):
    """The rounds of `hash32` that depend on the seed and environment only."""
    return _mix32(_mix32(seed ^ _SALTS[0]) ^ env_index ^ _SALTS[1]) ^ _SALTS[2]


# The last round mixes (episode key ^ salted draw); its first step x ^ (x >> 16) distributes over
# ^, so it is applied to the key and to the draw apart: once per episode and once per draw index,
# rather than to every (episode, draw) pair.
def episode_key(env_key_, episode):
    """The round of `hash32` that adds the episode (``env_key_`` from `env_key`)."""
    k = _mix32(env_key_ ^ episode) ^ _SALTS[3]
    return k ^ (k >> 16)


def salted_draw(draw):
    """A draw index as the last round of `hash32` takes it."""
    return draw ^ (draw >> 16)


def draw_hash(episode_key_, salted_draw_):
    """`hash32` of a draw under an episode's key (from `episode_key`; the draw from `salted_draw`)."""
    return _mix32_tail(episode_key_ ^ salted_draw_)


def below(h, n):
    """Map uint32 hashes to integers in ``[0, n)`` by multiply-shift (``n`` int or array, n < 2**31)."""
    return (h * n) >> 32
