"""Onboard memory (``EnvConfig.comm_radius`` not None): what each UAV has seen, shared in range.

Each UAV keeps one byte per cell of the packed grid (`uavsim.dynamics`, same layout and cell
indices), holding a memory code (`uavsim.rules`, "Onboard memory"): 0 unknown, else `SEEN` plus
the cell's packed code when last seen (FREE 0, COVERED 1, BLOCKED 3), so 4 free, 5 covered,
7 blocked. A cell's truth only grows (coverage never decreases, obstacles never move), so a fresh
sighting overwrites, and the merge of two memories is their element-wise max (which on these
codes is also their bitwise OR).

Every step, after the moves and the coverage, each UAV *senses*: its observation window's cells
are written into its memory (the window its local observation shows, so the memory holds exactly
what its observations held). Then it *shares*, one hop: its memory becomes the max of the
memories, just sensed, of the UAVs within Chebyshev distance ``comm_radius`` of it (itself
included; ``comm_radius`` 0 shares nothing, not even between UAVs on one cell). Information thus
travels one hop per step. The episode's start does the same after the launch. The memory lives in
the state record, so it resets with the episode. Its border (the grid cells off the map) is known
blocked from the start (`clear`), as the grid's border always is: sensing it changes nothing.

The observation pools, per block, the cells each UAV knows blocked and known covered
(`known_counts`). These counts are kept next to the memory in the state record (``known``: they
reset and swap with it, and a loaded state recounts them, `restore`). With ``comm_radius`` 0 only
a UAV's window can change in a step, so the sensing adds the window's changes (`add_sightings`:
``win^2`` cells per UAV) instead of recounting every map cell (``H * W``); a merge can change any
cell, so with sharing the sensing recounts after it. On one thread of a 2-core AMD EPYC (Zen 4),
64 environments of the default 32x32 task: `add_sightings` takes 0.06 ms (7x7 windows) or 0.22 ms
(13x13) against 0.9 ms for `known_counts` (docs/environment.md, "Cost").

Where it fits (``comm_radius`` 0, no ``path_radius``, maps up to ``63 - 2 pad`` cells wide and wide
enough for the bits to be smaller: the default preset, `memory_bits.fits`) the record keeps the same
memory as three bit rows per map row instead (`uavsim.memory_bits`); `codes` reads either as
codes, and the functions here dispatch to it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from uavsim import memory_bits, rules
from uavsim.compile_compat import into
from uavsim.config import EnvConfig
from uavsim.heading import CellHeading

SEEN = 4  # memory code bit: the cell was seen; below it the packed grid's code (FREE 0, COVERED 1, BLOCKED 3)
KNOWN_BLOCKED, KNOWN_COVERED = SEEN | 3, SEEN | 1  # pooled into the local observation, in this order


class MemoryTables:
    """The constants memory needs on the device: ``row_stride``, the packed grid's (`Layout.ws`);
    ``count_dtype``, the per-block counts' (the global state's pools'); ``on_map``, ``[grid cells]``
    bool, whether each grid cell is a map cell, and ``block_of_grid`` its block (`Layout`'s, on
    ``device``); ``heading``, the tables of each UAV's heading to the nearest block its memory
    does not know to be done."""

    def __init__(
        self,
        cfg: EnvConfig,
        row_stride: int,
        count_dtype: torch.dtype,
        on_map: np.ndarray,
        block_of_grid: torch.Tensor,
        device: torch.device,
    ):
        offsets = rules.window_offsets(cfg)
        self.window = torch.as_tensor(offsets[:, 0] * row_stride + offsets[:, 1], device=device)  # [win^2]
        self.radius = cfg.comm_radius
        # Past the map every pair is in range: one max over the UAVs instead of the [M, N, N] mask.
        self.everyone = cfg.comm_radius >= max(cfg.grid_height, cfg.grid_width) - 1
        self.own = torch.eye(cfg.num_uavs, dtype=torch.uint8, device=device)  # [N, N]: each UAV in its own range
        self.codes = torch.tensor([KNOWN_BLOCKED, KNOWN_COVERED], dtype=torch.uint8, device=device)[:, None, None]
        self.count_dtype = count_dtype
        # An episode's first memory: the border known blocked, as the grid's border always is, so
        # that sensing it changes nothing (and adds nothing to the incremental counts).
        blank = np.where(on_map, 0, KNOWN_BLOCKED).astype(np.uint8)
        self.blank = torch.as_tensor(blank, device=device)  # [grid cells]
        self.block_of_grid = block_of_grid  # [grid cells] int64: `add_sightings`' count of each cell
        # `add_sightings`: (old ^ new) & code is 3 where a cell turns known blocked, 1 known covered
        self.gained = torch.tensor([3, 1], dtype=torch.uint8, device=device)[:, None]
        rows, cols = np.divmod(np.arange(len(on_map)) - cfg.pad, row_stride)  # of each grid cell, on the map
        self.heading = CellHeading(cfg, rows - cfg.pad, cols, on_map, device)
        self.block_cells = torch.as_tensor(rules.cells_per_block(cfg), dtype=count_dtype, device=device)  # counts dtype


class GridLayout(Protocol):
    """What memory reads of `uavsim.dynamics.Layout` (which imports this module: named, not imported)."""

    cfg: EnvConfig
    ws: int
    count_bits: int
    block_of_cell: torch.Tensor
    memory: MemoryTables | None
    memory_bits: memory_bits.BitMemory | None  # the memory as bit rows where it fits (uavsim.memory_bits)

    def positions(self, cell: torch.Tensor) -> torch.Tensor: ...

    def map_view(self, grid: torch.Tensor) -> torch.Tensor: ...


def clear(lay: GridLayout, v: dict[str, torch.Tensor]) -> None:
    """An episode's first memory, before its first sensing: nothing known but the border, no
    block counts. ``v``: the state record's field views (``memory``, ``known``; with bit rows the
    ``truth``, from the ``grid``: `memory_bits.clear`)."""
    if lay.memory_bits is not None:
        return memory_bits.clear(lay.memory_bits, lay, v)
    v["memory"].copy_(lay.memory.blank.expand_as(v["memory"]))
    v["known"].zero_()


def restore(lay: GridLayout, v: dict[str, torch.Tensor], cells: torch.Tensor) -> None:
    """Write the memories of a loaded state (``cells``: ``[M, N, H * W]`` uint8 map cells' codes)
    into the record views ``v``, with their block counts (derived, so not saved)."""
    if lay.memory_bits is not None:
        memory_bits.restore(lay.memory_bits, lay, v, cells)
    else:
        clear(lay, v)
        map_cells(lay, v["memory"]).copy_(cells.view(map_cells(lay, v["memory"]).shape))
    known_counts(lay, v["memory"], out=v["known"])


def sense_and_share(
    lay: GridLayout,
    v: dict[str, torch.Tensor],
    cell: torch.Tensor | None = None,
    read: torch.Tensor | None = None,
    restarted: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Each UAV writes its window into its memory, then merges the memories of the UAVs in range
    (one hop), in place, and updates the per-block counts of what each knows. ``v``: the state
    record's field views (``memory [M, N, G]`` uint8, ``known``: `known_counts`). Returns the
    windows read, ``[M, N, win^2]`` packed grid values and their codes (what the observation
    shows: read once); without memory (``comm_radius`` None) a no-op that returns None, and with
    bit rows (`uavsim.memory_bits`) None too: the observation reads the window itself. ``cell``:
    ``v["cell"]`` as a contiguous tensor if the caller has one (saves a copy); ``read``: with bit rows,
    `Layout.cell_reads` at the UAVs' cells if the caller read them (then ``cell`` may have any strides).
    ``restarted`` ([M] bool, autoreset next_step): environments whose step is their episode's start (hovering
    from the prepared start, which holds the launch's share already): their UAVs do not share again."""
    if lay.memory is None:
        return None
    if lay.memory_bits is not None:
        cell = v["cell"].contiguous() if cell is None and read is None else cell
        return memory_bits.sense(lay.memory_bits, v, cell, read)
    memory, cell, grid, known = v["memory"], v["cell"], v["grid"], v["known"]
    m, n = cell.shape
    window = cell[:, :, None] + lay.memory.window  # [M, N, win^2] grid cells, distinct per UAV
    values = grid.gather(1, window.view(m, -1)).view(m, n, -1)
    code = values >> lay.count_bits
    seen = (code | SEEN).to(torch.uint8)  # the truth now: never less than what was remembered
    if lay.memory.radius == 0:  # only the windows change: count their change, not the whole map
        add_sightings(lay, known, window, memory.gather(2, window), seen, code)
    memory.scatter_(2, window, seen)
    if lay.memory.radius == 0:
        return values, code
    if lay.memory.everyone:
        memory.copy_(memory.amax(1, keepdim=True).expand_as(memory))
    else:
        pos = lay.positions(cell)  # [M, N, 2] int16
        distance = (pos[:, :, None, :] - pos[:, None, :, :]).abs().amax(-1)  # [M, N, N] Chebyshev
        in_range = (distance <= lay.memory.radius).to(torch.uint8)
        if restarted is not None:  # a second share would be a second hop: one more than the reference's start
            in_range = torch.where(restarted[:, None, None], lay.memory.own, in_range)
        # every UAV's at once; a product, not torch.where: 0.54 ms against 11.7 ms for 64 envs x 10 UAVs
        # on one thread of the 2-core AMD EPYC (broadcast uint8 `where` is slow there), the same bytes
        memory.copy_((memory[:, None] * in_range[..., None]).amax(2))
    known_counts(lay, memory, out=known)  # a merge can change any cell: count them all
    return values, code


def add_sightings(
    lay: GridLayout, known: torch.Tensor, window: torch.Tensor, old: torch.Tensor, new: torch.Tensor, code: torch.Tensor
) -> None:
    """Update `known_counts` ``known [M, N, 2, P^2]`` in place for one UAV's memory codes ``old``
    becoming ``new`` (``[M, N, win^2]`` uint8) at the grid cells ``window`` (distinct per UAV), whose
    packed grid codes are ``code`` (``new`` is ``code | SEEN``).

    Codes only gain bits (0 < 4 < 5, 0 < 7: a sighting is the truth, which only grows), so bit 0,
    set for known covered (5) and known blocked (7), turns on at most once, and bit 1 says which:
    ``(old ^ new) & code`` is 3 where a cell turns known blocked, 1 where it turns known covered.
    Border cells stay KNOWN_BLOCKED (`clear`): they add 0. The counts take one scatter of the two
    planes (blocked, covered) through the cells' blocks: the same ops as an index of ``2 * P^2``
    slots, without its int64 ``[M, N, win^2]`` slot tensor (28 KB per environment on the preset)."""
    m, n, _ = window.shape
    turned = torch.bitwise_xor(old, new).bitwise_and_(code)  # uint8
    gained = torch.empty(m, n, 2, window.shape[2], dtype=known.dtype, device=known.device)
    torch.eq(turned[:, :, None], lay.memory.gained, out=gained)  # [M, N, 2, win^2]: blocked, covered
    # index_select: a third of indexing's (`block[...]`, aten::index) time on one CPU thread
    block = lay.memory.block_of_grid.index_select(0, window.view(-1)).view(m, n, 1, -1)
    known.scatter_add_(3, block.expand_as(gained), gained)


def codes(lay: GridLayout, memory: torch.Tensor) -> torch.Tensor:
    """``[M, N, H, W]`` uint8 memory codes of the map cells of the record's ``memory`` (a view of
    it, `map_cells`, for codes; decoded from bit rows, `memory_bits.codes`)."""
    if memory.dtype == torch.int64 and lay.memory_bits is not None:
        return memory_bits.codes(lay.memory_bits, memory)
    return map_cells(lay, memory)


def map_cells(lay: GridLayout, memory: torch.Tensor) -> torch.Tensor:
    """``[M, N, H, W]`` view of the map cells of memories ``[M, N, G]`` (a view of the state record)."""
    cfg, p = lay.cfg, lay.cfg.pad
    start = p + p * lay.ws
    rows = memory[..., start : start + cfg.grid_height * lay.ws].unflatten(-1, (cfg.grid_height, lay.ws))
    return rows[..., : cfg.grid_width]


def known_counts(lay: GridLayout, memory: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``[M, N, 2, P^2]``: how many cells of each pooled block each UAV knows blocked, then known
    covered (the observation divides them by the block's cells), into ``out`` if given (the state
    record's ``known``). ``memory``: ``[M, N, G]`` uint8 (or bit rows, `codes`)."""
    m, n = memory.shape[:2]
    cfg, dtype = lay.cfg, lay.memory.count_dtype
    known = torch.empty(m, n, 2, cfg.grid_height, cfg.grid_width, dtype=dtype, device=memory.device)
    torch.eq(codes(lay, memory)[:, :, None], lay.memory.codes, out=known)  # 0/1 in the counts' dtype
    if out is None:
        out = torch.empty(m, n, 2, cfg.state_pool**2, dtype=dtype, device=memory.device)
    return out.zero_().index_add_(3, lay.block_of_cell, known.view(m, n, 2, -1))


def heading(
    lay: GridLayout, counts: torch.Tensor, cell: torch.Tensor, out: torch.Tensor, keys: torch.Tensor | None = None
) -> torch.Tensor:
    """Each UAV's heading (`uavsim.heading`) to the nearest block holding a cell it does not know
    to be blocked or covered (an unknown cell may need a visit), into ``out [M, N, 3]`` (float32
    values, cast to its dtype). ``counts``: `known_counts`; ``cell``: ``[M, N]`` the UAVs' grid
    cells (any strides); ``keys``: their `CellHeading` keys if the caller read them."""
    m, n = cell.shape
    flags = lay.memory.heading.flag_buffer(m, n, cell.device)
    # the two never overlap: the sum stays within the dtype
    into(flags[..., 1:], torch.lt, counts[:, :, 0] + counts[:, :, 1], lay.memory.block_cells)
    return lay.memory.heading.write(flags, cell, out, keys)
