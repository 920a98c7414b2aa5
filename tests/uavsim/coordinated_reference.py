"""A frozen copy of `uavsim.coordinated.CoordinatedFrontierPolicy` as of commit 886b7ee (issue 48):
the planner that relaxed one distance field per auction round, with host reads per relaxation and
auction round. Test-only: the library's planner must play its moves bit for bit
(tests/uavsim/test_coordinated_equivalence.py), and `benchmarks.planner_cost` counts it beside the
library's. Not to be edited: it is the baseline the equivalence is stated against.
"""

from __future__ import annotations

import torch

from uavsim.checks import check_int
from uavsim.env import UAVSwarmEnv
from uavsim.policies import GreedyFrontierPolicy
from uavsim.rng import MAX_KEY, hash32
from uavsim.rules import BLOCKED, FREE


class ReferenceCoordinatedFrontierPolicy(GreedyFrontierPolicy):
    """Each UAV flies towards an uncovered cell it won in an auction, by the shortest path.

    Every step, in auction rounds: each UAV still without a target bids for its nearest available
    uncovered cell (path length around obstacles, ties by a random order of the cells). A bid wins
    unless a lower bid (or an equal one of a lower-indexed UAV) lies within ``claim_radius`` rows and
    columns of it; a won cell takes every cell within ``claim_radius`` of it out of the auction (its
    winner will cover that area), and the losers bid again. So the team spreads over the frontier
    instead of flocking to its nearest part. A UAV left with nothing to win heads for its nearest
    uncovered cell, claimed or not; with nothing reachable it hovers.

    Each round costs one distance field, not one per UAV: the field grows from the available cells
    and carries the rank of the cell it came from (``key = distance * C + rank``), so a UAV's key
    is its bid and a neighbour whose key is ``C`` less lies on its shortest path to that very cell.

    Ties between equally short moves are broken by a counter-based hash of ``(seed, row in the
    batch, call count, UAV, move)``, not a generator's stream: environment ``b`` plays the same
    moves whatever the batch size. The global RNG is never used.

    How it compares with greedy, and the variants tried and dropped: docs/performance.md, "Design
    choices, measured".

    Args:
        env: the env it plays (any env of the same layout; checked at every call).
        seed: the tie-breaks' seed (the cells' order and the hash key).
        check_every: relaxation rounds between checks that a field stopped changing.
        claim_radius: rows and columns around a won cell that it claims (default: the sensor radius).
    """

    def __init__(self, env: UAVSwarmEnv, seed: int = 0, check_every: int = 8, claim_radius: int | None = None):
        super().__init__(env, seed, check_every)
        # the sensor radius: the best on the protocol maps (docs/performance.md, "Design choices, measured")
        radius = env.config.sensor_radius if claim_radius is None else claim_radius
        self.claim_radius = check_int("claim_radius", radius, 0)
        c = self.num_cells = self.hp * self.wp
        # The narrowest dtype that holds every key (and the unreached one plus one step) moves the
        # least memory per relaxation round.
        self.key_dtype = torch.int32 if (c + 2) * c < torch.iinfo(torch.int32).max else torch.int64
        self.unreached = torch.iinfo(self.key_dtype).max - c
        self.step_offsets = self.move_offsets[1:]  # [A - 1] the moves that leave the cell
        self.cell_rank = torch.randperm(c, generator=self.generator, device=env.device)  # drawn once
        self.rank_to_cell = torch.argsort(self.cell_rank)
        self.rank_key = self.cell_rank.to(self.key_dtype)
        self.cell_row = torch.arange(c, device=env.device) // self.wp
        self.cell_col = torch.arange(c, device=env.device) % self.wp
        self.hash_key = int(torch.randint(0, MAX_KEY, (1,), generator=self.generator, device=env.device))
        self.calls = 0

    def label_field(
        self, sources: torch.Tensor, wall: torch.Tensor, here: torch.Tensor, waiting: torch.Tensor
    ) -> torch.Tensor:
        """The distance field of one auction round, by synchronous relaxation: after ``k`` rounds every
        cell within ``k`` moves of a source holds its final key and no other cell a key. An
        environment stops once the cells of all its waiting UAVs hold one, or its field stops
        changing; the others go on without it (the work is the sum of the environments' depths).

        Args:
            sources: ``[B, C]`` bool, the cells bid for.
            wall: ``[B, Hp - 2, Wp - 2]`` from `walls`, closing the blocked cells.
            here: ``[B, N]`` int64, the UAVs' flat padded cells.
            waiting: ``[B, N]`` bool, the UAVs whose cells must be reached.

        Returns:
            ``[B, C]`` keys ``distance * C + rank`` of every cell's nearest source; ``self.unreached``
            where none is reachable, or none reached yet.
        """
        b = sources.shape[0]
        out = torch.where(sources, self.rank_key, self.unreached)
        rows = torch.arange(b, device=sources.device)  # the environments still relaxing
        key, stable = out, torch.zeros(b, dtype=torch.bool, device=sources.device)
        for i in range(self.num_cells + 1):  # a path visits each cell at most once
            done = ((key.gather(1, here) < self.unreached) | ~waiting).all(1) | stable
            if bool(done.any()):  # one host read per round
                finished, going = done.nonzero().squeeze(1), (~done).nonzero().squeeze(1)
                if key is not out:
                    out.index_copy_(0, rows[finished], key[finished])
                if going.numel() == 0:
                    return out
                key, rows, wall, here, waiting = (t[going] for t in (key, rows, wall, here, waiting))
            stable = self._relax_once(key, wall, check=i % self.check_every == 0)
        out.index_copy_(0, rows, key)
        return out

    def walls(self, cells: torch.Tensor) -> torch.Tensor:
        """``[B, Hp - 2, Wp - 2]`` keys: ``self.unreached`` on the blocked cells of ``cells`` inside
        the outer ring, 0 elsewhere. A maximum with it closes them (cheaper than a masked_fill_ through
        the strided inner view: docs/performance.md, "Design choices, measured")."""
        blocked = (cells == BLOCKED).view(-1, self.hp, self.wp)[:, 1:-1, 1:-1]
        return blocked.to(self.key_dtype) * self.unreached

    def _relax_once(self, key: torch.Tensor, wall: torch.Tensor, check: bool) -> torch.Tensor:
        """One round in place: a cell takes the smallest key of its move-set neighbours plus ``C``
        (one move further), ``wall`` closes the blocked cells. Returns ``[B]`` bool, with ``check``:
        the field did not change (else all False).

        Written on views of the padded grid with ``out=``: torch.roll would allocate a shifted copy
        of the grid per move and round (docs/performance.md, "Design choices, measured")."""
        hp, wp = self.hp, self.wp
        grid = key.view(-1, hp, wp)
        inner = grid[:, 1:-1, 1:-1]  # the outer ring is border (blocked): every view stays in bounds
        views = [grid[:, 1 + dr : hp - 1 + dr, 1 + dc : wp - 1 + dc] for dr, dc in self.shifts]
        nxt = torch.minimum(views[0], views[1])
        for view in views[2:]:
            torch.minimum(nxt, view, out=nxt)
        nxt += self.num_cells  # unreached + C still fits the dtype
        torch.minimum(nxt, inner, out=nxt)
        torch.maximum(nxt, wall, out=nxt)
        stable = (
            (nxt == inner).flatten(1).all(1)
            if check
            else torch.zeros(key.shape[0], dtype=torch.bool, device=key.device)
        )
        inner.copy_(nxt)
        return stable

    def __call__(self, env: UAVSwarmEnv) -> torch.Tensor:
        """``[B, N]`` int64 actions on the env's device: the first move of each UAV's path."""
        _, next_cell = self.plan(env)  # checks the env first
        here = env._flat(env.state["pos"].long())
        return (here[:, :, None] + self.move_offsets == next_cell[:, :, None]).long().argmax(2)  # hover: 0

    def plan(self, env: UAVSwarmEnv) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's auction for ``env``; advances the tie-break counter.

        Returns:
            ``(target, next_cell)``, ``[B, N]`` int64 flat padded cells each (`UAVSwarmEnv._flat`): the
            cell each UAV won (or, left over, its nearest uncovered cell; -1: none reachable) and the
            cell it moves to now (its own when it hovers).

        Raises:
            ValueError: ``env`` is not laid out as the env the policy was built for.
        """
        self._check_same_layout(env)
        cells = env.state["cells"]
        here = env._flat(env.state["pos"].long())  # [B, N]
        b, n = here.shape
        order = self._noise(env.env_index, n, self.step_offsets.shape[0])  # [B, N, A - 1]
        self.calls += 1
        avail, wall = cells == FREE, self.walls(cells)
        todo = torch.ones(b, n, dtype=torch.bool, device=cells.device)
        target = torch.full((b, n), -1, dtype=torch.int64, device=cells.device)
        next_cell = here.clone()  # hover unless a target is found
        for _ in range(n):  # the lowest bid of an environment always wins: at most N rounds
            bidders = todo & avail.any(1, keepdim=True)
            if not bool(bidders.any()):
                break
            key = self.label_field(avail, wall, here, bidders)
            bid = key.gather(1, here)  # [B, N]: distance * C + rank of the nearest available cell
            bidding = bidders & (bid < self.unreached)
            if not bool(bidding.any()):
                break
            wanted = self.rank_to_cell[torch.where(bidding, bid % self.num_cells, 0)]
            win = bidding & ~self._outbid(wanted, bid, bidding)
            target = torch.where(win, wanted, target)
            next_cell = torch.where(win, self._towards(key, here, bid, order), next_cell)
            todo &= ~win
            avail &= ~self._claimed(wanted, win)
        if bool(todo.any()):  # nothing left to win: the nearest uncovered cell, claimed or not
            key = self.label_field(cells == FREE, wall, here, todo)
            bid = key.gather(1, here)
            left = todo & (bid < self.unreached)
            target = torch.where(left, self.rank_to_cell[bid % self.num_cells], target)
            next_cell = torch.where(left, self._towards(key, here, bid, order), next_cell)
        return target, next_cell

    def _outbid(self, target: torch.Tensor, bid: torch.Tensor, bidding: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` bool: another bidding UAV bids lower (or equal with a lower index) for a cell
        within ``claim_radius`` rows and columns of this UAV's ``target``."""
        n, r = bid.shape[1], self.claim_radius
        row, col = self.cell_row[target], self.cell_col[target]
        near = ((row[:, :, None] - row[:, None, :]).abs() <= r) & ((col[:, :, None] - col[:, None, :]).abs() <= r)
        lower_index = torch.ones(n, n, dtype=torch.bool, device=bid.device).tril(-1)  # [i, j]: j < i
        ahead = (bid[:, None, :] < bid[:, :, None]) | ((bid[:, None, :] == bid[:, :, None]) & lower_index)
        return (near & ahead & bidding[:, None, :]).any(2)

    def _claimed(self, target: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        """``[B, C]`` bool: the cells within ``claim_radius`` rows and columns of a won ``target``
        ``[B, N]`` (where ``win``): the won cells, dilated by shifted in-place ORs on the 2-D grid
        (faster than max_pool2d: docs/performance.md, "Design choices, measured")."""
        b, c, r = target.shape[0], self.num_cells, self.claim_radius
        marks = torch.zeros(b, c + 1, dtype=torch.bool, device=target.device)
        marks = marks.scatter_(1, torch.where(win, target, c), True)[:, :c].reshape(b, self.hp, self.wp)
        for dim in (1, 2):
            grown = marks.clone()
            for k in range(1, r + 1):
                grown.narrow(dim, k, marks.shape[dim] - k).logical_or_(marks.narrow(dim, 0, marks.shape[dim] - k))
                grown.narrow(dim, 0, marks.shape[dim] - k).logical_or_(marks.narrow(dim, k, marks.shape[dim] - k))
            marks = grown
        return marks.view(b, c)

    def _towards(self, key: torch.Tensor, here: torch.Tensor, bid: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` the neighbour of ``here`` one move nearer the cell of each key ``bid`` (the
        relaxation took the key from it), picked by ``order`` ``[B, N, A - 1]`` among several."""
        b = here.shape[0]
        nbrs = here[:, :, None] + self.step_offsets  # [B, N, A - 1]
        on_path = key.gather(1, nbrs.view(b, -1)).view_as(nbrs) == (bid - self.num_cells)[:, :, None]
        step = nbrs.gather(2, torch.where(on_path, order, -1.0).argmax(2, keepdim=True)).squeeze(2)
        return torch.where(on_path.any(2), step, here)  # none on the path (never for a reached bid): stay

    def _noise(self, env_index: torch.Tensor, n: int, a: int) -> torch.Tensor:
        """``[B, n, a]`` float32 in [0, 1): a pure function of (seed, environment index, call count, UAV, move),
        so that an environment plays the same moves in any batch (a shard's `first_env_index` too)."""
        device = env_index.device
        draw = (torch.arange(n, device=device)[:, None] * a + torch.arange(a, device=device))[None]
        return hash32(self.hash_key, env_index[:, None, None], self.calls % MAX_KEY, draw).to(torch.float32) / 2**32
