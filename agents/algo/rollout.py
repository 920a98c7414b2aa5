"""Device-resident rollout storage and one rollout step (environment + policy, no host reads).

`Storage` is preallocated once on the environment's device, `[T, B, N, ...]` per agent and
`[T, B, ...]` per environment, in the most compact exact dtype (actions `uint8`, flags `bool`;
observations in the AMP dtype under AMP, the dtype the networks' autocast would cast them to).
`rollout_step` fills one row of it (`agents.algo.learner.collect` runs T of them); episode
statistics accumulate in `EpisodeStats`, on the device too, and the trainer reads them once per
iteration. A recurrent actor's hidden state `[B, N, H]` is carried from step to step (and
iteration to iteration), zeroed where an episode ended, and stored at the start of every chunk of
`train.chunk_length` steps, where the update's sequences start.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch

from agents.algo.action_noise import ActionNoise
from agents.algo.heading import HEADING_DIM
from agents.algo.layers import Form
from agents.algo.networks import Actor, agent_ids, with_form  # noqa: F401 -- agent_ids: imported from here too
from uavsim.env import UAVSwarmEnv


@dataclass
class Storage:
    local: torch.Tensor  # [T, B, N, L] obs dtype  local observations
    state: torch.Tensor  # [T, B, S] obs dtype     global state
    final_local: torch.Tensor  # [T, B, N, L] obs dtype  observation after step t, before any reset
    final_state: torch.Tensor  # [T, B, S] obs dtype
    heading: torch.Tensor  # [T, B, N, 3] float32  the shared-map actor's headings (zeros otherwise)
    actions: torch.Tensor  # [T, B, N] uint8
    logprobs: torch.Tensor  # [T, B, N] float32
    values: torch.Tensor  # [T, B, N] float32     V(obs_t), denormalized
    # [T, B, N] float32  V(final obs after step t), denormalized, where step t did not terminate
    # (`bootstrap_values`; where it did, a finite value GAE multiplies by 0)
    next_values: torch.Tensor
    rewards: torch.Tensor  # [T, B, N] float32
    terminated: torch.Tensor  # [T, B] bool
    truncated: torch.Tensor  # [T, B] bool
    hidden: torch.Tensor  # [T / C, B, N, H] float32  the actor's hidden state at each chunk's start (H = 0: none)
    row: torch.Tensor  # [] int64  the row `rollout_step` writes next: one counter for the storage's life,
    # so that a captured step sees it at the same address every iteration (`agents.algo.static_inputs`)

    @classmethod
    def allocate(
        cls,
        num_steps: int,
        env: UAVSwarmEnv,
        obs_dtype: torch.dtype = torch.float32,
        hidden_size: int = 0,
        chunk_length: int = 1,
    ) -> Storage:
        """Zeroed storage for `num_steps` steps of `env`.

        Args:
            num_steps: `T`, steps per rollout.
            env: the environment (or its sizes on the meta device).
            obs_dtype: float32, or the AMP dtype, which the networks' autocast casts observations to
                anyway: storing them cast loses nothing the networks would see.
            hidden_size: `H`, a recurrent actor's hidden state (0: feed-forward).
            chunk_length: `C`, steps per chunk; the hidden state is kept at chunk starts only (the
                update starts its sequences there and recomputes the steps within).

        Returns:
            The storage, on `env.device`.

        Raises:
            ValueError: more than 256 actions, or `chunk_length` does not divide `num_steps`.
            TypeError: `obs_dtype` is not a float dtype.
        """
        if env.num_actions > 256:
            raise ValueError(f"uint8 action storage needs num_actions <= 256, got {env.num_actions}")
        if obs_dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise TypeError(f"obs_dtype must be float32, bfloat16 or float16, got {obs_dtype}")
        if chunk_length < 1 or num_steps % chunk_length:
            raise ValueError(f"chunk_length must divide num_steps={num_steps}, got {chunk_length}")
        t, b, n, dev = num_steps, env.num_envs, env.num_uavs, env.device
        f32 = lambda *shape: torch.zeros(*shape, dtype=torch.float32, device=dev)  # noqa: E731
        obs = lambda *shape: torch.zeros(*shape, dtype=obs_dtype, device=dev)  # noqa: E731
        return cls(
            local=obs(t, b, n, env.local_obs_dim),
            state=obs(t, b, env.state_dim),
            final_local=obs(t, b, n, env.local_obs_dim),
            final_state=obs(t, b, env.state_dim),
            heading=f32(t, b, n, HEADING_DIM),
            actions=torch.zeros(t, b, n, dtype=torch.uint8, device=dev),
            logprobs=f32(t, b, n),
            values=f32(t, b, n),
            next_values=f32(t, b, n),
            rewards=f32(t, b, n),
            terminated=torch.zeros(t, b, dtype=torch.bool, device=dev),
            truncated=torch.zeros(t, b, dtype=torch.bool, device=dev),
            hidden=f32(t // chunk_length, b, n, hidden_size),
            row=torch.zeros((), dtype=torch.int64, device=dev),
        )

    @property
    def chunk_length(self) -> int:
        return self.actions.shape[0] // self.hidden.shape[0]

    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))


class EpisodeStats:
    """Sums over the episodes that ended during one iteration, as device tensors, for episodes of
    at most `max_steps` steps on `device`.

    `steps_to_target` is the episode length where the target coverage was reached (terminated)
    and `max_steps` where it was not.
    """

    KEYS = (
        "episodes",
        "return",
        "length",
        "coverage",
        "collisions",
        "near_misses",
        "steps_to_target",
        "reached",
        "last_coverage",
    )

    def __init__(self, device: torch.device, max_steps: int, group_envs: Sequence[int] = (1,)):
        """`group_envs`: each size group's environment count (a mixed-size run's `Learner.groups`): each
        group's current coverage has its own slot of `sums` (its `for_group` handle writes it), so no group's
        step overwrites another's, and `last_coverage` is their mean over every environment."""
        if not group_envs or any(n < 1 for n in group_envs):
            raise ValueError(f"group_envs must be positive environment counts, got {tuple(group_envs)}")
        self.max_steps = max_steps
        self.sums = torch.zeros(len(self.KEYS) - 1 + len(group_envs), dtype=torch.float64, device=device)
        self._weights = [n / sum(group_envs) for n in group_envs]
        self._slot = len(self.KEYS) - 1  # this handle's coverage slot: group 0's

    def for_group(self, index: int) -> EpisodeStats:
        """A handle on the same sums whose `add` writes size group `index`'s share of the coverage."""
        handle = copy.copy(self)
        handle._slot = len(self.KEYS) - 1 + index
        return handle

    def reset(self) -> None:
        self.sums.zero_()

    def add(self, terminated: torch.Tensor, truncated: torch.Tensor, info: dict) -> None:
        """Add the episodes that ended this step: `terminated, truncated [B]` bool and `env.step`'s `info`."""
        done = terminated | truncated
        d = done.to(torch.float64)
        length = info["episode_length"].to(torch.float64)
        per_env = torch.stack(
            [
                d,
                info["episode_return"].to(torch.float64) * d,
                length * d,
                info["episode_coverage"].to(torch.float64) * d,
                info["episode_collisions"].to(torch.float64) * d,
                info["episode_near_misses"].to(torch.float64) * d,
                torch.where(terminated, length, torch.full_like(length, self.max_steps)) * d,
                terminated.to(torch.float64),
            ]
        )
        self.sums[: len(self.KEYS) - 1] += per_env.sum(1)
        self.sums[self._slot] = info["coverage"].to(torch.float64).mean()  # this group's current coverage

    def read(self) -> dict[str, float]:
        """Host read, once per iteration: means per episode (NaN when no episode ended)."""
        values, ended = self.sums.tolist(), len(self.KEYS) - 1
        now = sum(w * c for w, c in zip(self._weights, values[ended:]))  # over every group's environments
        s = dict(zip(self.KEYS[:ended], values[:ended]), last_coverage=now)
        n = s["episodes"]
        out = {"episodes": n, "last_coverage": s["last_coverage"]}
        for k in ("return", "length", "coverage", "collisions", "near_misses", "steps_to_target"):
            out[k] = s[k] / n if n > 0 else float("nan")
        out["reached_frac"] = s["reached"] / n if n > 0 else float("nan")
        return out


