"""Workers' output reaches the parent whole, each line prefixed with the worker's device."""

from __future__ import annotations

import io
import re
import time

import pool_helpers as ph
import pytest

from agents.placement import WorkerPool
from agents.placement.pool.local import pump, split_segments


@pytest.mark.parametrize(
    ("data", "segments", "rest"),
    [
        (b"a\nb\n", [(b"a", "\n"), (b"b", "\n")], b""),
        (b"a\r\nb", [(b"a", "\n")], b"b"),  # Windows line ends; an unfinished line stays
        (b"\r 10%\r 20%\n", [(b"", "\r"), (b" 10%", "\r"), (b" 20%", "\n")], b""),  # a bar's refreshes
        (b"x\r", [], b"x\r"),  # the \n of a \r\n may come in the next chunk
    ],
)
def test_segments_end_at_newlines_and_carriage_returns(data, segments, rest):
    assert split_segments(data) == (segments, rest)


def test_pump_prefixes_every_segment_and_finishes_the_last_line(capsys):
    woken = []
    source = io.BytesIO("first\r\n\r bar 1\r bar 2\ncaf\u00e9 without newline".encode())
    pump(source, "[cuda:3] ", "stderr", lambda: woken.append(True))
    err = capsys.readouterr().err
    assert err == "[cuda:3] first\n[cuda:3]  bar 1\r[cuda:3]  bar 2\n[cuda:3] caf\u00e9 without newline\n"
    assert woken == [True] and source.closed


def test_a_narrow_parent_stream_gets_every_line_with_escapes(monkeypatch):
    # Windows: `python job.py > log.txt` gives the parent a cp1252 stdout; workers write UTF-8
    cp1252 = io.TextIOWrapper(io.BytesIO(), encoding="cp1252", newline="\n")
    monkeypatch.setattr("sys.stdout", cp1252)
    pump(io.BytesIO("loading shard 1\nloss 0.5 \u2713\nsaved shard 1\n".encode()), "[cpu:0] ", "stdout")
    cp1252.flush()
    text = cp1252.buffer.getvalue().decode("cp1252")
    assert text == "[cpu:0] loading shard 1\n[cpu:0] loss 0.5 \\u2713\n[cpu:0] saved shard 1\n"


def test_workers_lines_arrive_whole_and_prefixed(capsys):
    with WorkerPool(ph.make_chatty, ["cpu", "cpu"], threads_per_worker=1) as pool:
        # until both workers have answered: on a loaded machine one may start seconds after the
        # other (the limit only stops a broken pool)
        n, pids, deadline = 0, set(), time.monotonic() + 50
        while len(pids) < 2 and time.monotonic() < deadline:
            out = pool.map(range(n, n + 6), progress=False)
            assert [x for x, _ in out] == list(range(n, n + 6))
            n, pids = n + 6, pids | {pid for _, pid in out}
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    # make_worker's output, then every item's lines, each whole: two workers printing at once
    # never cut into each other's lines
    assert sorted(line for line in out if "loading" in line) == ["[cpu:0] loading on cpu", "[cpu:1] loading on cpu"]
    line = re.compile(r"^\[cpu:[01]\] item (\d+) line (\d+) x{50}$")
    items = [line.match(x) for x in out if " line " in x]
    assert all(items) and len(items) == n * ph.CHATTY_LINES
    assert sorted((int(m[1]), int(m[2])) for m in items) == [(x, j) for x in range(n) for j in range(ph.CHATTY_LINES)]
    errs = [x for x in err if " err " in x]
    assert len(errs) == n * ph.CHATTY_LINES and all(re.match(r"^\[cpu:[01]\] item \d+ err \d+$", x) for x in errs)
    assert re.search(r"\[cpu:[01]\]  bar 0 50%\r\[cpu:[01]\]  bar 0 100%", captured.err)
