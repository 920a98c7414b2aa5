"""The actors' sampling noise, drawn from the counter hash the environment draws its maps from.

A sampled action is the inverse of its categorical CDF at one uniform number per agent
(`agents.algo.networks.sample`). The uniform of UAV `n` in environment `b` at rollout step `t` is a
pure function of `(seed, env_index[b], t, n)` through `uavsim.rng`'s hash, so:
  * there is no `torch.Generator` state to carry: a rollout step captures as one graph (CUDA
    graphs, `torch.compile(fullgraph=True)`), and the only state is a step counter on the device,
    advanced in place;
  * environment `b`'s actions do not depend on the batch size or on the rank that plays it
    (ranks play disjoint environment indices, so their noise is independent too).
The hash runs in stages (`uavsim.rng.env_key` once, `episode_key` per step on `[B]`, the last
round on `[B, N]`): a few int64 passes over one number per agent, not four rounds over every
(agent, action). The policy's stream is keyed apart from the maps' (`POLICY_SALT`).
"""

from __future__ import annotations

import torch

from uavsim.rng import MASK32, MAX_KEY, draw_hash, env_key, episode_key, hash32, salted_draw

POLICY_SALT = 0x5EED_AC7  # the policy stream's seed is `hash(seed ^ POLICY_SALT)`, not the maps' seed
_UNIFORM_BITS = 23  # float32 holds (k + 0.5) / 2**23 exactly: the uniforms lie strictly inside (0, 1)


def _stream_key(seed: int) -> int:
    """A key in [0, 2**31) for the policy's stream of run seed `seed`."""
    return hash32(seed, POLICY_SALT, 0, 0) & (MAX_KEY - 1)


class ActionNoise:
    """Uniform numbers `[B, N]` float32 in (0, 1) for the actions of `B` environments, one draw per
    call of `uniform()`. `step` (0-dim int64 on the device) counts the calls; it is the whole state.

    Args:
        seed: the run's seed, an int in [0, 2**31).
        env_index: `[B]` int64 global indices of the environments (on the device the draws live on).
        num_agents: `N`, agents per environment.

    Raises:
        ValueError: `seed` out of range.
        TypeError: `env_index` not a 1-D int64 tensor.
    """

    def __init__(self, seed: int, env_index: torch.Tensor, num_agents: int):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_KEY:
            raise ValueError(f"seed must be an int in [0, 2**31), got {seed!r}")
        if not isinstance(env_index, torch.Tensor) or env_index.dtype != torch.int64 or env_index.dim() != 1:
            raise TypeError(f"env_index must be a 1-D int64 tensor, got {env_index!r:.80}")
        device = env_index.device
        self.seed = seed
        self.env_keys = env_key(_stream_key(seed), env_index)  # [B]: the hash's rounds that never change
        self.draws = salted_draw(torch.arange(num_agents, device=device))  # [N]
        self.step = torch.zeros((), dtype=torch.int64, device=device)

    def uniform(self) -> torch.Tensor:
        """This step's uniforms `[B, N]` float32, strictly inside (0, 1); advances `step` in place."""
        keys = episode_key(self.env_keys, self.step)  # [B]: the round that adds the step
        h = draw_hash(keys[:, None], self.draws) & MASK32  # [B, N]
        self.step.copy_(torch.remainder(self.step + 1, MAX_KEY))  # the hash's key range, as episodes wrap
        return ((h >> (32 - _UNIFORM_BITS)).to(torch.float32) + 0.5) * (2.0**-_UNIFORM_BITS)

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "step": int(self.step)}  # a host read: checkpoints only

    def load_state_dict(self, d: dict) -> None:
        if d.get("seed") != self.seed:
            raise ValueError(f"action noise of seed {d.get('seed')!r} loaded into a stream of seed {self.seed}")
        step = d.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < MAX_KEY:
            raise ValueError(f"action noise step must be an int in [0, 2**31), got {step!r}")
        self.step.fill_(step)