def reset_where_done(hidden: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """`hidden [B, N, H]` with the environments where `done [B]` zeroed: the next step starts an
    episode (a `where`, not a product: a non-finite state must not survive as NaN)."""
    return torch.where(done.view(-1, 1, 1), torch.zeros_like(hidden), hidden)


def _write(buffer: torch.Tensor, row: torch.Tensor, value: torch.Tensor) -> None:
    """`buffer[row] = value` for a device index `row [1]`: an index_copy_, which a captured graph
    takes as it is (a tensor index in `__setitem__` would have the compiler specialize on its value)."""
    buffer.index_copy_(0, row, value.unsqueeze(0).to(buffer.dtype))


@torch.no_grad()
def rollout_step(
    env: UAVSwarmEnv,
    actor: Actor,
    storage: Storage,
    stats: EpisodeStats,
    noise: ActionNoise,
    autocast: Callable[[], contextlib.AbstractContextManager],
    agent: torch.Tensor,
    obs: dict[str, torch.Tensor],
    hidden: torch.Tensor | None,
    t: torch.Tensor,
):
    """One step of the rollout: the policy step, `env.step`, the storage writes, the episode statistics.

    Captures whole (`torch.compile(fullgraph=True)`, CUDA graphs): the row is a device counter, no
    branch reads a tensor, the noise is a counter hash, nothing is read back to the host.

    Args:
        env: the environment.
        actor: the actor, in the form the rollout computes it.
        storage: written at row `t`.
        stats: the iteration's episode statistics.
        noise: the sampling noise.
        autocast: the networks' autocast factory.
        agent: `[B * N]` int64 agent ids.
        obs: the current observation.
        hidden: `[B, N, H]` float32, a recurrent actor's state (None for a feed-forward one).
        t: 0-dim int64 on the device, the storage row; advanced in place.

    Returns:
        `(next obs, next hidden [B, N, H] float32 or None)`.
    """
    if hidden is not None:  # the update replays each chunk from the state at its start
        chunk = (t // storage.chunk_length).view(1)
        kept = storage.hidden.index_select(0, chunk)[0]
        _write(storage.hidden, chunk, torch.where(t % storage.chunk_length == 0, hidden, kept))
    actions, logprob, heading, next_hidden = actor.act(obs, agent, noise, autocast, hidden=hidden)
    obs, done = record_step(env, storage, stats, obs, actions, logprob, heading, t)
    t.add_(1)
    return obs, reset_where_done(next_hidden, done) if hidden is not None else None


def record_step(
    env: UAVSwarmEnv,
    storage: Storage,
    stats: EpisodeStats,
    obs: dict[str, torch.Tensor],
    actions: torch.Tensor,
    logprob: torch.Tensor,
    heading: torch.Tensor | None,
    t: torch.Tensor,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The environment's half of a rollout step: store `obs` and the policy's `actions [B, N]`,
    `logprob [B, N]` (and `heading`) at row `t`, `env.step`, store what it returns, add the episodes
    that ended to `stats`. Returns `(next obs, done [B] bool)`."""
    row = t.view(1)
    if heading is not None:
        _write(storage.heading, row, heading)
    _write(storage.local, row, obs["local"])
    _write(storage.state, row, obs["state"])
    _write(storage.actions, row, actions)
    _write(storage.logprobs, row, logprob)
    obs, reward, terminated, truncated, info = env.step(actions)
    _write(storage.final_local, row, info["final_obs"]["local"])
    _write(storage.final_state, row, info["final_obs"]["state"])
    _write(storage.rewards, row, reward)
    _write(storage.terminated, row, terminated)
    _write(storage.truncated, row, truncated)
    stats.add(terminated, truncated, info)
    return obs, terminated | truncated


RolloutStep = Callable[..., tuple[dict[str, torch.Tensor], "torch.Tensor | None"]]


def compile_rollout_step(
    device: torch.device, backend: str = "inductor", *, actor: Actor, dtype: torch.dtype = torch.float32
) -> tuple[RolloutStep, Actor]:
    """`rollout_step` captured whole (`train.compile_rollout`): on CUDA as CUDA graphs (inductor's
    `reduce-overhead` mode), elsewhere as inductor's fused kernels. Slow to compile on the CPU (minutes).

    Args:
        device: the rollout's device.
        backend: `inductor`, or another `torch.compile` backend (`cudagraphs`: CUDA graphs of the
            eager kernels), which keeps `actor` as it is.
        actor: the actor.
        dtype: the networks' compute dtype (the AMP dtype, or float32).

    Returns:
        `(step, policy)`: the compiled step and the actor to give it, under inductor `actor` in
        `Form.fused` (sharing its weights; log-probabilities within 1e-4 of the update's) on CUDA
        and on a CPU in float32, `actor` itself for a CPU's bf16.

    Raises:
        ValueError: inductor cannot build kernels here (`agents.algo.compiled.check_compiler`).
    """
    from agents.algo.compiled import check_compiler
    from uavsim.compile_compat import prepare_inductor

    if backend != "inductor":
        step = torch.compile(rollout_step, fullgraph=True, backend=backend)
        return (outputs_kept(step) if device.type == "cuda" else step), actor
    check_compiler(device, "train.compile_rollout")
    prepare_inductor()  # what inductor lowers wrong in the env's step (uavsim.compile_compat)
    # the faster form on each (docs/performance.md, "Design choices, measured"); the env's rebuild of
    # prepared starts is a host-side branch: a few graphs, each captured once
    fused = device.type == "cuda" or dtype == torch.float32
    step = torch.compile(rollout_step, fullgraph=True, options=inductor_options(device))
    return (outputs_kept(step) if device.type == "cuda" else step), with_form(actor, Form.fused) if fused else actor


def outputs_kept(step: RolloutStep) -> RolloutStep:
    """`step` with its outputs copied out of the CUDA graphs' memory, each call a new generation of
    CUDA graph trees (`cudagraph_mark_step_begin`: once the update has marked its minibatches'
    steps, generations no longer begin by themselves, and the steps would chain into one tree, T
    graphs deep). A generation's replay overwrites the last one's outputs, while the rollout feeds
    each step's observation and hidden state to the next (on an H100, torch 2.11: "accessing
    tensor output of CUDAGraphs that has been overwritten")."""

    def kept(*args):
        torch.compiler.cudagraph_mark_step_begin()
        obs, hidden = step(*args)
        return {k: v.clone() for k, v in obs.items()}, hidden.clone() if hidden is not None else None

    return kept


def inductor_options(device: torch.device) -> dict[str, bool]:
    """Inductor's options for the captured rollout step on `device`: CUDA graphs on CUDA
    (`reduce-overhead`), and `emulate_precision_casts`: round where eager rounds, so the fused
    form's log-probabilities stay within 1e-4 of the eager chain's (docs/performance.md, "Design
    choices, measured"); on CUDA also eager's division (`eager_division_option`)."""
    from torch._inductor import list_mode_options

    if device.type != "cuda":
        return {**list_mode_options("default"), "emulate_precision_casts": True}
    return {**list_mode_options("reduce-overhead"), "emulate_precision_casts": True, **eager_division_option()}


def eager_division_option() -> dict[str, bool]:
    """Inductor's option that makes its triton kernels divide as eager CUDA does (IEEE
    round-to-nearest, `div_rn`), under the installed torch's name for it; {} where it has none.
    Triton's own `/` is approximate (`div.full.f32`): compiled on an H200 (torch 2.11), the step's
    `t / max_steps` observation came out an ulp away from the eager one. C++ kernels divide exactly."""
    from torch._inductor import config

    names = config.get_config_copy()
    for name in ("eager_numerics.division_rounding", "emulate_divison_rounding"):  # torch 2.13; 2.10-2.12 (sic)
        if name in names:
            return {name: True}
    return {}
