"""Reading user maps (uavsim.maps): each format, a folder or list as a set, and every check's error,
which names the file and what was expected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from uavsim import EnvConfig
from uavsim.maps import DARK_BELOW, coverable_cells, load_map_set, map_files, read_map

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_MAPS = ROOT / "examples" / "maps"
SMALL = EnvConfig(
    grid_height=4, grid_width=6, num_uavs=2, num_obstacles=1, launch_size=2, sensor_radius=1, state_pool=2
)
SMALL_MAP = np.array(
    [
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 1, 0, 0, 0, 0],
        [0, 1, 0, 0, 1, 1],
    ],
    dtype=bool,
)


def as_text(blocked: np.ndarray) -> str:
    return "\n".join("".join("#" if b else "." for b in row) for row in blocked) + "\n"


def write_png(path: Path, blocked: np.ndarray, dark: int = 0, light: int = 255) -> Path:
    Image.fromarray(np.where(blocked, dark, light).astype(np.uint8), mode="L").save(path)
    return path


def test_a_text_grid_reads_with_blank_lines_and_trailing_whitespace(tmp_path):
    text = "\n" + as_text(SMALL_MAP).replace("\n", "  \t\n", 2) + "\n\n"  # blank lines around, spaces after
    (tmp_path / "m.txt").write_text(text)
    blocked = read_map(tmp_path / "m.txt")
    assert blocked.dtype == bool and np.array_equal(blocked, SMALL_MAP)


@pytest.mark.parametrize("dtype", [bool, np.uint8, np.int64])
def test_an_npy_array_reads_nonzero_as_obstacle(tmp_path, dtype):
    np.save(tmp_path / "m.npy", SMALL_MAP.astype(dtype) * (1 if dtype is bool else 7))
    assert np.array_equal(read_map(tmp_path / "m.npy"), SMALL_MAP)


def test_a_png_reads_dark_pixels_as_obstacles_at_the_documented_threshold(tmp_path):
    assert np.array_equal(read_map(write_png(tmp_path / "m.png", SMALL_MAP)), SMALL_MAP)
    # just below the threshold is dark, the threshold itself is light
    edge = write_png(tmp_path / "edge.png", SMALL_MAP, dark=DARK_BELOW - 1, light=DARK_BELOW)
    assert np.array_equal(read_map(edge), SMALL_MAP)
    # colour and transparency: black opaque pixels are obstacles, transparent ones free (even if black)
    rgba = np.zeros((*SMALL_MAP.shape, 4), dtype=np.uint8)
    rgba[..., 3] = np.where(SMALL_MAP, 255, 0)
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "alpha.PNG")
    assert np.array_equal(read_map(tmp_path / "alpha.PNG"), SMALL_MAP)


def test_a_folder_is_a_set_of_its_map_files_in_name_order_and_a_list_keeps_its_order(tmp_path):
    other = SMALL_MAP.copy()
    other[3, 5] = False
    (tmp_path / "b.txt").write_text(as_text(SMALL_MAP))
    np.save(tmp_path / "a.npy", other)
    write_png(tmp_path / "c.png", SMALL_MAP)
    (tmp_path / "README.md").write_text("not a map: ignored")
    maps = load_map_set(tmp_path, SMALL)
    assert [f.name for f in maps.files] == ["a.npy", "b.txt", "c.png"] and len(maps) == 3
    assert maps.blocked.shape == (3, 4, 6) and np.array_equal(maps.blocked[0], other)
    assert maps.free_cells.tolist() == [int((~other).sum()), int((~SMALL_MAP).sum()), int((~SMALL_MAP).sum())]
    listed = load_map_set([tmp_path / "c.png", str(tmp_path / "a.npy")], SMALL)
    assert [f.name for f in listed.files] == ["c.png", "a.npy"]
    assert [f.name for f in load_map_set(tmp_path / "b.txt", SMALL).files] == ["b.txt"]


def test_the_example_maps_are_valid_for_the_default_env():
    maps = load_map_set(EXAMPLE_MAPS, EnvConfig())
    assert len(maps) >= 2 and maps.blocked.shape[1:] == (32, 32)
    assert {f.name for f in maps.files} >= {"urban_block.txt", "office_corridors.txt"}


def test_coverable_cells_follow_moves_and_the_footprint():
    cfg = EnvConfig(
        grid_height=5, grid_width=5, num_uavs=1, launch_size=1, sensor_radius=0, state_pool=5, num_obstacles=1
    )
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[2, :] = True  # a wall across the map: the bottom two rows are out of reach
    assert coverable_cells(blocked, cfg).sum() == 10
    blocked[2, 4] = False  # a gap at the end
    assert coverable_cells(blocked, cfg).sum() == 21
    # row 2 open only at (2, 3), under an obstacle: a diagonal move from (1, 4) needs only its target free
    blocked = np.array([[c == "#" for c in row] for row in (".....", "...#.", "###.#", ".....", ".....")])
    four, eight = coverable_cells(blocked, cfg).sum(), coverable_cells(blocked, cfg.replace(moves=8)).sum()
    assert (four, eight) == (9, 20)  # 8 moves reach every free cell
    # a sensor radius of 2 covers the row below a wall from the row above it
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[2, :] = True
    assert coverable_cells(blocked, cfg.replace(sensor_radius=2)).sum() == 15
    # a sensor wider than the short side (its offsets past a side cover nothing) sees past a wall it cannot cross
    wide = EnvConfig(
        grid_height=3,
        grid_width=6,
        num_uavs=1,
        launch_size=1,
        sensor_radius=4,
        state_pool=3,
        num_obstacles=1,
        obstacle_max_size=1,
    )
    blocked = np.zeros((3, 6), dtype=bool)
    blocked[:, 2] = True
    assert coverable_cells(blocked, wide).sum() == 15
    assert coverable_cells(blocked, wide.replace(sensor_radius=2)).sum() == 9


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("m.csv", "0,1", r"m\.csv: unknown extension '\.csv', expected one of \.txt, \.npy, \.png"),
        ("m.txt", "..#\n.x.\n", r"m\.txt, line 2, column 2: 'x' is not a map cell, expected '#' \(obstacle\)"),
        ("m.txt", "...\n..\n", r"m\.txt, line 2: a row of 2 cells, expected 3"),
        ("m.txt", "\n  \n", r"m\.txt holds no rows of '#' and '\.'"),
        ("m.txt", b"\xff\xfe..", r"m\.txt is not UTF-8 text"),
        ("m.npy", b"not numpy", r"m\.npy is not a NumPy \.npy array"),
        ("m.npy", b"", r"m\.npy is not a NumPy \.npy array: No data left in file"),  # was a bare EOFError
        ("m.png", b"not a png", r"m\.png is not a readable PNG image"),
    ],
)
def test_unreadable_files_are_errors_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message):
        read_map(path)


def test_sixteen_bit_pngs_an_npz_under_an_npy_name_and_a_byte_order_mark(tmp_path):
    # a 16-bit grey PNG (NumPy / imageio's uint16 writers) was clipped to 255 by Pillow's convert("L"): dark grey
    # obstacles at 10000 / 65535 (~15 % luminance) were all read as free
    Image.fromarray(np.where(SMALL_MAP, 10000, 60000).astype(np.uint16)).save(tmp_path / "grey16.png")
    with Image.open(tmp_path / "grey16.png") as image:
        assert image.mode.startswith("I")
    assert np.array_equal(read_map(tmp_path / "grey16.png"), SMALL_MAP)
    np.savez(tmp_path / "z.npz", SMALL_MAP)
    (tmp_path / "z.npz").rename(tmp_path / "z.npy")  # was an AttributeError: 'NpzFile' object has no attribute 'dtype'
    with pytest.raises(ValueError, match=r"z\.npy is not a NumPy \.npy array \(NumPy reads an \.npz archive\)"):
        read_map(tmp_path / "z.npy")
    (tmp_path / "bom.txt").write_text("\ufeff" + as_text(SMALL_MAP), encoding="utf-8")  # as Windows' Notepad saves
    assert np.array_equal(read_map(tmp_path / "bom.txt"), SMALL_MAP)


def test_npy_arrays_must_be_2d_bool_or_int_and_pngs_real_pngs(tmp_path):
    np.save(tmp_path / "f.npy", SMALL_MAP.astype(np.float32))
    with pytest.raises(ValueError, match=r"f\.npy: expected a bool or integer array .* got float32"):
        read_map(tmp_path / "f.npy")
    np.save(tmp_path / "d3.npy", np.zeros((2, 2, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"d3\.npy: expected a 2-D map .* got shape \(2, 2, 2\)"):
        read_map(tmp_path / "d3.npy")
    Image.fromarray(np.zeros((4, 6), dtype=np.uint8)).save(tmp_path / "jpeg.png", format="JPEG")
    with pytest.raises(ValueError, match=r"jpeg\.png is not a PNG image \(Pillow reads it as JPEG\)"):
        read_map(tmp_path / "jpeg.png")
    with pytest.raises(ValueError, match=r"missing\.txt does not exist"):
        read_map(tmp_path / "missing.txt")


def test_map_sets_that_do_not_exist_or_hold_nothing_are_errors(tmp_path):
    with pytest.raises(ValueError, match=r"map set .*nowhere does not exist: expected a map file or a folder"):
        map_files(tmp_path / "nowhere")
    (tmp_path / "notes.md").write_text("no maps here")
    with pytest.raises(ValueError, match=r"map folder .* holds no map files \(expected \.txt, \.npy, \.png\)"):
        map_files(tmp_path)
    with pytest.raises(ValueError, match="at least one map file, got an empty list"):
        map_files([])


def test_a_map_of_the_wrong_size_names_the_file_and_the_config_to_play_it(tmp_path):
    (tmp_path / "a.txt").write_text(as_text(SMALL_MAP))
    (tmp_path / "b.txt").write_text(as_text(SMALL_MAP[:, :5]))  # one set, two sizes: b does not fit
    with pytest.raises(ValueError, match=r"b\.txt is 4x5 cells .* expected .* 4x6 \(set grid_height=4 grid_width=5"):
        load_map_set(tmp_path, SMALL)


def test_a_map_must_leave_the_launch_area_free(tmp_path):
    blocked = SMALL_MAP.copy()
    blocked[1, 1] = True
    (tmp_path / "m.txt").write_text(as_text(blocked))
    with pytest.raises(ValueError, match=r"m\.txt has obstacles in the launch area at \(row, col\) \(1, 1\): .*2x2"):
        load_map_set(tmp_path / "m.txt", SMALL)


def test_a_map_whose_reachable_cells_cannot_meet_the_target_is_an_error(tmp_path):
    cfg = EnvConfig(
        grid_height=6,
        grid_width=6,
        num_uavs=1,
        launch_size=2,
        sensor_radius=0,
        target_coverage=0.9,
        state_pool=6,
        num_obstacles=1,
    )
    blocked = np.zeros((6, 6), dtype=bool)
    blocked[3, :] = True  # 12 of 30 free cells walled off: 0.6 < 0.9
    (tmp_path / "walled.txt").write_text(as_text(blocked))
    with pytest.raises(ValueError, match=r"walled\.txt: only 18 of its 30 free cells can be covered .*0\.6000 < "):
        load_map_set(tmp_path / "walled.txt", cfg)
    assert len(load_map_set(tmp_path / "walled.txt", cfg.replace(target_coverage=0.6))) == 1  # exactly enough


def test_env_config_takes_a_path_string_or_none():
    assert EnvConfig(maps=Path("examples") / "maps").maps == str(Path("examples") / "maps")
    with pytest.raises(TypeError, match="EnvConfig.maps must be a path"):
        EnvConfig(maps=3)
    with pytest.raises(ValueError, match="EnvConfig.maps must be None or a map file or folder"):
        EnvConfig(maps=" ")


def test_a_sixteen_bit_png_with_a_transparent_grey_keeps_its_dark_obstacles(tmp_path):
    # tRNS sent it through convert("RGBA"), which clips 16-bit grey at 255: every obstacle above 255/65535 was lost
    grey = np.where(SMALL_MAP, 20000, 60000).astype(np.uint16)  # obstacles dark grey (~30 % luminance)
    Image.fromarray(grey).save(tmp_path / "t16.png", transparency=0)  # grey 0 is transparent: free, as on white
    with Image.open(tmp_path / "t16.png") as image:
        assert image.mode.startswith("I") and image.info["transparency"] == 0
    assert np.array_equal(read_map(tmp_path / "t16.png"), SMALL_MAP)
    grey[SMALL_MAP] = 0  # obstacles drawn in the transparent grey read as free
    Image.fromarray(grey).save(tmp_path / "t0.png", transparency=0)
    assert not read_map(tmp_path / "t0.png").any()


def test_rows_split_at_line_ends_only_and_an_image_too_large_for_any_grid_is_refused(tmp_path):
    # str.splitlines() cut a row at \v, \f, \x1c, \x85, \u2028: a map of the wrong shape, or two rows of one
    for char in ("\x0b", "\x0c", "\x1c", "\x85", "\u2028"):
        (tmp_path / "m.txt").write_text(f"..#{char}...\n......\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r"m\.txt, line 1, column 4: .* is not a map cell"):
            read_map(tmp_path / "m.txt")
    (tmp_path / "crlf.txt").write_bytes(as_text(SMALL_MAP).replace("\n", "\r\n").encode())
    assert np.array_equal(read_map(tmp_path / "crlf.txt"), SMALL_MAP)
    Image.new("L", (4097, 2), 255).save(tmp_path / "wide.png")
    with pytest.raises(ValueError, match=r"wide\.png is 4097x2 pixels: grids are <= 4096"):
        read_map(tmp_path / "wide.png")


def test_a_folder_orders_its_maps_by_code_point_and_names_a_broken_link(tmp_path):
    for name in ("b.txt", "Z.txt", "a.txt"):  # Windows' paths sort without case: another order, other maps a seed
        (tmp_path / name).write_text(as_text(SMALL_MAP))
    assert [p.name for p in map_files(tmp_path)] == ["Z.txt", "a.txt", "b.txt"]
    try:
        (tmp_path / "c.txt").symlink_to(tmp_path / "gone.txt")
    except OSError:  # Windows without the symlink privilege
        return
    assert [p.name for p in map_files(tmp_path)][-1] == "c.txt"  # kept: the set's size decides every map pick
    with pytest.raises(ValueError, match=r"c\.txt does not exist"):
        load_map_set(tmp_path, SMALL)


def test_a_map_path_may_start_at_the_users_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # os.path.expanduser: HOME on POSIX, USERPROFILE on Windows
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    (tmp_path / "maps").mkdir()
    (tmp_path / "maps" / "a.txt").write_text(as_text(SMALL_MAP), encoding="utf-8")
    assert map_files("~/maps") == [tmp_path / "maps" / "a.txt"]
    assert map_files(["~/maps/a.txt"]) == [tmp_path / "maps" / "a.txt"]
    assert len(load_map_set("~/maps/a.txt", SMALL)) == 1
