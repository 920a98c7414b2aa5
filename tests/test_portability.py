"""No POSIX-only call runs on Windows unguarded (tests/portability_scan.py): the project passes the
scan, and the scan finds what it should in planted sources and lets guarded ones through."""

from __future__ import annotations

import textwrap

import pytest

from tests.portability_scan import PRODUCT, ROOT, SCANNED, scan_paths, scan_source, text_without_encoding


def found(source: str) -> list[str]:
    return [f.api for f in scan_source(textwrap.dedent(source))]


def test_the_project_has_no_unguarded_posix_only_call():
    findings = scan_paths([ROOT / d for d in SCANNED])
    assert not findings, "POSIX-only calls without a guard:\n" + "\n".join(map(str, findings))


def test_a_planted_os_kill_is_found_with_its_line():
    source = """\
    import os

    def running(pid):
        os.kill(pid, 0)
        return True
    """
    (finding,) = scan_source(textwrap.dedent(source), "planted.py")
    assert (finding.path, finding.line, finding.api) == ("planted.py", 4, "os.kill")
    assert "CTRL_C_EVENT" in finding.why


@pytest.mark.parametrize(
    ("source", "api"),
    [
        ("import resource", "import resource"),
        ("import fcntl as f", "import fcntl"),
        ("from pwd import getpwuid", "from pwd import ..."),
        ("import signal\nsignal.alarm(5)", "signal.alarm"),
        ("import signal\nx = signal.SIGKILL", "signal.SIGKILL"),
        ("import signal as s\ns.signal(s.SIGHUP, print)", "signal.SIGHUP"),
        ("import signal\nx = signal.Signals.SIGALRM", "signal.Signals.SIGALRM"),
        ("import signal\nx = getattr(signal, 'SIGUSR1')", "signal.SIGUSR1"),
        ("from signal import SIGKILL", "from signal import SIGKILL"),
        ("import os\nos.fork()", "os.fork"),
        ("import os\nos.killpg(1, 9)", "os.killpg"),
        ("import os\nuid = os.getuid()", "os.getuid"),
        ("import os\nn = len(os.sched_getaffinity(0))", "os.sched_getaffinity"),
        ("from os import kill\nkill(1, 0)", "os.kill"),
        ("import os\nfd = os.open('runs', os.O_RDONLY)", "os.open(..., read-only)"),
        ("text = open('/proc/meminfo').read()", "open('/proc/meminfo')"),
        ("import ctypes\nlibc = ctypes.CDLL('libc.so.6')", "ctypes.CDLL(...so...)"),
        ("import multiprocessing as mp\nctx = mp.get_context('fork')", "multiprocessing.get_context('fork')"),
        # the wrong branch, the wrong exception, or a guard that does not help os.kill
        ("import os, sys\nif sys.platform == 'win32':\n    os.kill(1, 0)", "os.kill"),
        ("import os\ntry:\n    os.kill(1, 0)\nexcept OSError:\n    pass", "os.kill"),
        ("try:\n    import resource\nexcept ValueError:\n    pass", "import resource"),
        ("import os\nif os.name == 'posix' or True:\n    os.fork()", "os.fork"),
    ],
    ids=lambda v: v if "\n" not in v and len(v) < 40 else None,
)
def test_unguarded_uses_are_found(source, api):
    assert found(source) == [api]


@pytest.mark.parametrize(
    "source",
    [
        "import os, sys\nif sys.platform != 'win32':\n    os.kill(1, 0)",
        "import os\nif os.name == 'nt':\n    pass\nelse:\n    os.kill(1, 0)",
        "import os, platform\nif platform.system() != 'Windows':\n    os.kill(1, 0)",
        "import os\nPOSIX = os.name == 'posix'\nif POSIX:\n    os.fork()",
        "try:\n    import resource\nexcept ImportError:\n    resource = None",
        "import signal\ntry:\n    s = signal.SIGKILL\nexcept AttributeError:\n    s = None",
        "import signal\nif hasattr(signal, 'SIGKILL'):\n    signal.signal(signal.SIGKILL, print)",
        "import signal\nkill = signal.SIGKILL if hasattr(signal, 'SIGKILL') else signal.SIGTERM",
        "import os\nok = hasattr(os, 'O_DIRECTORY') and os.open('d', os.O_RDONLY | os.O_DIRECTORY)",
        "import os\ndef f(d):\n    if not hasattr(os, 'O_DIRECTORY'):\n        return\n"
        "    os.open(d, os.O_RDONLY | os.O_DIRECTORY)",
        "import os, sys\ndef f():\n    if not sys.platform.startswith('linux'):\n        return None\n"
        "    return os.sysconf('SC_PAGE_SIZE')",
        "import ctypes, platform\nif platform.libc_ver()[0] == 'glibc':\n    ctypes.CDLL('libc.so.6').malloc_trim(0)",
        "try:\n    text = open('/proc/meminfo').read()\nexcept OSError:\n    text = ''",
        "import os\nfd = os.open('f.txt', os.O_WRONLY | os.O_CREAT)",
        "import os, pytest, sys\n@pytest.mark.skipif(sys.platform == 'win32', reason='POSIX')\ndef test_x():\n"
        "    os.kill(1, 0)",
        "import os, pytest\nPOSIX_ONLY = pytest.mark.skipif(os.name == 'nt', reason='POSIX')\n@POSIX_ONLY\n"
        "def test_x():\n    os.fork()",
        "import os, pytest\npytestmark = [pytest.mark.skipif(os.name == 'nt', reason='POSIX')]\nos.fork()",
        "import os, pytest\n@pytest.mark.skipif(not os.path.exists('/proc/self'), reason='Linux')\ndef test_x():\n"
        "    os.sysconf('SC_PAGE_SIZE')",
        "import os, pytest, sys\ndef test_x():\n    if sys.platform == 'win32':\n        pytest.skip('POSIX')\n"
        "    os.kill(1, 0)",
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nsignal.raise_signal(signal.SIGTERM)",
        "import multiprocessing as mp\nctx = mp.get_context('spawn')",
    ],
    ids=range(21),
)
def test_guarded_or_portable_uses_pass(source):
    assert found(source) == []


def test_the_product_reads_and_writes_text_as_utf8():
    findings = scan_paths([ROOT / d for d in PRODUCT], text_without_encoding)
    assert not findings, "text files without an encoding:\n" + "\n".join(map(str, findings))


@pytest.mark.parametrize(
    ("source", "found_at"),
    [
        ("(run / 'config.yaml').write_text(text)", [".write_text()"]),
        ("data = path.read_text()", [".read_text()"]),
        ("f = open(name)", ["open() in text mode"]),
        ("f = open(name, 'w')", ["open() in text mode"]),
        ("import io\nf = io.open(name, mode='a')", ["open() in text mode"]),
        ("path.write_text(text, encoding='utf-8')", []),
        ("f = open(name, 'rb')", []),
        ("f = open(name, 'w', encoding='utf-8')", []),
        ("f = open(name, mode)", []),  # a mode not known here
    ],
)
def test_text_without_an_encoding_is_found(source, found_at):
    assert [f.api for f in text_without_encoding(source)] == found_at
