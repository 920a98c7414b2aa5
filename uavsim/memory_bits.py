"""The onboard memory as bit rows: what `uavsim.memory` keeps in a byte per cell, in three bits.

With ``comm_radius`` 0 (each UAV its own memory) and ``path_radius`` 0 (no search reads the
memory's cells), on maps whose padded rows fit an int64 (``W + 2 pad <= 63``) and are wide enough
for three int64 to take less than their bytes (`fits`), each UAV keeps,
per map row (bit ``pad + c`` for column ``c``, the bits around it the border) and one spare row,
three bit sets: seen, known blocked, known covered (the codes of `uavsim.memory`: 4 is seen, 7 is
seen | blocked, 5 seen | covered). A window's rows off the map (the border, all known blocked) are
read and written as the spare row, all ones in every plane, which a sensing leaves as it is (what
a border row was, without its bytes: a quarter of the rows on the default preset). On the default
preset that is 7.9 KB per environment instead of 16.8 KB of codes, and the step reads and writes
13 rows of it per UAV, not 169 cells through an int64 index each way. Beside it each environment
keeps the truth in the same rows (all ones, blocked, covered: ``truth``), so that a UAV's sensing
is one AND of its window's mask with the truth's rows, one OR into its memory's.

The per-block counts (`memory.known_counts`, the observation's pooled memory) grow by the bits a
sensing turns on: each window row's new bits, shifted to the window's frame, read how many of them
fall in each block from one table (`BitMemory.counts`, by the UAV's column and the row's bits), and
one scatter adds them. A loaded state's memory is packed from its codes (`restore`); ``state``
shows the codes (`codes`).
"""

from __future__ import annotations

import numpy as np
import torch

from uavsim.config import EnvConfig

SEEN_CODE, BLOCKED_CODE, COVERED_CODE = 4, 3, 1  # `uavsim.memory`'s code bits of each plane
TABLE_MAX_BYTES = 32 << 20  # the count table: 1.3 MB on the default preset (32 columns x 2^13 rows x 5 blocks)


def table_bytes(cfg: EnvConfig, itemsize: int = 1) -> int:
    """Bytes of `BitMemory.counts` for ``cfg``."""
    return cfg.grid_width * (1 << cfg.window) * (most_blocks(cfg) * itemsize)


def most_blocks(cfg: EnvConfig) -> int:
    """The most pooled blocks one window row spans on the map."""
    col_block, r, w = column_blocks(cfg), cfg.obs_radius, cfg.grid_width
    c = np.arange(w)
    return int((col_block[np.minimum(c + r, w - 1)] - col_block[np.maximum(c - r, 0)]).max()) + 1


def column_blocks(cfg: EnvConfig) -> np.ndarray:
    """``[W]`` the pooled block column of each map column (`rules.block_of_cell`)."""
    return np.arange(cfg.grid_width) * cfg.state_pool // cfg.grid_width


def fits(cfg: EnvConfig) -> bool:
    """Whether ``cfg``'s memory is kept as bit rows (the module docstring says when): also only
    where they, with the truth's, take fewer bytes than the codes (three int64 per map row and the
    spare one, against the packed grid's ``W + pad`` bytes a padded row)."""
    p, n = cfg.pad, cfg.num_uavs
    rows, grid_cells = row_count(cfg), p + (cfg.grid_height + 2 * p) * (cfg.grid_width + p)
    return (
        cfg.comm_radius == 0
        and cfg.path_radius == 0
        and (n + 1) * 24 * rows < n * grid_cells
        and cfg.grid_width + 2 * p <= 63
        and table_bytes(cfg, 2) <= TABLE_MAX_BYTES
    )


def row_count(cfg: EnvConfig) -> int:
    """The bit rows of a memory (and of the truth): the map's, then the spare row (module docstring)."""
    return cfg.grid_height + 1


