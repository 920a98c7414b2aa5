from __future__ import annotations

import io

from benchmarks import tolerate_narrow_consoles


def test_a_code_page_console_prints_the_tables_signs_as_question_marks():
    cp1252 = io.TextIOWrapper(io.BytesIO(), encoding="cp1252", newline="\n")  # a redirected stdout on a Western Windows
    tolerate_narrow_consoles([cp1252])
    print("overhead ≤ 40 µs → ok", file=cp1252, flush=True)
    assert cp1252.buffer.getvalue() == "overhead ? 40 µs ? ok\n".encode("cp1252")
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    tolerate_narrow_consoles([utf8])
    assert utf8.errors == "strict"  # left as it was
