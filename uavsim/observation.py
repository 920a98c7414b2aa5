"""The observation of packed states (`uavsim.dynamics.Layout`'s record), as the rules compute it: each UAV's
window channels, position, time, pooled memory, heading and window paths, and the global state."""

from __future__ import annotations

import torch

from uavsim.dynamics import Layout, into
from uavsim.memory import heading as memory_heading


def observe(
    lay: Layout,
    buf: torch.Tensor,
    dtype: torch.dtype,
    b_index: torch.Tensor,
    cell: torch.Tensor | None = None,
    window: tuple[torch.Tensor, torch.Tensor] | None = None,
    read: torch.Tensor | None = None,
    views: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The observation of the states ``buf``.

    Args:
        lay: the layout.
        buf: ``[M, record bytes]`` uint8 state records.
        dtype: the observation's dtype.
        b_index: ``[M, 1]`` int64 arange.
        cell: the UAVs' cells as a contiguous ``[M, N]`` tensor if the caller has one (saves a copy).
        window: the UAVs' windows, ``[M, N, win^2]`` packed grid values and their codes, if the
            caller read them (`uavsim.memory.sense_and_share` does).
        read: ``lay.cell_reads`` at the UAVs' cells ``[M, N, F]``, if the caller read them (then ``cell``
            is not read and may have any strides).
        views: ``lay.record.views(buf)`` if the caller has them (making them again is Python, ~73 µs on a CPU).

    Returns:
        ``({"local": [M, N, L], "state": [M, S]}, own, clock)``: each value the float32 rules' value cast
        to ``dtype``; ``own [M, N]``, the packed grid value of each UAV's cell (its window's centre); and
        ``clock [M, 2]`` float32 (t / max_steps, coverage), as the rules divide (a view of ``state`` in
        float32).
    """
    cfg, w2, v = lay.cfg, lay.win2, lay.record.views(buf) if views is None else views
    m, n, p2 = buf.shape[0], cfg.num_uavs, cfg.state_pool**2
    local = torch.empty(m, n, cfg.local_obs_dim, dtype=dtype, device=lay.device)
    state = torch.empty(m, cfg.state_dim, dtype=dtype, device=lay.device)
    if window is None:
        seen = lay.windows(buf)[b_index, v["cell"]].view(m, n, w2)
        code = (seen >> lay.count_bits)[:, :, None, :]
    else:
        seen, code = window[0], window[1][:, :, None, :]
    into(local[..., : 2 * w2].view(m, n, 2, w2), torch.eq, code, lay.channel_codes)
    if lay.grid_dtype == torch.uint8:  # counts < 64: exact in every obs dtype, so cast first, then subtract
        into(local[..., 2 * w2 : 3 * w2], torch.bitwise_and, seen, lay.count_mask)  # UAVs in each cell
        local[..., 2 * w2 + w2 // 2].sub_(1)  # not itself, at the centre (a [M, N] op, not [M, N, win^2])
    else:
        into(local[..., 2 * w2 : 3 * w2], torch.sub, seen & lay.count_mask, lay.center)
    rc, time = local[..., 3 * w2 : 3 * w2 + 2], local[..., 3 * w2 + 2]  # the pooled memory follows them
    if dtype == torch.float32:  # (t / max_steps, coverage): the state's last two values
        clock = into(state[:, -2:], torch.div, v["clock"], v["limits"])
    else:  # in float32 first, as the rules divide, then cast
        clock = torch.div(v["clock"], v["limits"])
        state[:, -2:].copy_(clock)
    keys, cell = None, v["cell"] if cell is None else cell  # [M, N]
    if read is None:
        into(rc.view(m * n, 2), torch.index_select, lay.positions_in(dtype), 0, cell.reshape(-1))
        time.copy_(state[:, -2:-1])
    else:  # the read (row, column, 0) + (0, 0, 1) * time: position and time in one op, exact (x + 0 * t, 0 + 1 * t)
        read_rc0 = read[..., lay.read_position : lay.read_position + 2].view(torch.float32)[..., :3]
        into(local[..., 3 * w2 : 3 * w2 + 3], torch.addcmul, read_rc0, lay.time_column, state[:, None, -2:-1])
        keys = lay.keys_read(read)
    state[:, 2 * p2 : 2 * p2 + 2 * n].view(m, n, 2).copy_(rc)
    into(state[:, : 2 * p2].view(m, 2, p2), torch.div, v["pools"], lay.block_cells)
    if lay.memory is not None:  # the pooled memory, then the heading it gives (uavsim.memory)
        counts = v["known"]  # kept up to date by the sensing (uavsim.memory)
        into(local[..., 3 * w2 + 3 : 3 * w2 + 3 + 2 * p2].view(m, n, 2, p2), torch.div, counts, lay.block_cells)
        memory_heading(lay, counts, cell, local[..., 3 * w2 + 3 + 2 * p2 : 3 * w2 + 3 + cfg.memory_obs_dim], keys)
    if lay.paths is not None:  # then the moves toward the nearest uncovered free cell (uavsim.window_paths)
        paths = local[..., cfg.local_obs_dim - cfg.paths_obs_dim :]
        if lay.path_square is None and lay.paths.can_search_channels(dtype):  # of the window, read from its channels
            lay.paths.search_channels(local[..., : 2 * w2], out=paths)
        elif lay.path_square is None:  # of the window
            lay.paths.search(code == lay.path_codes, out=paths, goals_open=True)  # [M, N, 2, win^2]: blocked, free
        else:  # of the memory near the UAV
            lay.paths(*lay.path_square(v["memory"], v["cell"]), out=paths)
    return {"local": local, "state": state}, seen[:, :, w2 // 2], clock
