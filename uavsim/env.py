"""`UAVSwarmEnv`: thousands of coverage environments stepped at once as batched torch tensors.

The rules are those of `uavsim.rules`; `uavsim.reference.ReferenceEnv` is the same task in NumPy
and environment ``i`` here plays exactly the episodes of ``ReferenceEnv(cfg, seed, env_index=i)``.

State: one row of bytes per environment (`uavsim.record`), updated in place, a typed view per field
(`uavsim.dynamics.Layout`): the packed grid (cell codes and UAV counts), each UAV's cell (and memory),
per-block counts, counters in the narrowest exact integer types; ``env.state`` in the rules' terms.

Autoreset (``autoreset_mode``, Gymnasium's names):
    "same_step"  an environment whose episode ends is reset inside that ``step``: ``obs`` is the
                 next episode's first observation, ``info["final_obs"]`` the last one;
    "next_step"  ``step`` returns the last observation; the next ``step`` starts the next
                 episode instead (its actions are ignored; reward 0, not terminated, not
                 truncated) and returns its first observation. No ``final_obs``: cheaper.
Where the next episodes' starts come from (``reset_mode``):
    "prepared"   every environment's next start is kept ready in a second state record and
                 swapped in by one ``torch.where``; all of them are rebuilt together every
                 ``prepare_period`` steps, the fewest steps any episode can take
                 (`uavsim.episode_start.min_episode_length`), so a start is always ready when
                 needed. No data-dependent shape, no host read: the GPU path (CUDA graphs too);
    "dense"      the same with every start rebuilt every step (a reference for the above);
    "sparse"     the starts are built for the environments that ended only (``nonzero``): a
                 host sync per step on a GPU, free on the CPU.
The default is "prepared" everywhere. All modes give the same results (tested against the
reference, bit for bit).
"""

from __future__ import annotations

from typing import Any

import torch

from uavsim.config import EnvConfig
from uavsim.device import canonical_device  # noqa: F401 -- re-exported: the adapters import it from here
from uavsim.dynamics import Layout, into, step_coverage
from uavsim.env_checks import check_actions, check_batch, check_choice, check_mask
from uavsim.env_state import EnvState
from uavsim.episode_start import StartTables, launch_can_end, min_episode_length, start_episodes
from uavsim.memory import sense_and_share
from uavsim.observation import observe
from uavsim.record import as_words, swap_rows
from uavsim.rng import MAX_KEY, env_key

RESET_MODES = ("prepared", "dense", "sparse")
AUTORESET_MODES = ("same_step", "next_step")
OBS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def next_episode(episode: torch.Tensor) -> torch.Tensor:
    """``[M]`` int64: the next episode index; after 2**31 episodes (the RNG's key range) the maps repeat."""
    return (episode.long() + 1) % MAX_KEY


def mean_return(ep_reward: torch.Tensor) -> torch.Tensor:
    """``[B]`` float32 mean over UAVs of ``ep_reward [B, N]`` float32, as ``rules.mean_return``."""
    # summed in float64, exact for a few float32 values (within ~2**25 of each other): any order agrees
    out = torch.empty(ep_reward.shape[0], dtype=torch.float32, device=ep_reward.device)
    return torch.div(ep_reward.sum(1, dtype=torch.float64), ep_reward.shape[1], out=out)


