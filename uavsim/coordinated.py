"""`CoordinatedFrontierPolicy`: the UAVs share out the uncovered cells in an auction, every step.

Vectorized over the batch and over the UAVs; the Python loops run over auction rounds and search
rounds (as many as the map's size sets, not the data), never over environments or UAVs, and a call
reads the device once (`CoordinatedFrontierPolicy.plan`).
"""

from __future__ import annotations

import torch

from uavsim.bitmap_search import CHUNK, BitMapSearch
from uavsim.checks import check_int
from uavsim.env import UAVSwarmEnv
from uavsim.policies import GreedyFrontierPolicy
from uavsim.rng import MAX_KEY, hash32
from uavsim.rules import BLOCKED, FREE

FLOAT32_EXACT = 2**24  # float32 holds every integer up to here: the keys length * C + rank, below


class CoordinatedFrontierPolicy(GreedyFrontierPolicy):
    """Each UAV flies towards an uncovered cell it won in an auction, by the shortest path.

    Every step, in auction rounds: each UAV still without a target bids for its nearest available
    uncovered cell (path length around obstacles, ties by a random order of the cells). A bid wins
    unless a lower bid (or an equal one of a lower-indexed UAV) lies within ``claim_radius`` rows and
    columns of it; a won cell takes every cell within ``claim_radius`` of it out of the auction (its
    winner will cover that area), and the losers bid again. So the team spreads over the frontier
    instead of flocking to its nearest part. A UAV left with nothing to win heads for its nearest
    uncovered cell, claimed or not; with nothing reachable it hovers.

    How, per call (`plan`): one breadth-first search from all the UAVs' cells at once, on bit maps
    (`uavsim.bitmap_search`: a byte per cell holds 8 UAVs' bits), gives each UAV its path length to
    every cell; the move set is symmetric, so that is also each cell's path length to the UAV. A bid
    is then the smallest ``length * C + rank`` over the available cells (``C`` cells, ranks: the
    cells' random order), unique per cell, and an auction round needs no search. A second search,
    from each UAV's target and only as deep as the UAV lies from it, marks the neighbours one move
    nearer the target: those on a shortest path, among which the tie-break picks (exactly the
    neighbours whose key was the bid's minus ``C`` in the per-round fields of before: a cell one
    move nearer the won cell has it as its own lowest key too). The first search runs a fixed number
    of rounds, `search_rounds` (the obstacle-free map's diameter, in whole chunks of 16); the call
    reads one number from the device: whether a bid may have needed a longer path (then the call
    searches a quarter deeper, at least a chunk, reads again, and keeps the deeper setting: counted
    in `deeper_calls`; on the protocol maps one call of 200, at 256 environments) and the farthest
    target (the second search's depth).

    Ties between equally short moves are broken by a counter-based hash of ``(seed, row in the
    batch, call count, UAV, move)``, not a generator's stream: environment ``b`` plays the same
    moves whatever the batch size. The global RNG is never used.

    How it compares with greedy, and the variants tried and dropped: docs/performance.md, "Design
    choices, measured".

    Args:
        env: the env it plays (any env of the same layout; checked at every call).
        seed: the tie-breaks' seed (the cells' order and the hash key).
        check_every: checked as the greedy policy checks it, unused: the searches run a set number
            of rounds, with no convergence checks.
        claim_radius: rows and columns around a won cell that it claims (default: the sensor radius).
    """

    def __init__(self, env: UAVSwarmEnv, seed: int = 0, check_every: int = 8, claim_radius: int | None = None):
        super().__init__(env, seed, check_every)
        cfg, dev = env.config, env.device
        # the sensor radius: the best on the protocol maps (docs/performance.md, "Design choices, measured")
        radius = cfg.sensor_radius if claim_radius is None else claim_radius
        self.claim_radius = check_int("claim_radius", radius, 0)
        c = self.num_cells = self.hp * self.wp
        self.step_offsets = self.move_offsets[1:]  # [A - 1] the moves that leave the cell
        self.cell_rank = torch.randperm(c, generator=self.generator, device=dev)  # drawn once
        self.rank_to_cell = torch.argsort(self.cell_rank)
        self.cell_row = torch.arange(c, device=dev) // self.wp
        self.cell_col = torch.arange(c, device=dev) % self.wp
        self.hash_key = int(torch.randint(0, MAX_KEY, (1,), generator=self.generator, device=dev))
        self.calls = 0
        self.search = BitMapSearch(cfg, c, self.wp, self.shifts, dev)
        self._map_cells(dev)
        self._claim_squares(cfg, dev)
        # The longest shortest path of an obstacle-free map, in whole chunks: enough for most maps.
        h, w = cfg.grid_height, cfg.grid_width
        diameter = max(h, w) - 1 if self.search.square else h + w - 2
        self.search_rounds = -(-(diameter + 1) // CHUNK) * CHUNK - 1
        self.deeper_calls = 0  # calls whose bids may have needed longer paths than search_rounds

    def _map_cells(self, dev: torch.device) -> None:
        """The map's cells in rank order, a bid's cells: as padded cells, as search cells, their
        ranks, and each padded cell's position among them (``M``: none, off the map)."""
        cs, cell_to_search = self.search.search_cells, self.search.cell_to_search
        mapped = cell_to_search[self.rank_to_cell]
        keep = self.search.inside[mapped.clamp(max=cs - 1)] & (mapped < cs)
        self.map_cells = self.rank_to_cell[keep]  # [M] padded cells, rank order
        self.map_search = cell_to_search[self.map_cells]  # [M] their search cells
        self.map_rank = self.cell_rank[self.map_cells].to(torch.float64)  # [M] ascending
        position = torch.full((self.num_cells + 1,), len(self.map_cells), dtype=torch.int64, device=dev)
        self.map_position = position.scatter_(0, self.map_cells, torch.arange(len(self.map_cells), device=dev))

    def _claim_squares(self, cfg, dev: torch.device) -> None:
        """The cells within ``claim_radius`` rows and columns of a cell, as flat offsets ``[S]``;
        with a radius beyond the padding, the squares are clipped to the padded grid per cell."""
        r = self.claim_radius
        span = torch.arange(-r, r + 1, device=dev)
        self.square_rows = span.repeat_interleave(2 * r + 1)
        self.square_cols = span.repeat(2 * r + 1)
        self.square_offsets = self.square_rows * self.wp + self.square_cols
        self.clip_squares = r > cfg.pad  # within the padding, a map cell's square never leaves the grid

    # -- the auction -----------------------------------------------------------------------------
    def __call__(self, env: UAVSwarmEnv) -> torch.Tensor:
        """``[B, N]`` int64 actions on the env's device: the first move of each UAV's path."""
        _, next_cell = self.plan(env)  # checks the env first
        (pos,) = env.read_state("pos")
        here = env._flat(pos.long())
        return (here[:, :, None] + self.move_offsets == next_cell[:, :, None]).long().argmax(2)  # hover: 0

    def plan(self, env: UAVSwarmEnv) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's auction for ``env``; advances the tie-break counter. Reads the device once
        (again on a call whose bids may need longer paths than `search_rounds`: `deeper_calls`).

        Returns:
            ``(target, next_cell)``, ``[B, N]`` int64 flat padded cells each (`UAVSwarmEnv._flat`): the
            cell each UAV won (or, left over, its nearest uncovered cell; -1: none reachable) and the
            cell it moves to now (its own when it hovers).

        Raises:
            ValueError: ``env`` is not laid out as the env the policy was built for.
        """
        self._check_same_layout(env)
        cells, pos = env.read_state("cells", "pos")
        here = env._flat(pos.long())  # [B, N]
        b, n = here.shape
        order = self._noise(env.env_index, n, self.step_offsets.shape[0])  # [B, N, A - 1]
        self.calls += 1
        search = self.search
        searched = cells.index_select(1, search.search_to_cell[search.lo : search.hi]).t()  # [hi - lo, B]
        open_ = ((searched != BLOCKED) & search.search_map[:, None]).to(torch.uint8)[:, None] * 255
        free = ((searched == FREE) & search.search_map[:, None]).to(torch.uint8)[:, None] * 255
        here_s = search.cell_to_search[here]
        rounds = max(1, -(-(self.search_rounds + 1) // CHUNK)) * CHUNK - 1  # whole chunks
        while True:
            target, depth, short = self._auction(cells, here, here_s, open_, free, rounds)
            read = int(short.long() << 32 | depth.amax().clamp(min=0))  # the call's one host read
            if not read >> 32:
                break
            # a quarter deeper, in whole chunks (at least one), kept for the next calls
            rounds = self.search_rounds = rounds + max(CHUNK, (rounds + 1) // 4 // CHUNK * CHUNK)
            self.deeper_calls += 1
        target_s = torch.where(target >= 0, search.cell_to_search[target.clamp(min=0)], -1)
        on_path = search.on_path(target_s, depth, here_s, open_, (read & 0xFFFFFFFF) - 1)
        nbrs = here[:, :, None] + self.step_offsets
        step = nbrs.gather(2, torch.where(on_path, order, -1.0).argmax(2, keepdim=True)).squeeze(2)
        return target, torch.where(on_path.any(2), step, here)  # none on the path: hover

    def _auction(
        self,
        cells: torch.Tensor,
        here: torch.Tensor,
        here_s: torch.Tensor,
        open_: torch.Tensor,
        free: torch.Tensor,
        rounds: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The auction's rounds on path lengths searched ``rounds`` deep.

        Returns:
            ``(target, depth, short)``: ``[B, N]`` the cell each UAV won or, left over, its nearest
            uncovered cell (-1: none reachable) and its path length there (-1: none); ``short``, a
            bool scalar: a UAV found no cell where its search may not have finished (the call must
            search deeper).
        """
        b, n = here.shape
        c, m, dev = self.num_cells, len(self.map_cells), cells.device
        length, unfinished, unreached = self.search.lengths(here_s, open_, free, rounds, self.map_search)  # [M, B, N]
        dtype = torch.float32 if (rounds + 1) * c <= FLOAT32_EXACT else torch.float64
        # offer[i, n, b]: length * C + rank of the map's i-th cell in rank order; inf: claimed (row m:
        # a sink for claims off the map)
        offer = torch.empty(m + 1, n, b, dtype=dtype, device=dev)
        offer[m] = float("inf")
        offer[:m] = length
        offer[:m].mul_(c).add_(self.map_rank.to(dtype)[:, None, None])
        avail = torch.zeros(m + 1, b, dtype=torch.uint8, device=dev)  # uncovered and not claimed (uint8: a fast any)
        avail[:m] = cells.index_select(1, self.map_cells).t() == FREE
        todo = torch.ones(b, n, dtype=torch.bool, device=dev)
        blind = torch.zeros(b, n, dtype=torch.bool, device=dev)  # bid for nothing: needs a finished search
        target = torch.full((b, n), -1, dtype=torch.int64, device=dev)
        depth = torch.full((b, n), -1, dtype=torch.int64, device=dev)
        index = torch.arange(n, device=dev)
        env = torch.arange(b, device=dev)[:, None]
        inf = torch.full((), float("inf"), dtype=dtype, device=dev)  # a fill: no copy from the host
        first = None
        for last in [False] * (n - 1) + [True]:  # the lowest bid of an environment always wins: at most N rounds
            bid = offer.amin(0).t()  # [B, N]
            reached = bid < unreached * c  # inf (nothing left) is not
            bid = torch.where(reached, bid, 0.0).long()  # length * C + rank: unique per cell
            first = (bid, reached) if first is None else first  # nothing claimed yet: the nearest uncovered cell
            bidders = todo & (avail.amax(0) > 0)[:, None]
            blind |= bidders & ~reached
            bidding = bidders & reached
            wanted = self.rank_to_cell[bid % c]
            win = bidding & ~self._outbid(wanted, bid * n + index, bidding)
            target = torch.where(win, wanted, target)
            depth = torch.where(win, bid // c, depth)
            todo &= ~win
            if not last:
                at = self._claimed(wanted, win)  # [B, S]
                avail.index_put_((at, env), torch.zeros((), dtype=torch.uint8, device=dev))
                offer += torch.zeros(m + 1, b, dtype=dtype, device=dev).index_put_((at, env), inf)[:, None]
        # nothing left to win: the nearest uncovered cell, claimed or not
        bid, reached = first
        left = todo & reached
        blind |= todo & ~reached
        target = torch.where(left, self.rank_to_cell[bid % c], target)
        depth = torch.where(left, bid // c, depth)
        return target, depth, (blind & unfinished).any()

    def _outbid(self, target: torch.Tensor, bid: torch.Tensor, bidding: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` bool: another bidding UAV bids lower for a cell within ``claim_radius`` rows and
        columns of this UAV's ``target`` (``bid``: ``[B, N]`` unique per UAV, an equal bid made
        lower for the lower-indexed UAV)."""
        row, col = self.cell_row[target], self.cell_col[target]
        far = torch.maximum((row[:, :, None] - row[:, None, :]).abs(), (col[:, :, None] - col[:, None, :]).abs())
        return ((far <= self.claim_radius) & (bid[:, None, :] < bid[:, :, None]) & bidding[:, None, :]).any(2)

    def _claimed(self, target: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        """``[B, S]``: the cells within ``claim_radius`` rows and columns of a won ``target``
        ``[B, N]`` (where ``win``), as positions among the map's cells in rank order (``M``: none,
        or off the map)."""
        b = target.shape[0]
        cells = target[:, :, None] + self.square_offsets  # [B, N, S]
        keep = win[:, :, None]
        if self.clip_squares:  # the squares as the padded grid clips them
            row = self.cell_row[target][:, :, None] + self.square_rows
            col = self.cell_col[target][:, :, None] + self.square_cols
            keep = keep & (row >= 0) & (row < self.hp) & (col >= 0) & (col < self.wp)
        return self.map_position[torch.where(keep, cells, self.num_cells)].view(b, -1)

    def _noise(self, env_index: torch.Tensor, n: int, a: int) -> torch.Tensor:
        """``[B, n, a]`` float32 in [0, 1): a pure function of (seed, environment index, call count, UAV, move),
        so that an environment plays the same moves in any batch (a shard's `first_env_index` too)."""
        device = env_index.device
        draw = (torch.arange(n, device=device)[:, None] * a + torch.arange(a, device=device))[None]
        return hash32(self.hash_key, env_index[:, None, None], self.calls % MAX_KEY, draw).to(torch.float32) / 2**32
