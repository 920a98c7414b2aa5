"""The step's physics on the packed state: moves and coverage (`uavsim.rules`); the observations: `uavsim.observation`.

`Layout` holds one config's constants on one device: the packed grid's encoding, the state
record (`uavsim.record`), and small index tables. The functions below act on the record's field
views ``v`` in place; every tensor is ``[M, ...]`` for ``M`` environments, no shape depends on
data, nothing is read back to the host.

The packed grid ``[M, pad + Hp * Ws]`` holds in each cell its code in the top two bits (FREE 0,
COVERED 1, BLOCKED 3) and the number of UAVs on it in the bits below (``count_bits``: 6 in uint8
for up to 63 UAVs, wider dtypes beyond). So one gather of a UAV's window gives all three
observation channels, and adding COVERED to a free cell covers it. The map is surrounded by
blocked cells: ``pad`` rows above and below (``Hp = H + 2 pad``) and ``pad`` columns between rows
(row stride ``Ws = W + pad``): a row's right border is the next row's left one, which saves a
tenth of the grid (and of every read of it) on the default task. Map cell ``(r, c)`` is grid cell
``pad + (r + pad) * Ws + c``; ``env.state["cells"]`` shows the rules' layout (both borders).
"""

from __future__ import annotations

import numpy as np
import torch

from uavsim import memory_bits, rules
from uavsim.compile_compat import into
from uavsim.config import EnvConfig
from uavsim.memory import MemoryTables
from uavsim.record import Field, Joined, Record
from uavsim.rng import MAX_KEY
from uavsim.window_paths import MemorySquare, WindowPaths

FREE_CODE, COVERED_CODE, BLOCKED_CODE = 0, 1, 3  # packed grid codes; uavsim.rules names 0, 1, 2


def narrowest_int(max_value: int, signed: bool = False) -> torch.dtype:
    """The smallest integer dtype holding ``[-max_value, max_value]`` (``[0, max_value]`` unsigned)."""
    if not signed and max_value <= 255:
        return torch.uint8
    for dtype in (torch.int8, torch.int16, torch.int32):
        if max_value <= torch.iinfo(dtype).max:
            return dtype
    return torch.int64


def edge_sets(cfg: EnvConfig) -> list[list[tuple[int, int]]]:
    """For each action, the (d_row, d_col) offsets from a UAV's new cell of the footprint cells
    that were not in its footprint before the move (none for hovering). Only these cells can be
    newly covered: at the end of every step each UAV's whole footprint is covered."""
    foot = {tuple(int(x) for x in o) for o in rules.footprint_offsets(cfg)}
    return [[o for o in sorted(foot) if (o[0] + m[0], o[1] + m[1]) not in foot] for m in rules.move_table(cfg)]


def move_edges(cfg: EnvConfig) -> np.ndarray:
    """``[A, E, 2]`` int64: `edge_sets` padded with (0, 0), the UAV's own cell, which the previous
    footprint holds whenever the UAV moved (and which is its footprint when it did not)."""
    edges = edge_sets(cfg)
    width = max(1, max(len(e) for e in edges))
    out = np.zeros((len(edges), width, 2), dtype=np.int64)
    for a, e in enumerate(edges):
        if e:
            out[a, : len(e)] = e
    return out


TEAM_REWARD_MAX_BYTES = 4 << 20  # 0.25 MiB on the default task (1,025 x 61 float32)


