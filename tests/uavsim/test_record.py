"""The state record: typed views of one row of bytes per environment, and row swaps that copy bits."""

import pytest
import torch

from tests.uavsim.inductor_helpers import needs_compiler
from uavsim import EnvConfig
from uavsim.dynamics import Layout
from uavsim.record import Field, Joined, Record, as_words, swap_rows


def test_fields_are_aligned_views_of_their_own_bytes():
    rec = Record(
        [
            Field("flag", torch.bool, ()),
            Field("count", torch.int32, (3,)),
            Field("x", torch.float32, (2, 2)),
            Field("big", torch.int64, ()),
        ]
    )
    assert rec.offsets == {"flag": 0, "count": 4, "x": 16, "big": 32} and rec.nbytes == 40
    buf = torch.zeros(5, rec.nbytes, dtype=torch.uint8)
    v = rec.views(buf)
    assert v["count"].shape == (5, 3) and v["x"].shape == (5, 2, 2) and v["big"].shape == (5,)
    v["count"] += torch.tensor([1, 2, 3], dtype=torch.int32)
    v["x"][2] = -1.5
    v["big"][4] = 2**40
    assert buf[:, 4:16].view(torch.int32).tolist() == [[1, 2, 3]] * 5
    assert (buf[2, 16:32].view(torch.float32) == -1.5).all() and buf[4, 32:40].view(torch.int64).item() == 2**40
    assert not buf[:, 0].any()  # nothing spilled into the other fields
    span = rec.span(buf, "count", "x").clone()
    assert torch.equal(rec.span_views(span, "count", "x")["x"], v["x"])


def test_swapping_rows_copies_bits_exactly():
    new = torch.tensor([[float("nan"), -0.0, 1.0], [2.0, 3.0, 4.0]])
    old = torch.tensor([[5.0, 6.0, 7.0], [8.0, float("-inf"), 9.0]])
    out = swap_rows(torch.tensor([True, False]), new, old)
    assert torch.equal(out.view(torch.int32), torch.stack([new[0], old[1]]).view(torch.int32))  # NaN, -0.0 kept
    assert as_words(torch.zeros(4, 6, dtype=torch.uint8)).dtype == torch.int16  # 6 bytes: 3 int16 words
    assert as_words(torch.zeros(4, 10, 150)).dtype == torch.int64


def test_the_grid_leaves_room_for_the_windows_of_the_first_cells():
    for cfg in (
        EnvConfig(),
        EnvConfig(
            grid_height=64, grid_width=64, obs_radius=6, num_obstacles=4, num_uavs=2, launch_size=2, state_pool=4
        ),
    ):
        lay = Layout(cfg, torch.device("cpu"))
        assert lay.grid_offset >= lay.origin_shift and lay.record.nbytes % 8 == 0
        # map cell (0, 0) and (H-1, W-1): their windows lie inside the row
        buf = lay.record.empty(2, torch.device("cpu")).fill_(7)
        corner = lay.cells_of(torch.tensor([[[0, 0], [cfg.grid_height - 1, cfg.grid_width - 1]]]))
        windows = lay.windows(buf)[torch.arange(2)[:, None], corner.expand(2, -1)]
        assert windows.shape == (2, 2, cfg.window, cfg.window)


def test_a_fields_parts_are_views_of_its_elements():
    rec = Record([Field("flag", torch.bool, ()), Field("clock", torch.int16, (2,), ("t", "covered"))])
    buf = torch.zeros(3, rec.nbytes, dtype=torch.uint8)
    v = rec.views(buf)
    v["clock"] += torch.tensor([1, 5], dtype=torch.int16)  # one op updates both parts
    v["covered"][1] = 7
    assert v["t"].tolist() == [1, 1, 1] and v["covered"].tolist() == [5, 7, 5]
    assert buf[:, 2:6].view(torch.int16).tolist() == [[1, 5], [1, 7], [1, 5]]


def joined_record() -> Record:
    """The memory's layout in small: each UAV's planes, then the truth's, read as one."""
    fields = [Field("t", torch.int16, ()), Field("memory", torch.int64, (2, 3, 5)), Field("truth", torch.int64, (3, 5))]
    return Record([*fields, Field("grid", torch.uint8, (7,))], (Joined("planes", "memory", "truth", (9, 5)),))


def test_a_joined_view_reads_consecutive_fields_as_one():
    rec = joined_record()
    buf = torch.randint(0, 255, (4, rec.nbytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    v = rec.views(buf)
    assert v["planes"].shape == (4, 9, 5) and v["planes"].dtype == torch.int64
    assert torch.equal(v["planes"][:, :6], v["memory"].reshape(4, 6, 5)) and torch.equal(v["planes"][:, 6:], v["truth"])
    v["planes"][:, 7] = -3  # a view: writes land in the truth's bytes
    assert (v["truth"][:, 1] == -3).all()
    span = rec.span(buf, "t", "memory").clone()  # a span without the truth: no joined view
    assert "planes" not in rec.span_views(span, "t", "memory")


@pytest.mark.parametrize(
    "joined, error",
    [
        (Joined("x", "truth", "memory", (9, 5)), "in order"),
        (Joined("x", "memory", "nope", (9, 5)), "in order"),
        (Joined("x", "memory", "grid", (9, 5)), "one dtype"),
        (Joined("x", "memory", "truth", (8, 5)), "cover their 360 bytes"),
    ],
)
def test_a_joined_view_that_does_not_fit_its_fields_is_refused(joined, error):
    fields = [
        Field("memory", torch.int64, (2, 3, 5)),
        Field("truth", torch.int64, (3, 5)),
        Field("grid", torch.uint8, (7,)),
    ]
    with pytest.raises(ValueError, match=error):
        Record(fields, (joined,))


@needs_compiler
def test_a_joined_view_compiles_to_the_same_reads():
    """Inductor (torch 2.13) copied the field's dtype view alone, so `as_strided` from the memory past its
    end (how the memory's sensing read the truth) read other bytes once compiled: the joined view reads
    the record's own bytes, in eager and compiled code alike."""
    rec = joined_record()
    buf = torch.randint(0, 255, (4, rec.nbytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    rows = torch.tensor([[0, 8, 3], [6, 7, 1], [2, 2, 5], [8, 0, 4]])

    def read(buf, rows):
        planes = rec.views(buf)["planes"]
        return planes[torch.arange(4)[:, None], rows] | 1

    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        got = torch.compile(read, fullgraph=True, backend="inductor")(buf, rows)
    assert torch.equal(got, read(buf, rows))
