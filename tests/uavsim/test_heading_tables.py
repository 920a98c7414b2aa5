"""`uavsim.heading.CellHeading`: the memory's heading read from per-cell tables is `BlockHeading`'s, bit for bit."""

import pytest
import torch

from uavsim import EnvConfig
from uavsim.dynamics import Layout
from uavsim.heading import BlockHeading, CellHeading


@pytest.mark.parametrize(
    "cfg",
    [
        EnvConfig(comm_radius=0, obs_radius=6),  # the default preset's task
        EnvConfig(comm_radius=0, grid_height=20, grid_width=36, state_pool=6, obs_radius=2),  # blocks of 3-4 x 6
        EnvConfig(
            comm_radius=0,
            grid_height=9,
            grid_width=7,
            state_pool=4,
            num_obstacles=3,
            launch_size=2,
            num_uavs=3,
            obs_radius=1,
            sensor_radius=1,
        ),
    ],
    ids=["default-preset", "wide", "small"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tabulated", [True, False], ids=["tables", "too-large-to-tabulate"])
def test_the_tabulated_heading_is_block_headings_own(cfg, dtype, tabulated, monkeypatch):
    if not tabulated:  # large maps with fine pools run the module itself
        monkeypatch.setattr(CellHeading, "TABLE_MAX_BYTES", 0)
    lay = Layout(cfg, torch.device("cpu"))
    assert bool(lay.memory.heading.tables) == tabulated
    g = torch.Generator().manual_seed(cfg.grid_width)
    m, n, p2 = 64, cfg.num_uavs, cfg.state_pool**2
    rows = torch.randint(0, cfg.grid_height, (m, n), generator=g)
    cols = torch.randint(0, cfg.grid_width, (m, n), generator=g)
    cell = lay.cells_of(torch.stack([rows, cols], -1))  # [M, N] grid cells on the map
    flagged = torch.rand(m, n, p2, generator=g) < torch.rand(m, 1, 1, generator=g) ** 4  # sparse to dense
    flagged[:4] = False  # nothing left to visit: zeros
    flagged[4:8] = True  # everything: the nearest block, ties to the lowest index
    out = torch.full((m, n, 3), float("nan"), dtype=dtype)
    flags = lay.memory.heading.flag_buffer(m, n, cell.device)
    flags[..., 1:] = flagged
    assert flags[..., 0].all()  # the column of "none flagged"
    lay.memory.heading.write(flags, cell, out)
    want = BlockHeading(cfg, squared_distance=True)(flagged, rows, cols)
    bits = torch.int32 if dtype == torch.float32 else torch.int16  # bit for bit: -0.0 is not 0.0
    assert torch.equal(out.view(bits), want.to(dtype).view(bits))
    assert out[:4].eq(0).all()
