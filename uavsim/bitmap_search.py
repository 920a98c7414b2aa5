"""Breadth-first searches of many UAVs at once on bit maps, for the coordinated planner
(`uavsim.coordinated`): one search from all the UAVs' cells gives each UAV its path length to every
cell; one from their targets marks the neighbours on a shortest path there.

Bit maps are ``[Cs, K, B]`` uint8, cells first, ``K = ceil(N / 8)``: bit ``n % 8`` of byte ``n // 8``
is UAV ``n``'s. A search depth is a few in-place ops on contiguous slices of the flat grid; the
Python loops run over depths (as many as the map's size sets, not the data), never over
environments or UAVs, and nothing is read to the host.
"""

from __future__ import annotations

import torch

from uavsim.config import EnvConfig

CHUNK = 16  # search depths kept at once, then folded into the lengths' bits (memory: CHUNK bit maps)
# An 8 x 8 bit transpose whose rows are one byte place of 8 int64 words: (row distance = shift,
# mask) per step, each swapping blocks between rows r and r + d (Hacker's Delight, "transpose8"). No
# mask keeps the top bits that an arithmetic right shift fills with the sign.
TRANSPOSE8 = ((4, 0x0F0F0F0F0F0F0F0F), (2, 0x3333333333333333), (1, 0x5555555555555555))


class BitMapSearch:
    """The searches' grid: the map and a ring of border cells around it, ``Hs x Ws`` (the padding
    beyond is never reached). Its cells ``lo <= x < hi`` (all but the first and last row, +-1) are
    the ones a search writes: their neighbours ``x + offset`` are contiguous blocks of the flat grid,
    and the ring cells among them (columns 0 and Ws - 1) are never open.

    Args:
        cfg: the env's config (its grid and padding).
        num_cells: the padded grid's cells (`UAVSwarmEnv._flat`'s).
        wp: the padded grid's width.
        shifts: the moves that leave the cell, ``(row, column)`` each (host ints).
        dev: the env's device.
    """

    def __init__(self, cfg: EnvConfig, num_cells: int, wp: int, shifts: list[list[int]], dev: torch.device):
        p, h, w = cfg.pad, cfg.grid_height, cfg.grid_width
        hs, ws = self.hs, self.ws = h + 2, w + 2
        cs = self.search_cells = hs * ws
        self.lo, self.hi = ws + 1, cs - ws - 1
        row, col = torch.arange(cs, device=dev) // ws, torch.arange(cs, device=dev) % ws
        self.search_to_cell = (row + p - 1) * wp + (col + p - 1)  # [Cs] padded cells (p >= 1)
        self.inside = (row >= 1) & (row <= h) & (col >= 1) & (col <= w)  # [Cs] the map's cells
        self.search_map = self.inside[self.lo : self.hi]  # [hi - lo] the map's cells of the searched range
        to_search = torch.full((num_cells,), cs, dtype=torch.int64, device=dev)  # cs: off the grid
        self.cell_to_search = to_search.scatter_(0, self.search_to_cell, torch.arange(cs, device=dev))
        self.offsets = [dr * ws + dc for dr, dc in shifts]  # host ints: slicing reads no device
        self.search_offsets = torch.tensor(self.offsets, device=dev)  # built once: a copy to a GPU waits for it
        square = [(r, c) for r in (-1, 0, 1) for c in (-1, 0, 1) if r or c]
        self.square = sorted(map(tuple, shifts)) == square  # the 8 moves: 3 then 3 ORs, not 8
        self.byte_bits = 1 << torch.arange(8, device=dev, dtype=torch.uint8)  # [8] bit g of a byte

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

    def lengths(
        self, here: torch.Tensor, open_: torch.Tensor, free: torch.Tensor, rounds: int, cells: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Path lengths from each UAV's cell to the uncovered cells, searched ``rounds`` (``CHUNK * j
        - 1``) moves deep.

        Args:
            here: ``[B, N]`` the UAVs' search cells.
            open_: ``[hi - lo, 1, B]`` uint8, 255 on the map's cells not blocked, else 0.
            free: the same, 255 on the uncovered cells.
            rounds: the search's depth.
            cells: ``[M]`` int64, the search cells whose lengths are returned, in their order.

        Returns:
            ``(length, unfinished, unreached)``: ``length`` ``[M, N, B]`` from each UAV to each of
            ``cells``, ``unreached`` or more where the cell is covered, blocked, not reachable or
            farther than ``rounds``; ``unfinished`` ``[B, N]`` bool: the search found cells at depth
            ``rounds`` (it may have missed farther ones).
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
                    torch.sum(_slots_with_bit(store64, q), 0, out=bits64[q])
                else:
                    bits64[q] |= _slots_with_bit(store64, q).sum(0)
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
        length = bits[:, :size].view(words, 8, cs, k, b).index_select(2, cells)  # [words, 8, M, K, B]
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

    def on_path(self, target: torch.Tensor, depth: torch.Tensor, here: torch.Tensor, open_: torch.Tensor, rounds: int):
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


def _slots_with_bit(layers: torch.Tensor, q: int) -> torch.Tensor:
    """A chunk's layers whose slot has bit ``q``, stacked for one sum over dim 0 (a reduction
    over two strided dimensions is slow on the CPU: it gets a sum of its own first)."""
    runs, run = CHUNK >> (q + 1), 1 << q
    chosen = layers.view(runs, 2, run, *layers.shape[1:])[:, 1]
    return chosen.flatten(0, 1) if runs == 1 or run == 1 else chosen.sum(1)
