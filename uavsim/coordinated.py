"""`CoordinatedFrontierPolicy`: the UAVs share out the uncovered cells in an auction, every step.

Vectorized over the batch and over the UAVs; the Python loops run over auction rounds and search
rounds (as many as the map's size sets, not the data), never over environments or UAVs, and a call
reads the device once (`CoordinatedFrontierPolicy.plan`).
"""

from __future__ import annotations

import torch

from uavsim.checks import check_int
from uavsim.env import UAVSwarmEnv
from uavsim.policies import GreedyFrontierPolicy
from uavsim.rng import MAX_KEY, hash32
from uavsim.rules import BLOCKED, FREE

CHUNK = 16  # search depths kept at once, then folded into the lengths' bits (memory: CHUNK bit maps)
FLOAT32_EXACT = 2**24  # float32 holds every integer up to here: the keys length * C + rank, below
# An 8 x 8 bit transpose whose rows are one byte place of 8 int64 words: (row distance = shift,
# mask) per step, each swapping blocks between rows r and r + d (Hacker's Delight, "transpose8"). No
# mask keeps the top bits that an arithmetic right shift fills with the sign.
TRANSPOSE8 = ((4, 0x0F0F0F0F0F0F0F0F), (2, 0x3333333333333333), (1, 0x5555555555555555))


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
    (a byte per cell holds 8 UAVs' bits), gives each UAV its path length to every cell; the move set
    is symmetric, so that is also each cell's path length to the UAV. A bid is then the smallest
    ``length * C + rank`` over the available cells (``C`` cells, ranks: the cells' random order),
    unique per cell, and an auction round needs no search. A second search, from each UAV's target
    and only as deep as the UAV lies from it, marks the neighbours one move nearer the target: those
    on a shortest path, among which the tie-break picks (exactly the neighbours whose key was the
    bid's minus ``C`` in the per-round fields of before: a cell one move nearer the won cell has it
    as its own lowest key too). The first search runs a fixed number of
    rounds, `search_rounds` (the obstacle-free map's diameter, in whole chunks of 16); the call reads
    one number from the device: whether a bid may have needed a longer path (then the call searches
    a quarter deeper, at least a chunk, reads again, and keeps the deeper setting: counted in
    `deeper_calls`; on the protocol maps one call of 200, at 256 environments) and the farthest
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
        self._search_grid(cfg, dev)
        self._claim_squares(cfg, dev)
        # The longest shortest path of an obstacle-free map, in whole chunks: enough for most maps.
        h, w = cfg.grid_height, cfg.grid_width
        diameter = max(h, w) - 1 if self.square else h + w - 2
        self.search_rounds = -(-(diameter + 1) // CHUNK) * CHUNK - 1
        self.deeper_calls = 0  # calls whose bids may have needed longer paths than search_rounds

    def _search_grid(self, cfg, dev: torch.device) -> None:
        """The searches' grid: the map and a ring of border cells around it, ``Hs x Ws`` (the
        padding beyond is never reached). Its cells ``lo <= x < hi`` (all but the first and last
        row, +-1) are the ones a search writes: their neighbours ``x + offset`` are contiguous blocks
        of the flat grid, and the ring cells among them (columns 0 and Ws - 1) are never open."""
        p, h, w = cfg.pad, cfg.grid_height, cfg.grid_width
        hs, ws = self.hs, self.ws = h + 2, w + 2
        cs = self.search_cells = hs * ws
        self.lo, self.hi = ws + 1, cs - ws - 1
        row, col = torch.arange(cs, device=dev) // ws, torch.arange(cs, device=dev) % ws
        self.search_to_cell = (row + p - 1) * self.wp + (col + p - 1)  # [Cs] padded cells (p >= 1)
        inside = (row >= 1) & (row <= h) & (col >= 1) & (col <= w)
        self.search_map = inside[self.lo : self.hi]  # [hi - lo] the map's cells of the searched range
        to_search = torch.full((self.num_cells,), cs, dtype=torch.int64, device=dev)  # cs: off the grid
        self.cell_to_search = to_search.scatter_(0, self.search_to_cell, torch.arange(cs, device=dev))
        # the map's cells in rank order: a bid's cells
        mapped = self.cell_to_search[self.rank_to_cell]
        keep = inside[mapped.clamp(max=cs - 1)] & (mapped < cs)
        self.map_cells = self.rank_to_cell[keep]  # [M] padded cells, rank order
        self.map_search = self.cell_to_search[self.map_cells]  # [M] their search cells
        self.map_rank = self.cell_rank[self.map_cells].to(torch.float64)  # [M] ascending
        position = torch.full((self.num_cells + 1,), len(self.map_cells), dtype=torch.int64, device=dev)
        self.map_position = position.scatter_(0, self.map_cells, torch.arange(len(self.map_cells), device=dev))
        self.offsets = [dr * ws + dc for dr, dc in self.shifts]  # host ints: slicing reads no device
        self.search_offsets = torch.tensor(self.offsets, device=dev)  # built once: a copy to a GPU waits for it
        square = [(r, c) for r in (-1, 0, 1) for c in (-1, 0, 1) if r or c]
        self.square = sorted(map(tuple, self.shifts)) == square  # the 8 moves: 3 then 3 ORs, not 8
        self.byte_bits = 1 << torch.arange(8, device=dev, dtype=torch.uint8)  # [8] bit g of a byte

    def _claim_squares(self, cfg, dev: torch.device) -> None:
        """The cells within ``claim_radius`` rows and columns of a cell, as flat offsets ``[S]``;
        with a radius beyond the padding, the squares are clipped to the padded grid per cell."""
        r = self.claim_radius
        span = torch.arange(-r, r + 1, device=dev)
        self.square_rows = span.repeat_interleave(2 * r + 1)
        self.square_cols = span.repeat(2 * r + 1)
        self.square_offsets = self.square_rows * self.wp + self.square_cols
        self.clip_squares = r > cfg.pad  # within the padding, a map cell's square never leaves the grid

    # -- the searches ----------------------------------------------------------------------------
    # Bit maps are ``[Cs, K, B]`` uint8, cells first, ``K = ceil(N / 8)``: bit ``n % 8`` of byte
    # ``n // 8`` is UAV ``n``'s.
    def _uav_bits(self, cell: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """``[Cs, K, B]`` uint8: UAV ``n``'s bit set on the search cell ``cell[b, n]`` ``[B, N]``
        (where ``valid``)."""
        b, n = cell.shape
        k, cs = -(-n // 8), self.search_cells
        uav = torch.arange(n, device=cell.device)
        index = cell * (k * b) + (uav // 8) * b + torch.arange(b, device=cell.device)[:, None]
        if valid is not None:
            index = torch.where(valid, index, cs * k * b)  # a spare element
        bits = (1 << (uav % 8)).to(torch.int32).expand(b, n)
        words = torch.zeros(cs * k * b + 1, dtype=torch.int32, device=cell.device)
        words.index_add_(0, index.view(-1), bits.reshape(-1))  # distinct bits of a byte: their sum is their OR
        return words[:-1].to(torch.uint8).view(cs, k, b)

    def _expand(self, grid: torch.Tensor, out: torch.Tensor, rows: torch.Tensor | None) -> None:
        """``out`` ``[hi - lo, K, B]`` = the OR of ``grid``'s bits over the move set's neighbours of
        the cells ``lo <= x < hi``. ``rows``: a ``[Cs - 2, K, B]`` buffer, for the 3 x 3 square."""
        cs, ws, lo, hi = self.search_cells, self.ws, self.lo, self.hi
        if self.square:  # rows[x - 1]: the OR over x - 1, x, x + 1; then the same over rows
            torch.bitwise_or(grid[: cs - 2], grid[2:], out=rows)
            rows |= grid[1 : cs - 1]
            torch.bitwise_or(rows[lo - 1 - ws : hi - 1 - ws], rows[lo - 1 + ws : hi - 1 + ws], out=out)
            out |= rows[lo - 1 : hi - 1]
            return
        views = [grid[lo + off : hi + off] for off in self.offsets]
        torch.bitwise_or(views[0], views[1], out=out)
        for view in views[2:]:
            out |= view

    @staticmethod
    def _slots_with_bit(layers: torch.Tensor, q: int) -> torch.Tensor:
        """A chunk's layers whose slot has bit ``q``, stacked for one sum over dim 0 (a reduction
        over two strided dimensions is slow on the CPU: it gets a sum of its own first)."""
        runs, run = CHUNK >> (q + 1), 1 << q
        chosen = layers.view(runs, 2, run, *layers.shape[1:])[:, 1]
        return chosen.flatten(0, 1) if runs == 1 or run == 1 else chosen.sum(1)

    def _lengths(
        self, here: torch.Tensor, open_: torch.Tensor, free: torch.Tensor, rounds: int
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Path lengths from each UAV's cell to the uncovered cells, searched ``rounds`` (``CHUNK * j
        - 1``) moves deep.

        Args:
            here: ``[B, N]`` the UAVs' search cells.
            open_: ``[hi - lo, 1, B]`` uint8, 255 on the map's cells not blocked, else 0.
            free: the same, 255 on the uncovered cells.
            rounds: the search's depth.

        Returns:
            ``(length, unfinished, unreached)``: ``length`` ``[M, N, B]`` from each UAV to each of the
            map's ``M`` cells, in rank order, ``unreached`` or more where the cell is covered, blocked,
            not reachable or farther than ``rounds``; ``unfinished`` ``[B, N]`` bool: the search found
            cells at depth ``rounds`` (it may have missed farther ones).
        """
        b, n = here.shape
        k, cs, lo, hi = -(-n // 8), self.search_cells, self.lo, self.hi
        dev = here.device
        size = cs * k * b
        whole = -(-size // 8) * 8  # bit maps padded to whole int64 words: summed 8 bytes at a time
        store = torch.empty(CHUNK, whole, dtype=torch.uint8, device=dev)
        store[:, : lo * k * b].zero_()  # outside the searched range: never reached, read by its neighbours
        store[:, hi * k * b :].zero_()
        layers = store[:, :size].view(CHUNK, cs, k, b)
        torch.bitwise_and(self._uav_bits(here)[lo:hi], open_, out=layers[0, lo:hi])  # depth 0
        todo = open_ ^ layers[0, lo:hi]  # open and not yet reached, per UAV bit
        rows = torch.empty(cs - 2, k, b, dtype=torch.uint8, device=dev) if self.square else None
        planes, low = rounds.bit_length(), CHUNK.bit_length() - 1
        words = (planes + 8) // 8  # bytes per length: its bits, then the top bit: unreached
        bits = torch.empty(8 * words, whole, dtype=torch.uint8, device=dev)  # bit planes of the lengths
        store64, bits64 = store.view(torch.int64), bits.view(torch.int64)
        for chunk in range((rounds + 1) // CHUNK):
            for j in range(1 if chunk == 0 else 0, CHUNK):
                out = layers[j, lo:hi]
                self._expand(layers[j - 1], out, rows)  # slot -1: the previous chunk's last layer
                out &= todo
                todo ^= out
            # A length's bit q < low is set on the layers whose slot has bit q (disjoint bits: their
            # sum is their OR, in int64 words too); its higher bits are the chunk's number's.
            for q in range(min(low, planes)):
                if chunk == 0:
                    torch.sum(self._slots_with_bit(store64, q), 0, out=bits64[q])
                else:
                    bits64[q] |= self._slots_with_bit(store64, q).sum(0)
            if chunk == 0:
                bits[low:].zero_()
            elif planes > low:
                seen = store64.sum(0)
                for q in range(low, planes):
                    if chunk >> (q - low) & 1:
                        bits64[q] |= seen
        top = 8 * words - 1  # not reached: not reached yet, blocked, or outside the searched range
        bits[top].fill_(255)
        torch.bitwise_or(todo, 255 - free, out=bits[top, :size].view(cs, k, b)[lo:hi])
        # An 8 x 8 bit transpose of each byte place across each group of 8 planes: word g of
        # group w then holds, in byte e, byte w of the length of UAV 8 k + g (e: the byte's place).
        x = bits64.view(words, 8, -1)
        for d, mask in TRANSPOSE8:
            pair = x.view(words, 4 // d, 2, d, -1)
            low, high = pair[:, :, 0], pair[:, :, 1]
            t = (low >> d) ^ high
            t &= mask
            high ^= t
            t <<= d
            low ^= t
        length = bits[:, :size].view(words, 8, cs, k, b).index_select(2, self.map_search)  # [words, 8, M, K, B]
        length = length.permute(2, 3, 1, 4, 0).reshape(-1, 8 * k, b, words)[:, :n]  # UAV 8 k + g; runs of B
        if words == 1:
            length = length[..., 0]
        else:
            shifts = 8 * torch.arange(words, device=dev, dtype=torch.int32)
            length = (length.int() << shifts).sum(3, dtype=torch.int32)
        # the last depth's bits, ORed over the cells by halves
        last = layers[CHUNK - 1]
        while last.shape[0] > 1:
            half = last.shape[0] // 2
            last = (
                last[:half] | last[half : 2 * half]
                if last.shape[0] % 2 == 0
                else torch.cat((last[:1] | last[-1:], last[1:-1]))
            )
        bit = (last[0].unsqueeze(1) >> torch.arange(8, device=dev, dtype=torch.uint8)[:, None]) & 1  # [K, 8, B]
        return length, bit.view(8 * k, b)[:n].t() == 1, 1 << top

    def _on_path(self, target: torch.Tensor, depth: torch.Tensor, here: torch.Tensor, open_: torch.Tensor, rounds: int):
        """``[B, N, A - 1]`` bool: the neighbour of ``here`` lies ``depth - 1`` moves from ``target``,
        on a shortest path there (search cells; ``depth``: the UAV's path length to ``target``, -1:
        none). A search from the targets, each UAV's bit stopped at its ``depth - 1``; ``rounds``:
        the largest of those."""
        b, n = here.shape
        k, cs, lo, hi = -(-n // 8), self.search_cells, self.lo, self.hi
        dev = here.device
        grids = torch.zeros(2, cs, k, b, dtype=torch.uint8, device=dev)
        torch.bitwise_and(self._uav_bits(target.clamp(min=0), target >= 0)[lo:hi], open_, out=grids[0, lo:hi])
        todo = open_ ^ grids[0, lo:hi]
        rows = torch.empty(cs - 2, k, b, dtype=torch.uint8, device=dev) if self.square else None
        if rounds > 0:
            # going[r]: the bits of the UAVs whose search goes on to depth r + 1 (depth - 1 > r)
            going = depth.t()[None] > torch.arange(1, rounds + 1, device=dev)[:, None, None]  # [R, N, B]
            going = torch.nn.functional.pad(going.to(torch.uint8), (0, 0, 0, 8 * k - n)).view(rounds, k, 8, b)
            going = (going * self.byte_bits[:, None]).sum(2, dtype=torch.uint8)  # [R, K, B]
            for r in range(rounds):
                out = grids[(r + 1) % 2, lo:hi]
                self._expand(grids[r % 2], out, rows)
                out &= todo
                out &= going[r]
                todo ^= out
        seen = torch.zeros(cs, k, b, dtype=torch.uint8, device=dev)
        torch.bitwise_xor(open_, todo, out=seen[lo:hi])
        nbrs = here[:, :, None] + self.search_offsets  # [B, N, A - 1]
        uav = torch.arange(n, device=dev)[None, :, None]
        got = seen.view(-1)[nbrs * (k * b) + (uav // 8) * b + torch.arange(b, device=dev)[:, None, None]]
        return (got >> (uav % 8)) & 1 == 1

    # -- the auction -----------------------------------------------------------------------------
    def __call__(self, env: UAVSwarmEnv) -> torch.Tensor:
        """``[B, N]`` int64 actions on the env's device: the first move of each UAV's path."""
        _, next_cell = self.plan(env)  # checks the env first
        here = env._flat(env.state["pos"].long())
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
        cells = env.state["cells"]
        here = env._flat(env.state["pos"].long())  # [B, N]
        b, n = here.shape
        order = self._noise(b, n, self.step_offsets.shape[0], cells.device)  # [B, N, A - 1]
        self.calls += 1
        searched = cells.index_select(1, self.search_to_cell[self.lo : self.hi]).t()  # [hi - lo, B]
        open_ = ((searched != BLOCKED) & self.search_map[:, None]).to(torch.uint8)[:, None] * 255
        free = ((searched == FREE) & self.search_map[:, None]).to(torch.uint8)[:, None] * 255
        here_s = self.cell_to_search[here]
        rounds = max(1, -(-(self.search_rounds + 1) // CHUNK)) * CHUNK - 1  # whole chunks
        while True:
            target, depth, short = self._auction(cells, here, here_s, open_, free, rounds)
            read = int(short.long() << 32 | depth.amax().clamp(min=0))  # the call's one host read
            if not read >> 32:
                break
            # a quarter deeper, in whole chunks (at least one), kept for the next calls
            rounds = self.search_rounds = rounds + max(CHUNK, (rounds + 1) // 4 // CHUNK * CHUNK)
            self.deeper_calls += 1
        target_s = torch.where(target >= 0, self.cell_to_search[target.clamp(min=0)], -1)
        on_path = self._on_path(target_s, depth, here_s, open_, (read & 0xFFFFFFFF) - 1)
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
        length, unfinished, unreached = self._lengths(here_s, open_, free, rounds)  # [M, B, N]
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

    def _noise(self, b: int, n: int, a: int, device: torch.device) -> torch.Tensor:
        """``[b, n, a]`` float32 in [0, 1): a pure function of (seed, row, call count, UAV, move)."""
        row = torch.arange(b, device=device)[:, None, None]
        draw = (torch.arange(n, device=device)[:, None] * a + torch.arange(a, device=device))[None]
        return hash32(self.hash_key, row, self.calls % MAX_KEY, draw).to(torch.float32) / 2**32