class UAVSwarmEnv(EnvState):
    """``num_envs`` coverage environments on one device. See the module docstring for the modes.

    Args:
        config: the task (default ``EnvConfig()``).
        num_envs: batch size ``B``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or a ``torch.device``.
        seed: the RNG seed, in ``[0, 2**31)``.
        first_env_index: environment ``b`` of this batch is global environment
            ``first_env_index + b`` (distributed ranks use disjoint ranges).
        check_action_range: validate that actions lie in ``[0, num_actions)``: a host read per
            step, so trainers that sample valid actions turn it off. Off, a negative action indexes
            the move table from its end (-1 moves like the last action), a larger one raises an
            IndexError (a device-side assert on a GPU) from a step left half done: reset before going on.
            Shape, dtype and device are always checked.
        reset_mode: ``"prepared"``, ``"dense"``, ``"sparse"`` or ``None`` (the default).
        autoreset_mode: ``"same_step"`` (default) or ``"next_step"``.
        obs_dtype: observations in float32 (default), bfloat16 or float16: each value the
            float32 value of the rules cast to it (the 0/1 channels are exact in all three, the UAV counts
            up to 256 in bfloat16 and 2,048 in float16).
    """

    def __init__(
        self,
        config: EnvConfig | None = None,
        num_envs: int = 1,
        device: Any = "cpu",
        seed: int = 0,
        first_env_index: int = 0,
        check_action_range: bool = True,
        reset_mode: str | None = None,
        autoreset_mode: str = "same_step",
        obs_dtype: torch.dtype = torch.float32,
    ):
        self.config = cfg = config if config is not None else EnvConfig()
        if not isinstance(cfg, EnvConfig):
            raise TypeError(f"config must be an EnvConfig, got {type(cfg).__name__}")
        num_envs, seed, first_env_index, check_action_range = check_batch(
            num_envs, seed, first_env_index, check_action_range, MAX_KEY
        )
        self.device = canonical_device(device)
        reset_mode = "prepared" if reset_mode is None else reset_mode  # on every device (module docstring)
        check_choice("reset_mode", reset_mode, RESET_MODES)
        check_choice("autoreset_mode", autoreset_mode, AUTORESET_MODES)
        if obs_dtype not in OBS_DTYPES:
            raise TypeError(f"obs_dtype must be one of {OBS_DTYPES}, got {obs_dtype!r}")
        self.reset_mode, self.autoreset_mode, self.obs_dtype = reset_mode, autoreset_mode, obs_dtype
        self.num_envs, self.seed, self.check_action_range = num_envs, seed, check_action_range
        self.num_uavs, self.num_actions = cfg.num_uavs, cfg.num_actions
        self.local_obs_dim, self.state_dim = cfg.local_obs_dim, cfg.state_dim
        self.env_index = torch.arange(first_env_index, first_env_index + num_envs, device=self.device)
        self._build_tables()
        # Steps between two rebuilds of the prepared starts (sparse: 0, never): no episode is shorter, so an
        # episode whose start was just used cannot end before its next start is built (next_step uses a start
        # one step after the episode ended: one step more).
        fewest, period = self._start_tables.fewest_free, {"dense": 1, "sparse": 0}
        self.prepare_period = period.get(reset_mode, min_episode_length(cfg, fewest) + (autoreset_mode == "next_step"))
        self._launch_can_end = launch_can_end(cfg, fewest)  # if not, next_step need not mask `terminated` at a restart
        self._buf: torch.Tensor | None = None  # [B, record bytes] uint8: the state
        self._v: dict[str, torch.Tensor] = {}

    # -- constant tables -----------------------------------------------------------------------
    def _build_tables(self) -> None:
        cfg, dev, b = self.config, self.device, self.num_envs
        self._lay = lay = Layout(cfg, dev)
        self._start_tables = StartTables(lay)
        self._env_key = env_key(self.seed, self.env_index)
        self._moves, self._scale = lay.moves, lay.scale  # for policies and tests: [A, 2] int64, [2] float32
        self._b_index = torch.arange(b, device=dev)[:, None]
        # cover's scratch, for the cells a step enters (with cell_reads, and the move's cell: `_advance`)
        entered = lay.edges.shape[1] + (lay.cell_reads is not None)
        self._first = torch.ones(b, cfg.num_uavs * entered, dtype=torch.bool, device=dev)
        self._first_start = torch.ones(b, cfg.num_uavs * lay.foot.shape[0], dtype=torch.bool, device=dev)
        # What the step adds to the grid: -1 / +1 UAV on the cells left / entered (-1 wraps in uint8,
        # as intended), then the COVERED bit on the freshly covered cells (written each step).
        # (pools_after_grid: then 1 on the freshly covered cells' pool slots, written each step)
        slots = self._first.shape[1]
        delta = torch.ones(b, 2 * cfg.num_uavs + slots * (1 + lay.pools_after_grid), dtype=torch.int64)
        delta[:, : cfg.num_uavs] = -1
        self._grid_delta = delta.to(lay.grid_dtype).to(dev)
        f32 = lambda x: torch.tensor(x, dtype=torch.float32, device=dev)  # noqa: E731
        self._c_cov, self._c_time = f32(cfg.coverage_reward), f32(cfg.time_penalty)
        self._neg_penalties = f32([-cfg.collision_penalty, -cfg.near_miss_penalty])
        self._c_target, self._zero = f32(cfg.target_coverage), f32(0.0)
        self._pending = torch.zeros(b, dtype=torch.bool, device=dev)  # next_step: the next step restarts
        # what a step adds to (t, covered): 1 (next_step: 0 where the episode restarts), the cells newly covered
        # (int64 with `Layout.team_reward`: ``newly`` is then its column index)
        clock_step_dtype = lay.record.fields["clock"].dtype if lay.team_reward is None else torch.int64
        self._clock_step = torch.ones(b, 2, dtype=clock_step_dtype, device=dev)
        self._hover = torch.zeros((), dtype=torch.int64, device=dev)
        if self.reset_mode != "sparse":
            self._prep_buf = self._lay.record.empty(b, dev)
            self._prep_obs: dict[str, torch.Tensor] = {}
            self._since_prepare = 0

    def _flat(self, pos: torch.Tensor) -> torch.Tensor:
        """``[..., N]`` int64 flat cells of map positions ``pos [..., N, 2]`` in ``state["cells"]``."""
        return self._lay.padded_cells_of(pos)

    # -- building states -----------------------------------------------------------------------------
    def _start(self, rows: int, env_key_: torch.Tensor, episode: torch.Tensor) -> torch.Tensor:
        """A new ``[rows, record bytes]`` state holding the starts of ``episode`` (`start_episodes`)."""
        buf = self._lay.record.empty(rows, self.device)
        start_episodes(self._lay, self._start_tables, buf, env_key_, episode, self._first_start[:rows])
        return buf

    def _prepare(self, v: dict[str, torch.Tensor] | None = None) -> None:
        """Build every environment's next start (after the episodes of state views ``v``, the
        env's own by default) into the prepared record, and its observation for same_step."""
        v = self._v if v is None else v
        prep = self._prep_buf.clone() if torch.compiler.is_compiling() else self._prep_buf  # see `step`
        start_episodes(
            self._lay, self._start_tables, prep, self._env_key, next_episode(v["episode"]), self._first_start
        )
        if self.autoreset_mode == "same_step":  # compiled, into the env's own tensors: see `step`
            obs = self._observe(prep, self._b_index)[0]
            self._prep_obs = obs if prep is self._prep_buf else {k: self._prep_obs[k].copy_(x) for k, x in obs.items()}
        if prep is not self._prep_buf:
            self._prep_buf.copy_(prep)
        self._since_prepare = 0

    def _observe(
        self,
        buf: torch.Tensor,
        b_index: torch.Tensor,
        cell: torch.Tensor | None = None,
        window: tuple[torch.Tensor, torch.Tensor] | None = None,
        read: torch.Tensor | None = None,
        views: dict[str, torch.Tensor] | None = None,
    ):
        return observe(self._lay, buf, self.obs_dtype, b_index, cell, window, read, views)

    def _restart(self, mask: torch.Tensor, buf: torch.Tensor, v: dict[str, torch.Tensor]) -> None:
        """Start the next episode where ``mask`` ([B] bool) in the state ``buf`` (views ``v``), in place."""
        if self.reset_mode == "sparse":
            ids = mask.nonzero().squeeze(1)  # host sync on a GPU: "prepared" avoids it
            if ids.numel():
                fresh = self._start(ids.shape[0], self._env_key[ids], next_episode(v["episode"][ids]))
                buf.index_copy_(0, ids, fresh)
        else:
            words = as_words(buf)
            torch.where(mask[:, None], as_words(self._prep_buf), words, out=words)

    # -- public API ----------------------------------------------------------------------------
    def reset(self, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Start new episodes everywhere (``mask=None``) or where the ``[B]`` bool ``mask`` is True.

        Returns:
            The observation of every environment: ``{"local": [B, N, L], "state": [B, S]}`` in ``obs_dtype``.
        Raises:
            RuntimeError: a first reset with a ``mask``.
            TypeError, ValueError: a bad ``mask``.
        """
        if mask is None or self._buf is None:
            if mask is not None:
                raise RuntimeError("the first reset must reset every environment (mask=None)")
            episode = torch.zeros_like(self.env_index) if self._buf is None else next_episode(self._v["episode"])
            self._set_buffer(self._start(self.num_envs, self._env_key, episode))
            self._pending.zero_()
        else:
            check_mask(mask, self.num_envs, self.device)
            if self.reset_mode != "sparse":  # an autoreset since the last rebuild may have used a prepared start
                self._prepare()
            self._restart(mask, self._buf, self._v)
            self._pending &= ~mask
        if self.reset_mode != "sparse":
            self._prepare()
        return self.observe()

    def _set_buffer(self, buf: torch.Tensor) -> None:
        self._buf, self._v = buf, self._lay.record.views(buf)

    def step(self, actions: torch.Tensor):
        """Advance every environment one step.

        Args:
            actions: ``[B, N]`` int64 on the env's device, values in ``[0, num_actions)``.
        Returns:
            ``obs`` (after any autoreset), ``reward [B, N] float32``, ``terminated [B] bool``,
            ``truncated [B] bool``, ``info``: ``coverage [B]`` float32 (after the step, before a same-step
            reset; with float32 observations a view of the step's own observation's ``state``, its last
            column: copy one before writing into it), ``collisions``/``near_misses [B, N] bool``, ``final_obs``
            (same_step only: the observation before the reset, equal to ``obs`` where the episode goes on)
            and, valid where the episode ended,
            ``episode_return [B]`` float32 (mean over UAVs), ``episode_length``, ``episode_coverage``,
            ``episode_collisions``, ``episode_near_misses`` (integers in the state's narrow dtypes).
        Raises:
            RuntimeError: before ``reset()``.
            TypeError, ValueError: bad ``actions``.
        """
        if self._buf is None:
            raise RuntimeError("call reset() before step()")
        check_actions(actions, self.num_envs, self.num_uavs, self.num_actions, self.device, self.check_action_range)
        # torch.compile cannot write a graph input through views of another dtype (the state's fields): compiled,
        # the step works on a copy of the state and writes it back whole, and keeps no graph output (a CUDA
        # graph's next replay overwrites them).
        buf = self._buf.clone() if torch.compiler.is_compiling() else self._buf
        v = self._v if buf is self._buf else self._lay.record.views(buf)
        if self.autoreset_mode == "next_step":
            out = self._step_next(actions, buf, v)
        else:
            out = self._step_same(actions, buf, v)
        if self.prepare_period:
            self._since_prepare += 1
            if self._since_prepare >= self.prepare_period:
                self._prepare(v)
        if buf is not self._buf:
            self._buf.copy_(buf)
        return out

    def _step_same(self, actions: torch.Tensor, buf: torch.Tensor, v: dict[str, torch.Tensor]):
        final_obs, reward, terminated, truncated, info = self._advance(actions, buf, v)
        done = terminated | truncated
        info["final_obs"] = final_obs
        if self.reset_mode == "sparse":
            ids = done.nonzero().squeeze(1)  # host sync on a GPU
            if ids.numel() == 0:  # the shape is known on the host already: skip all the copies
                return final_obs, reward, terminated, truncated, info
            fresh = self._start(ids.shape[0], self._env_key[ids], next_episode(v["episode"][ids]))
            buf.index_copy_(0, ids, fresh)
            new_obs = self._observe(fresh, self._b_index[: ids.shape[0]])[0]
            obs = {k: x.index_copy(0, ids, new_obs[k]) for k, x in final_obs.items()}  # a copy: final_obs stays
        else:
            self._restart(done, buf, v)
            obs = {k: swap_rows(done, self._prep_obs[k], x) for k, x in final_obs.items()}
        return obs, reward, terminated, truncated, info

    def _step_next(self, actions: torch.Tensor, buf: torch.Tensor, v: dict[str, torch.Tensor]):
        pending = self._pending
        self._restart(pending, buf, v)
        actions = torch.where(pending[:, None], self._hover, actions)  # a restarted env does not move
        obs, reward, terminated, truncated, info = self._advance(actions, buf, v, pending)
        torch.logical_or(terminated, truncated, out=pending)
        return obs, reward, terminated, truncated, info

    def _advance(
        self,
        actions: torch.Tensor,
        buf: torch.Tensor,
        v: dict[str, torch.Tensor],
        restarted: torch.Tensor | None = None,
    ):
        """The rules' step of the state ``buf`` (views ``v``) in place, without resets: ``step``'s tuple.
        ``restarted`` ([B] bool, next_step): episodes that start this step; their clock does not advance."""
        lay, b, n = self._lay, self.num_envs, self.num_uavs
        grid, cell = v["grid"], v["cell"]
        flags = torch.empty(b, n, 2, dtype=torch.bool, device=self.device)  # collided, near miss
        collided, near = flags[..., 0], flags[..., 1]
        # [B, N, 1 + E]: the cell each move leads to, then the footprint cells it enters
        target = lay.cell_steps[cell, actions]
        # Off the map is blocked too; a UAV's own cell never is, so a blocked move is a collision.
        into(collided, torch.ge, grid.gather(1, target[..., 0]), lay.blocked_value)
        read = None
        if lay.cell_reads is None:
            moved_to = torch.where(collided, cell, target[..., 0])
            # a blocked UAV enters nothing: its own cell, in its footprint, in every slot (as hovering's)
            entered = torch.where(collided[..., None], cell[..., None], target[..., 1:])  # [B, N, E]
        else:  # one where for both; the move's cell, in the footprint before or entered, covers nothing more
            entered = torch.where(collided[..., None], cell[..., None], target)  # [B, N, 1 + E]
            moved_to = entered[..., 0]  # strided: read by index ops only
            read = lay.cell_reads[moved_to]  # [B, N, F]: memory fields, heading keys, position
        sidx = entered.view(b, -1).sort(dim=1).values  # equal cells side by side
        delta, k = self._grid_delta, sidx.shape[1]
        fresh, slot = step_coverage(lay, v, sidx, self._first, delta[:, 2 * n + k :] if lay.pools_after_grid else None)
        # One write of the grid: -1 / +1 UAV on the cells left / entered, COVERED added to the fresh cells
        # (and 1 to their blocks' covered counts, when the pools follow the grid).
        into(delta[:, 2 * n : 2 * n + k], torch.mul, fresh, lay.covered_bit)
        if slot is None:
            grid.scatter_add_(1, torch.cat([cell, moved_to, sidx], 1), delta)
        else:
            lay.grid_and_pools(buf).scatter_add_(1, torch.cat([cell, moved_to, sidx, slot], 1), delta)
        cell.copy_(moved_to)
        window = sense_and_share(lay, v, moved_to, read, restarted)  # the UAVs' memories, if any (uavsim.memory)
        clock_step = self._clock_step  # (1, newly covered): one add advances (t, covered)
        if restarted is not None:
            into(clock_step[:, 0], torch.logical_not, restarted)
        newly = into(clock_step[:, 1], torch.sum, fresh, 1)
        v["clock"] += clock_step

        if lay.team_reward is not None:  # the rules' values, tabulated (`dynamics.team_reward_table`)
            team = lay.team_reward[v["reward_row"], newly]
        else:
            team = torch.div(newly, v["free"]).mul_(self._c_cov).sub_(self._c_time)  # float32, as the rules divide
        obs, own_cell, clock = self._observe(buf, self._b_index, moved_to, window, read, v)  # (t / max_steps, coverage)
        coverage = clock[:, 1]
        into(near, torch.ge, own_cell, lay.covered_bit + 2)  # another UAV on a UAV's (covered) cell
        # team - collision_penalty * collided - near_miss_penalty * near, rounded as the rules: each product is
        # exact (0 or the penalty), so adding it times -1 rounds once, as the subtraction (fused or not)
        reward = torch.addcmul(team[:, None], collided, self._neg_penalties[0])
        reward.addcmul_(near, self._neg_penalties[1])
        if lay.ends is not None:  # (t >= max_steps, terminated) in one comparison (`Layout.ends`), by rows
            ends = torch.empty(2, b, dtype=torch.bool, device=self.device)
            timed_out, terminated = into(ends.t(), torch.ge, clock, lay.ends).t()
        else:
            timed_out, terminated = v["t"] >= self.config.max_steps, coverage >= self._c_target
        if restarted is not None:  # the first step of a restarted episode is its reset: no reward, no end
            reward = torch.where(restarted[:, None], self._zero, reward)
            if self._launch_can_end:  # a launch that meets the target ends nothing yet
                terminated = torch.gt(terminated, restarted)
        truncated = torch.gt(timed_out, terminated)
        v["ep_reward"] += reward
        v["ep_counts"] += flags.sum(1)
        ended = lay.record.span_views(lay.record.span(buf, "clock", "ep_counts").clone(), "clock", "ep_counts")
        info = {
            "coverage": coverage,
            "collisions": collided,
            "near_misses": near,
            "episode_return": mean_return(v["ep_reward"]),
            "episode_length": ended["t"],
            "episode_coverage": coverage,
            "episode_collisions": ended["ep_counts"][:, 0],
            "episode_near_misses": ended["ep_counts"][:, 1],
        }
        return obs, reward, terminated, truncated, info

    # -- observation and rendering ---------------------------------------------------------------
    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation of every environment (no step)."""
        if self._buf is None:
            raise RuntimeError("call reset() before observe()")
        return self._observe(self._buf, self._b_index)[0]

    def render(self, env_index: int = 0, cell_px: int = 8) -> Any:
        """RGB uint8 ``[H * cell_px, W * cell_px, 3]`` NumPy image of one environment."""
        from uavsim.render import render_env  # keeps the step module free of drawing code

        return render_env(self, env_index, cell_px)
