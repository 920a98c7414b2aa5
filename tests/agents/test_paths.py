"""Output paths are checked before any work: the reason names the path and what is in the way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.run.paths import dir_problem, file_problem


def test_usable_paths_have_no_problem_and_nothing_is_left_behind(tmp_path):
    assert dir_problem(tmp_path) is None
    assert dir_problem(tmp_path / "new" / "deeper") is None and not (tmp_path / "new").exists()
    assert file_problem(tmp_path / "out.json") is None
    assert os.listdir(tmp_path) == []  # the write probe cleans up


def test_files_in_the_way_are_named(tmp_path):
    (tmp_path / "f").write_text("x")
    assert dir_problem(tmp_path / "f") == f"{tmp_path / 'f'} exists and is not a directory"
    assert (
        dir_problem(tmp_path / "f" / "sub")
        == f"{tmp_path / 'f' / 'sub'} cannot be created: {tmp_path / 'f'} is not a directory"
    )
    assert file_problem(tmp_path) == f"{tmp_path} is a directory, expected a file path"
    assert "is not a directory" in file_problem(tmp_path / "f" / "out.json")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc, which refuses new folders even to root")
def test_a_place_that_refuses_writes_is_named():
    assert dir_problem("/proc/run").startswith("/proc/run cannot be written: /proc")


def test_a_folder_that_cannot_be_looked_into_is_a_reason_not_an_exception(tmp_path, monkeypatch):
    from pathlib import Path

    def no_search_permission(self, *args, **kwargs):  # as os.stat under a mode-000 folder, for any user
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "exists", no_search_permission)
    monkeypatch.setattr(Path, "is_dir", no_search_permission)
    assert (
        dir_problem(tmp_path / "locked" / "run") == f"{tmp_path / 'locked' / 'run'} cannot be used: Permission denied"
    )
    assert file_problem(tmp_path / "locked" / "out.json").endswith("cannot be used: Permission denied")


def test_a_file_where_the_runs_folder_should_be_is_named(tmp_path):
    from agents.run.paths import new_run_dir

    (tmp_path / "runs").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cannot make the run directory .*: .*runs is a file; set run.dir=DIR"):
        new_run_dir(0, tmp_path / "runs")


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    # `agents.evaluate --out` wrote in place: a full disk halfway left half a JSON where the last results were
    from agents.run.paths import write_text_atomically

    out = tmp_path / "eval.json"
    write_text_atomically(out, '{"old": 1}')
    real = Path.write_text

    def half_then_full_disk(self, text, *args, **kwargs):
        real(self, text[:3], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full_disk)
    with pytest.raises(OSError, match="No space"):
        write_text_atomically(out, '{"new": 2}')
    monkeypatch.undo()
    assert out.read_text(encoding="utf-8") == '{"old": 1}' and [p.name for p in tmp_path.iterdir()] == ["eval.json"]
