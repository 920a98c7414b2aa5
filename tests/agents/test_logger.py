"""The TensorBoard logger: a newer run's event file is read after the older ones."""

from __future__ import annotations

import time
from types import SimpleNamespace

from tensorboard.summary.writer import event_file_writer

from agents.run import logger as logger_module
from agents.run.logger import Logger


def fake_clock(monkeypatch, start: float) -> list[float]:
    """A clock that only `sleep` advances, for the writer's file names and the logger's wait."""
    now = [start]
    monkeypatch.setattr(time, "time", lambda: now[0])
    monkeypatch.setattr(
        logger_module, "time", SimpleNamespace(time=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    )
    return now


def test_a_second_logger_in_the_same_second_sorts_after_the_first(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch, 1_800_000_000.2)
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(9))  # 9, then 10
    Logger(tmp_path).close()
    Logger(tmp_path, purge_step=5).close()  # a resume right after, in the same process and second
    names = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(names) == 2 and names[-1].endswith(".10"), names  # TensorBoard reads the resume's last
    assert 1_800_000_001 <= now[0] < 1_800_000_001.1  # it waited for the next second, no longer


def test_a_file_stamped_ahead_of_the_clock_is_not_waited_for(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch, 1_800_000_000.2)
    (tmp_path / "events.out.tfevents.1900000000.host.1.0").write_bytes(b"")  # written before the clock was set back
    Logger(tmp_path).close()
    assert now[0] == 1_800_000_000.2