class BitMemory:
    """The bit memory's constant tables on a device, for the packed grid of row stride ``ws`` and
    ``grid_cells`` cells (`uavsim.dynamics.Layout`, and its ``[grid cells]`` pool slots); counts in
    ``count_dtype``."""

    def __init__(
        self,
        cfg: EnvConfig,
        ws: int,
        grid_cells: int,
        pool_slot_of_grid: np.ndarray,
        count_dtype: torch.dtype,
        device: torch.device,
    ):
        p, h, w, r, win = cfg.pad, cfg.grid_height, cfg.grid_width, cfg.obs_radius, cfg.window
        self.cfg, self.hp, self.wp, self.win = cfg, h + 2 * p, w + 2 * p, win
        full = (1 << self.wp) - 1
        border = np.full(h + 1, full ^ (((1 << w) - 1) << p), dtype=np.int64)
        zero = np.zeros_like(border)
        # an episode's first memory: the border known blocked (as the grid's), the spare row all ones;
        # the truth's ones, blocked border (its spare row: whatever, masked by the memory's ones)
        blank = np.stack([border, border, zero])
        blank[:, h] = full
        self.blank = torch.as_tensor(blank, device=device)  # [3, H + 1]
        self.truth_blank = torch.as_tensor(np.stack([np.full_like(border, full), border, zero]), device=device)
        self.column_bits = torch.as_tensor(1 << (np.arange(w, dtype=np.int64) + p), device=device)  # [W]
        self.plane_codes = torch.tensor([BLOCKED_CODE | SEEN_CODE, COVERED_CODE | SEEN_CODE], device=device)
        # `sense` reads each UAV's memory rows and its env's truth's in one index op, over the (N + 1) x 3
        # planes of the record's memory and the truth after it: [N, 2, 3, 1], the planes of (UAV, truth).
        # One index tensor for both: advanced indexing on a CPU costs by its index tensors (docs/performance.md,
        # "Design choices, measured"); two gathers would be faster there but launch a kernel more.
        n, plane = cfg.num_uavs, torch.arange(3)[:, None]
        sensed = torch.stack([torch.arange(n), torch.full((n,), n)], 1)[:, :, None, None]
        self.sensed_planes = (3 * sensed + plane).to(device)
        self.env_index: torch.Tensor | None = None  # [M, 1, 1, 1, 1] arange for the largest batch M so far

        col_block, row_block, pool = column_blocks(cfg), np.arange(h) * cfg.state_pool // h, cfg.state_pool
        first = col_block[np.maximum(np.arange(w) - r, 0)]  # each column's window's first block column
        k = most_blocks(cfg)
        counts = np.zeros((w, 1 << win, k), dtype=np.int64)  # [column, window row bits, block from first]
        bits = np.arange(1 << win)
        for c in range(w):
            for j in range(win):
                if 0 <= c - r + j < w:
                    counts[c, :, col_block[c - r + j] - first[c]] += (bits >> j) & 1
        self.counts = torch.as_tensor(counts, dtype=count_dtype, device=device)  # read by [column, row bits]
        # `sense` reads a lookup's K counts as one integer word where they fill one: the index op then copies
        # one element a lookup, not K (faster on a CPU, the same op and bytes: docs/performance.md)
        word = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(k * self.counts.element_size())
        self.count_words = self.counts if word is None else self.counts.view(word)

        # Per grid cell a UAV may stand on: its window's rows (off the map: the spare row), mask and shift in them,
        # its map column (the first index of `counts`), and the block slots (plane-free) of each window row and block.
        g = np.arange(grid_cells)
        rows, cols = np.divmod(g - p, ws)  # the padded row and the map column
        on_map = (g >= p) & (rows >= p) & (rows < p + h) & (cols < w)
        col = np.where(on_map, cols, 0)
        table = np.zeros((grid_cells, win + 3 + win * k), dtype=np.int64)
        map_rows = rows[:, None] - p - r + np.arange(win)[None, :]  # off the map: the spare row
        table[:, :win] = np.where((map_rows >= 0) & (map_rows < h), map_rows, h)
        table[:, win] = ((1 << win) - 1) << (col + p - r)
        table[:, win + 1] = col + p - r
        table[:, win + 2] = col
        map_row = rows[:, None] - p - r + np.arange(win)[None, :]  # [G, win]
        block_row = np.where((map_row >= 0) & (map_row < h), row_block[np.clip(map_row, 0, h - 1)], 0)
        block_col = np.minimum(first[col][:, None] + np.arange(k)[None, :], pool - 1)  # [G, K]
        table[:, win + 3 :] = (block_row[:, :, None] * pool + block_col[:, None, :]).reshape(grid_cells, -1)
        # [fields, G]: a step's index_select along dim 1 gives each field's values as a contiguous row
        self.cell_table = torch.as_tensor(np.where(on_map[:, None], table, 0).T.copy(), device=device)
        # each grid cell's map row and bit, where a newly covered cell goes in the truth, and its
        # block's slot among the per-block counts (`Layout.pool_slot_of_grid`), read by the same index
        cover = [np.where(on_map, rows - p, 0), np.where(on_map, 1 << (col + p), 0), pool_slot_of_grid]
        self.cover_table = torch.as_tensor(np.stack(cover, 1), device=device)


def clear(bits: BitMemory, lay, v: dict[str, torch.Tensor]) -> None:
    """An episode's first memory (the border known blocked), no block counts, and the truth's rows
    of the record's grid. ``lay``: `uavsim.dynamics.Layout`; ``v``: the record's field views."""
    v["memory"].copy_(bits.blank.expand_as(v["memory"]))
    v["known"].zero_()
    truth, h = v["truth"], bits.cfg.grid_height
    truth.copy_(bits.truth_blank.expand_as(truth))
    code = lay.map_view(v["grid"]) >> lay.count_bits  # [M, H, W]
    planes = code[:, None] == torch.tensor([3, 1], dtype=code.dtype, device=code.device)[:, None, None]
    truth[:, 1:, :h] |= pack(bits, planes)  # blocked, covered


def pack(bits: BitMemory, cells: torch.Tensor) -> torch.Tensor:
    """``[..., H]`` int64 bit rows of map cells ``[..., H, W]`` bool (not a hot path)."""
    return torch.where(cells, bits.column_bits, 0).sum(-1)