def team_reward_table(cfg: EnvConfig) -> torch.Tensor | None:
    """``[H W + 1, N (1 + E) + 1]`` float32 on the CPU (or None past `TEAM_REWARD_MAX_BYTES`): the
    rules' team reward ``coverage_reward * (newly / free) - time_penalty`` at row ``free``, column
    ``newly`` (a step covers at most the ``N (1 + E)`` cells its moves enter), computed by the ops the
    step used to run (so bit for bit its values). Why: the step reads it in one index op instead of a
    division, a product and a subtraction (2 kernels fewer a step; its rows are read at the map's
    ``free``, kept per episode in the record's ``reward_row``)."""
    rows, cols = cfg.grid_height * cfg.grid_width + 1, cfg.num_uavs * (1 + move_edges(cfg).shape[1]) + 1
    if rows * cols * 4 > TEAM_REWARD_MAX_BYTES:
        return None
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    newly, free = torch.arange(cols)[None, :], torch.arange(rows)[:, None]  # row 0 (no free cell) is never read
    return torch.div(newly, free).mul_(f32(cfg.coverage_reward)).sub_(f32(cfg.time_penalty))


class Layout:
    """A config's constants and tables on a device (see the module docstring)."""

    def __init__(self, cfg: EnvConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        p, h, w, n = cfg.pad, cfg.grid_height, cfg.grid_width, cfg.num_uavs
        self.hp, self.wp = h + 2 * p, w + 2 * p  # the rules' padded map (env.state["cells"])
        self.cells = self.hp * self.wp
        self.ws = w + p  # the packed grid's row stride: one border column between rows
        self.grid_cells = p + self.hp * self.ws  # from the left border of the first border row
        self.win2 = cfg.window**2
        self.origin_shift = cfg.obs_radius * (self.ws + 1)  # a UAV's grid cell minus its window's top-left

        # The packed grid: 2 code bits above count_bits UAV-count bits, in the narrowest dtype.
        for dtype, bits in ((torch.uint8, 6), (torch.int16, 13), (torch.int32, 29)):
            if n < 2**bits:
                self.grid_dtype, self.count_bits = dtype, bits
                break
        self.covered_bit = COVERED_CODE << self.count_bits
        self.blocked_value = BLOCKED_CODE << self.count_bits
        self.count_mask = (1 << self.count_bits) - 1

        pool_dtype = narrowest_int(int(rules.cells_per_block(cfg).max()))
        self.count_dtype = narrowest_int(h * w)
        self.t_dtype = narrowest_int(cfg.max_steps)  # the state's (`env.state`, checkpoints)
        # (t, covered) over (max_steps, free) side by side in one dtype: one add advances both, one division
        # gives the observation's (time, coverage), one comparison ends the episodes (`UAVSwarmEnv._advance`)
        clock_dtype = torch.promote_types(self.count_dtype, self.t_dtype)
        pools = Field("pools", pool_dtype, (2, cfg.state_pool**2))  # blocked, covered per block
        # In the grid's dtype the pools follow the grid: the step adds to both in one scatter (`step_coverage`).
        self.pools_after_grid = pool_dtype == self.grid_dtype
        table = team_reward_table(cfg)
        self.team_reward = None if table is None else table.to(device)
        fields = [
            Field("cell", torch.int64, (n,)),  # each UAV's grid cell: pad + (row + pad) * Ws + col
            *([] if self.pools_after_grid else [pools]),
            Field("episode", torch.int32, ()),
            # the episode's row of `team_reward`: its map's free cells, as an index (int64: int32 indices cost a cast)
            *([] if self.team_reward is None else [Field("reward_row", torch.int64, ())]),
            Field("limits", clock_dtype, (2,), ("max_steps", "free")),
            # zeroed at an episode's start: ep_reward to ep_counts (then `covered` is counted)
            Field("ep_reward", torch.float32, (n,)),
            Field("clock", clock_dtype, (2,), ("t", "covered")),
            Field("ep_counts", narrowest_int(n * cfg.max_steps), (2,)),  # collisions, near misses
        ]
        bit_memory = cfg.comm_radius is not None and memory_bits.fits(cfg)
        if bit_memory:  # each UAV's memory as bit rows, and the truth's (uavsim.memory_bits)
            fields.append(Field("memory", torch.int64, (n, 3, memory_bits.row_count(cfg))))
            fields.append(Field("truth", torch.int64, (3, memory_bits.row_count(cfg))))
        elif cfg.comm_radius is not None:  # each UAV's memory codes, in the grid's layout (uavsim.memory)
            fields.append(Field("memory", torch.uint8, (n, self.grid_cells)))
        if cfg.comm_radius is not None:
            fields.append(Field("known", pool_dtype, (n, 2, cfg.state_pool**2)))  # memory.known_counts
        # The grid comes last, after at least `origin_shift` cells' worth of bytes: a window's
        # top-left cell (a UAV's cell - origin_shift) is then an offset from the grid's row start,
        # so a strided view of the row indexes windows by the UAV cells themselves.
        grid = Field("grid", self.grid_dtype, (self.grid_cells,))
        item = self.grid_dtype.itemsize
        before = Record([*fields, grid]).offsets["grid"]
        if before < self.origin_shift * item:
            fields.append(Field("pad", torch.uint8, (self.origin_shift * item - before,)))
        # `memory_bits.sense` reads the memories' planes and the truth's through one view
        planes = Joined("memory_planes", "memory", "truth", ((n + 1) * 3, memory_bits.row_count(cfg)))
        joined = (planes,) if bit_memory else ()
        self.record = Record([*fields, grid, *([pools] if self.pools_after_grid else [])], joined)
        self.grid_offset = self.record.offsets["grid"] // item  # in grid cells from the row start
        assert self.record.offsets["grid"] % item == 0 and self.record.nbytes % item == 0
        # the grid cells, then (pools_after_grid) up to the pools' covered counts, whose slots are
        # pool_slot_shift + block from the grid's start
        self.pool_slot_shift, self.grid_span = 0, self.grid_cells
        if self.pools_after_grid:
            self.pool_slot_shift = (self.record.offsets["pools"] - self.record.offsets["grid"]) // item + pools.shape[1]
            self.grid_span = self.pool_slot_shift + pools.shape[1]
        assert MAX_KEY - 1 <= torch.iinfo(torch.int32).max

        dev = device
        as_long = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64, device=dev)  # noqa: E731
        flat = lambda rc: rc[..., 0] * self.ws + rc[..., 1]  # noqa: E731 -- offsets between grid cells
        moves = rules.move_table(cfg)
        self.moves = as_long(moves)  # [A, 2]
        self.move_flat = as_long(flat(moves))  # [A]
        self.edges = as_long(flat(move_edges(cfg)))  # [A, E]
        # [A, 1 + E]: from a UAV's cell, the cell a move leads to, then the footprint cells it enters
        self.step_cells = torch.cat([self.move_flat[:, None], self.move_flat[:, None] + self.edges], 1)
        # [G, A, 1 + E]: the same from each grid cell, so that a step reads a move's cells in one index op
        # (``cell_steps[cell, action]``) instead of an index and an add (403 KB on the default preset)
        self.cell_steps = torch.arange(self.grid_cells, device=dev)[:, None, None] + self.step_cells
        self.foot = as_long(flat(rules.footprint_offsets(cfg)))  # [F]
        rows, cols = np.divmod(np.arange(self.grid_cells) - p, self.ws)  # of each grid cell, on the map
        rows -= p
        on_map = (rows >= 0) & (rows < h) & (cols < w)
        block = rules.block_of_cell(cfg)
        self.block_of_grid = as_long(np.where(on_map, block[np.clip(rows, 0, h - 1) * w + np.clip(cols, 0, w - 1)], 0))
        self.block_of_cell = as_long(block)
        self.pool_slot_of_grid = self.block_of_grid + self.pool_slot_shift  # `step_coverage`'s slots
        self.block_cells = torch.as_tensor(rules.cells_per_block(cfg), dtype=torch.float32, device=dev)
        # Observation scalars of each grid cell: (row / (H - 1), col / (W - 1)) as float32, as the rules divide.
        scale = torch.tensor([h - 1, w - 1], dtype=torch.float32)
        rc = torch.from_numpy(np.stack([rows, cols], axis=1)).to(torch.float32)
        self.cell_position = {torch.float32: (rc / scale).to(dev)}  # {dtype: [grid cells, 2]}, float32 values cast
        self.scale = scale.to(dev)
        self.time_column = torch.tensor([0.0, 0.0, 1.0], device=dev)  # `observe`: (row, col, 0) + this x time
        self.channel_codes = torch.tensor([BLOCKED_CODE, COVERED_CODE], dtype=self.grid_dtype, device=dev)[:, None]
        self.path_codes = torch.tensor([BLOCKED_CODE, FREE_CODE], dtype=self.grid_dtype, device=dev)[:, None]
        center = torch.zeros(self.win2, dtype=self.grid_dtype)
        center[self.win2 // 2] = 1  # a UAV counts the others in its window: not itself at the centre
        self.center = center.to(dev)
        # (t / max_steps, coverage) >= (1, target): t / max_steps in float32 reaches 1 exactly when t does
        # up to 2**24 steps (t <= max_steps - 1 divides to at most 1 - 2**-24); beyond, t is compared itself
        self.ends = torch.tensor([1.0, cfg.target_coverage], device=dev) if cfg.max_steps <= 2**24 else None
        self.launch_cell = self.cells_of(torch.as_tensor(rules.launch_cells(cfg))[None]).to(dev)[0]  # [L]
        self.memory = self.memory_bits = None
        if cfg.comm_radius is not None:
            self.memory = MemoryTables(cfg, self.ws, pool_dtype, on_map, self.block_of_grid, dev)
        if bit_memory:
            grid_slot = self.pool_slot_of_grid.cpu().numpy()
            self.memory_bits = memory_bits.BitMemory(cfg, self.ws, self.grid_cells, grid_slot, pool_dtype, dev)
        self.paths = WindowPaths(cfg).to(dev) if cfg.window_paths else None
        self._build_cell_reads()
        # path_radius: the paths search the memory near each UAV instead of its window
        self.path_square = MemorySquare(cfg, self.ws, self.grid_cells).to(dev) if cfg.path_radius else None

    def _build_cell_reads(self) -> None:
        """``cell_reads [G, F]`` int64 (or None): what the step reads by each UAV's new cell, side by side
        so that one index op reads it all: the memory's bit-row fields (`memory_bits.sense`), the heading's
        keys (`heading.CellHeading`, packed into int64 words) and the cell's map position (float32 pair).
        Read by an index op (any strides), the cells need not be contiguous: the step's moves then take
        one `where`. Built where the memory is bit rows and the heading tabulated (the default preset)."""
        self.cell_reads = None
        heading = None if self.memory is None else self.memory.heading
        if self.memory_bits is None or heading is None or not heading.tables:
            return
        keys = heading.cell_key  # [G, 1 + P^2]
        per_word = 8 // keys.element_size()
        words = -(-keys.shape[1] // per_word)
        packed = torch.zeros(keys.shape[0], words * per_word, dtype=keys.dtype, device=keys.device)
        packed[:, : keys.shape[1]] = keys
        fields = self.memory_bits.cell_table.t()
        self.read_keys = slice(fields.shape[1], fields.shape[1] + words)
        self.read_position = self.read_keys.stop
        # the position (row, column) and a float32 0, then padding: read as (row, column, 0) (`observe`)
        position = self.cell_position[torch.float32]
        position = torch.cat([position, torch.zeros_like(position)], 1)
        self.cell_reads = torch.cat([fields, packed.view(torch.int64), position.view(torch.int64)], 1)

    def keys_read(self, read: torch.Tensor) -> torch.Tensor:
        """The heading keys ``[M, N, 1 + P^2]`` (`heading.CellHeading.cell_key`) in ``cell_reads`` rows ``read``."""
        key = self.memory.heading.cell_key
        return read[..., self.read_keys].view(key.dtype)[..., : key.shape[1]]

    def positions_in(self, dtype: torch.dtype) -> torch.Tensor:
        """``[grid cells, 2]`` (row / (H - 1), col / (W - 1)) of each grid cell: float32, cast to ``dtype``."""
        if dtype not in self.cell_position:
            self.cell_position[dtype] = self.cell_position[torch.float32].to(dtype)
        return self.cell_position[dtype]

    # -- grid views ---------------------------------------------------------------------------------
    def windows(self, buf: torch.Tensor) -> torch.Tensor:
        """``[M, X, win, win]`` view of the state records ``buf`` (a fresh `Record.empty`):
        element ``[b, x]`` is the window of environment ``b`` centred on grid cell ``x``."""
        win = self.cfg.window
        rows = buf.view(self.grid_dtype)
        start = self.grid_offset - self.origin_shift  # >= 0: the record puts that many cells before the grid
        return rows.as_strided(
            (rows.shape[0], self.grid_cells - (win - 1) * (self.ws + 1) + self.origin_shift, win, win),
            (rows.shape[1], 1, self.ws, 1),
            start,
        )

    def grid_and_pools(self, buf: torch.Tensor) -> torch.Tensor:
        """``[M, grid_span]`` view of the state records ``buf`` (``pools_after_grid``) from the grid to the
        pools, in the grid's dtype: the pools' covered counts at ``pool_slot_shift + block``. A dtype view of
        a byte span (no ``as_strided``, which torch.compile cannot write through)."""
        span = self.record.span(buf, "grid", "pools")
        return span.view(span.shape[0], self.grid_span, self.grid_dtype.itemsize).view(self.grid_dtype).squeeze(-1)

    def map_view(self, grid: torch.Tensor) -> torch.Tensor:
        """``[M, H, W]`` view of a packed grid's map cells."""
        cfg, p = self.cfg, self.cfg.pad
        start = p + p * self.ws
        return grid[:, start : start + cfg.grid_height * self.ws].view(-1, cfg.grid_height, self.ws)[
            :, :, : cfg.grid_width
        ]

    def decode(self, grid: torch.Tensor) -> torch.Tensor:
        """``[M, Hp * Wp]`` uint8 codes of `uavsim.rules` (FREE 0, COVERED 1, BLOCKED 2) of a packed
        grid, in the rules' padded layout."""
        cfg, p = self.cfg, self.cfg.pad
        code = self.map_view(grid) >> self.count_bits
        cells = torch.full((grid.shape[0], self.hp, self.wp), rules.BLOCKED, dtype=torch.uint8, device=grid.device)
        cells[:, p : p + cfg.grid_height, p : p + cfg.grid_width] = code - (code >> 1)  # 3 -> 2
        return cells.view(grid.shape[0], -1)

    def encode(self, cells: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """The packed grid of ``cells`` (rules' codes and layout) with the UAVs on grid cells
        ``cell [M, N]`` counted."""
        cfg, p = self.cfg, self.cfg.pad
        code = cells.view(-1, self.hp, self.wp)[:, p : p + cfg.grid_height, p : p + cfg.grid_width].to(self.grid_dtype)
        grid = torch.full(
            (cells.shape[0], self.grid_cells), self.blocked_value, dtype=self.grid_dtype, device=cells.device
        )
        self.map_view(grid).copy_((code + (code >> 1)) << self.count_bits)  # 2 -> 3
        ones = torch.ones(cell.shape, dtype=self.grid_dtype, device=cell.device)
        return grid.scatter_add_(1, cell, ones)

    def positions(self, cell: torch.Tensor) -> torch.Tensor:
        """``[M, N, 2]`` int16 (row, col) on the map of grid cells ``[M, N]``."""
        p = self.cfg.pad
        return torch.stack([(cell - p) // self.ws - p, (cell - p) % self.ws], dim=-1).to(torch.int16)

    def cells_of(self, pos: torch.Tensor) -> torch.Tensor:
        """``[M, N]`` int64 grid cells of map positions ``[M, N, 2]``."""
        p = self.cfg.pad
        return p + (pos[..., 0].long() + p) * self.ws + pos[..., 1].long()

    def padded_cells_of(self, pos: torch.Tensor) -> torch.Tensor:
        """``[M, N]`` int64 flat cells of map positions ``[M, N, 2]`` in the rules' padded layout."""
        p = self.cfg.pad
        return (pos[..., 0].long() + p) * self.wp + (pos[..., 1].long() + p)


# -- the step's parts ---------------------------------------------------------------------------------
def newly_covered(
    lay: Layout,
    v: dict[str, torch.Tensor],
    sidx: torch.Tensor,
    first: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    block: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which of the grid cells ``sidx`` are newly covered; adds them to the per-block counts (the
    grid is the caller's to update) unless ``out`` is given (then the caller adds them too, and
    ``newly`` is written into ``out``). ``block``: the cells' blocks (``lay.block_of_grid[sidx]``) if
    the caller read them.

    Args:
        lay: the layout.
        v: the state record's field views.
        sidx: ``[M, K]`` int64 grid cells, sorted per row.
        first: a ``[M, K]`` bool scratch whose column 0 is True (allocated when None).
        dtype: the dtype of ``newly`` (default the pools').

    Returns:
        ``(before, newly)``: the grid values at ``sidx``, and ``[M, K]`` 0/1 where a cell is FREE,
        counted once (its first slot).
    """
    if first is None:
        first = torch.ones(sidx.shape, dtype=torch.bool, device=sidx.device)
    into(first[:, 1:], torch.ne, sidx[:, 1:], sidx[:, :-1])
    before = v["grid"].gather(1, sidx)
    pools = v["pools"]
    newly = torch.empty(sidx.shape, dtype=dtype or pools.dtype, device=sidx.device) if out is None else out
    into(newly, torch.logical_and, before < lay.covered_bit, first)  # FREE, whatever its UAV count
    if out is None:
        block = lay.block_of_grid[sidx] if block is None else block
        pools[:, 1].scatter_add_(1, block, newly if newly.dtype == pools.dtype else newly.to(pools.dtype))
    return before, newly


def step_coverage(
    lay: Layout, v: dict[str, torch.Tensor], sidx: torch.Tensor, first: torch.Tensor, out: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`newly_covered`'s ``newly`` (in the grid's dtype) of a step's cells ``sidx``, and with
    ``pools_after_grid`` (then into ``out``) their pool slots (`Layout.grid_and_pools`): the caller adds
    ``newly`` there in its scatter into the grid (else None: added here). With the memory as bit rows, the
    truth's rows get them too (`memory_bits.cover`: one read of the cells' rows and pool slots)."""
    bits, merged = lay.memory_bits, lay.pools_after_grid
    cells = None if bits is None else memory_bits.cells_read(bits, sidx)
    slot = lay.pool_slot_of_grid[sidx] if cells is None else cells[..., 2]
    fresh = newly_covered(lay, v, sidx, first, lay.grid_dtype, slot, out if merged else None)[1]
    if bits is not None:
        memory_bits.cover(bits, v, cells, fresh)
    return fresh, slot if merged else None


def cover(
    lay: Layout,
    v: dict[str, torch.Tensor],
    idx: torch.Tensor,
    first: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cover the free cells at the grid cells ``idx [M, K]`` int64 in place (grid and per-block
    counts) and return ``[M]`` the number newly covered (each cell counted once): into ``out`` if
    given, else int64. ``lay``, ``v``, ``first``: as `newly_covered`'s."""
    sidx = idx.sort(dim=1).values  # equal cells side by side: count each once
    before, newly = newly_covered(lay, v, sidx, first)
    v["grid"].scatter_(1, sidx, before | lay.covered_bit)  # FREE -> COVERED; COVERED and BLOCKED stay
    return newly.sum(1) if out is None else into(out, torch.sum, newly, 1)