def cells_read(bits: BitMemory, sidx: torch.Tensor) -> torch.Tensor:
    """``[M, K, 3]`` int64 of the grid cells ``sidx [M, K]``: map row, bit, pool slot (`cover`)."""
    return bits.cover_table.index_select(0, sidx.view(-1)).view(*sidx.shape, 3)


def cover(bits: BitMemory, v: dict[str, torch.Tensor], cells: torch.Tensor, fresh: torch.Tensor) -> None:
    """Add the cells newly covered to the truth: ``cells``, `cells_read` of the step's grid cells,
    ``fresh`` 0/1 where one is newly covered (each cell once: `dynamics.newly_covered`), so a sum
    of distinct bits."""
    v["truth"][:, 2].scatter_add_(1, cells[..., 0], cells[..., 1] * fresh)


def sense(bits: BitMemory, v: dict[str, torch.Tensor], cell: torch.Tensor, read: torch.Tensor | None = None) -> None:
    """Each UAV writes its window into its memory and counts what it newly knows, in place
    (`memory.sense_and_share` with ``comm_radius`` 0): 9 ops whatever the window. ``cell``: the
    UAVs' grid cells ``[M, N]``, contiguous, or ``read``, their ``cell_table`` fields read by the caller
    (``[M, N, fields...]``, `Layout.cell_reads`); the record keeps the truth right after the memory."""
    memory, known = v["memory"], v["known"]
    m, n = cell.shape
    win = bits.win
    if read is None:
        tab = bits.cell_table.index_select(1, cell.view(-1))  # [fields, M * N]
        field = lambda first, last: tab[first:last].t().view(m, n, last - first)  # noqa: E731 -- views
    else:
        field = lambda first, last: read[..., first:last]  # noqa: E731 -- views
    rows, mask, shift, col = field(0, win), field(win, win + 1), field(win + 1, win + 2), field(win + 2, win + 3)
    mask, shift = mask[..., None], shift[..., None]
    index = rows[:, :, None].expand(m, n, 3, win)  # the window's rows (off the map: the spare row)
    memory_and_truth = v["memory_planes"]  # [M, (N + 1) * 3, H + 1]: the memories' planes, then the truth's
    # [M, N, 2, 3, win]: each UAV's memory rows (seen, known blocked, known covered), then its env's truth's
    rows_read = memory_and_truth[env_index(bits, m, cell.device), bits.sensed_planes, rows[:, :, None, None]]
    old, now = rows_read[:, :, 0], rows_read[:, :, 1]
    new = old | (now & mask)  # the window's cells: seen, and their truth
    memory.scatter_(3, index, new)
    gained = new[:, :, 1:] ^ old[:, :, 1:]  # [M, N, 2, win]: bits turned known blocked, known covered
    # the bits in the window's frame, read in their column's table: one index op, no add of a flat row index
    words = bits.count_words[col[..., None], gained >> shift]
    # contiguous: with one UAV the index op may lay its size-1 dims out with other strides, which a view of
    # another width refuses (a no-op, no kernel, otherwise)
    counts = words.contiguous().view(bits.counts.dtype).view(m, n, 2, -1)  # [M, N, 2, win * K]
    known.scatter_add_(3, field(win + 3, bits.cell_table.shape[0]).unsqueeze(2).expand_as(counts), counts)


def env_index(bits: BitMemory, m: int, device: torch.device) -> torch.Tensor:
    """``[M, 1, 1, 1, 1]`` arange: in eager calls a slice of one kept for the largest batch so far (the
    sparse restarts' batches vary in size: one tensor, not one per size); compiled, a fresh one (no state
    kept across graphs)."""
    if torch.compiler.is_compiling():
        return torch.arange(m, device=device)[:, None, None, None, None]
    if bits.env_index is None or bits.env_index.shape[0] < m:
        bits.env_index = torch.arange(m, device=device)[:, None, None, None, None]
    return bits.env_index[:m]


def codes(bits: BitMemory, memory: torch.Tensor) -> torch.Tensor:
    """``[M, N, H, W]`` uint8 memory codes (`uavsim.memory`) of the map cells of ``memory [M, N, 3, H + 1]``."""
    h = bits.cfg.grid_height
    cells = (memory[..., :h, None] & bits.column_bits) != 0  # [M, N, 3, H, W]
    out = cells[:, :, 0].to(torch.uint8) * SEEN_CODE
    out += cells[:, :, 1].to(torch.uint8) * BLOCKED_CODE
    out += cells[:, :, 2].to(torch.uint8) * COVERED_CODE
    return out


def restore(bits: BitMemory, lay, v: dict[str, torch.Tensor], cells: torch.Tensor) -> None:
    """Write the memory codes ``cells [M, N, H * W]`` of a loaded state into the record views ``v``
    (after its grid), with the truth's rows; the caller recounts the blocks."""
    clear(bits, lay, v)
    cfg = bits.cfg
    code = cells.view(*cells.shape[:2], 1, cfg.grid_height, cfg.grid_width)
    planes = torch.cat([(code & SEEN_CODE) != 0, code == bits.plane_codes[:, None, None]], 2)
    v["memory"][..., : cfg.grid_height] |= pack(bits, planes)
