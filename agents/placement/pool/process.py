"""A local worker process: starting it (the parent's side), and serving tasks in it (the child's).

A worker is a plain child process (``subprocess.Popen`` of ``python -c BOOT``): its environment
(``CUDA_VISIBLE_DEVICES``, thread counts) is its own, its stdout and stderr are pipes the parent
shows prefixed (:mod:`.local`), and it can run under another interpreter. What
``multiprocessing``'s spawn would hand the child (the parent's ``sys.path``, its ``__main__``
module, so that a ``make_worker`` defined in the user's script unpickles) comes as spawn's own
preparation data, read from the child's stdin with the address and key of the :class:`Hub` it
connects back to.

Protocol, over that connection: the worker first says ``("hello", token, pid)``, then
``("ready", -1, pid)`` once ``make_worker`` has built its callable, or ``("init_error", -1,
traceback)``. The parent sends tasks ``(task_id, batched, pickled list of items)`` and ``None`` to
stop; per task the worker answers ``("ok", task_id, pickled list of results)`` or ``("error",
task_id, traceback)`` (:func:`run_task`, which the Ray actors run too), in the order the tasks
arrived. A thread receives the tasks while the main thread computes, so the parent's send never
waits for a computation; results are sent before the next task is taken, so when a worker dies,
the oldest task the parent has not heard back about is the one it was running. The connection
closing without ``None`` means the parent is gone: the worker exits at once rather than holding
a GPU's memory as an orphan.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import traceback
from multiprocessing import Pipe, current_process, spawn
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import torch

from ..tensors import to_cpu
from .errors import last_line

# The child's first program: read the boot data, set sys.path, hand over to the worker module.
# The parent's interpreter takes the parent's sys.path as it is (what spawn does); another
# interpreter keeps its own and gets the parent's other entries (the script's folder, a source
# checkout) after it, so its environment's packages win.
_SET_PATH = (
    "import pickle, sys\n"
    "boot = pickle.load(sys.stdin.buffer)\n"
    "sys.stdin.close()\n"
    "p = boot['sys_path']\n"
    "sys.path[:] = p if boot['own_python'] else sys.path + [e for e in p if e not in sys.path]\n"
)
BOOT = _SET_PATH + "from agents.placement.pool.process import serve\nserve(boot)\n"
# what check_python runs: the same path, then the worker module's imports; an exact answer, so that
# a program that is not Python (echo, true) cannot pass by printing the code or nothing
_PROBE = _SET_PATH + "import agents.placement.pool.process\nprint('dp-probe', 6 * 7)\n"
_HELLO_S = 30.0  # how long a connected worker may take to say which one it is


class Hub:
    """The listener workers connect back to, a thread accepting them, and a wake-up pipe.

    Each connection's first message is ``("hello", token, pid)``; :meth:`take` hands the
    connection to whoever holds the token. :meth:`wake` (from any thread) makes
    :attr:`wake_conn` readable, which :func:`multiprocessing.connection.wait` sees.
    """

    def __init__(self):
        self.authkey = os.urandom(32)
        self._listener = Listener(authkey=self.authkey)
        self.address = self._listener.address
        self.wake_conn, self._wake_w = Pipe(duplex=False)
        self._lock = threading.Condition()  # guards the fields below; notified when a worker arrives
        self._arrived: dict[str, Connection] = {}
        self._closing = False
        self._woken = False  # a wake-up is in the pipe: at most one is, so sending never blocks
        self._thread = threading.Thread(target=self._accept_loop, name="dp-accept", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except Exception:  # a client that failed the handshake, or the listener closed
                if self._closing:
                    return
                continue
            if self._closing:
                conn.close()
                return
            try:
                hello = conn.recv() if conn.poll(_HELLO_S) else None
            except (EOFError, OSError):
                hello = None
            if not (isinstance(hello, tuple) and len(hello) == 3 and hello[0] == "hello"):
                conn.close()
                continue
            with self._lock:
                self._arrived[hello[1]] = conn
                self._lock.notify_all()
            self.wake()

    def take(self, token: str, timeout: float = 0.0) -> Connection | None:
        """The connection of the worker started with ``token``, once it has connected (waiting up to
        ``timeout`` seconds for it), else None."""
        with self._lock:
            self._lock.wait_for(lambda: token in self._arrived or self._closing, timeout)
            return self._arrived.pop(token, None)

    def wake(self) -> None:
        """Wake a loop waiting on :attr:`wake_conn` (from any thread)."""
        with self._lock:
            if self._closing or self._woken:
                return
            with contextlib.suppress(OSError):
                self._wake_w.send_bytes(b"")
                self._woken = True

    def drain_wakes(self) -> None:
        """Consume the pending wake-up, if any."""
        with self._lock:
            if not self._woken or self._closing:
                return
            with contextlib.suppress(EOFError, OSError):
                self.wake_conn.recv_bytes()
            self._woken = False

    def close(self) -> None:
        """Stop accepting (a connection of our own unblocks the accept) and close what is left."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        with contextlib.suppress(Exception):
            Client(self.address, authkey=self.authkey).close()
        self._thread.join(5.0)
        self._listener.close()
        with self._lock:
            for conn in self._arrived.values():
                conn.close()
            self._arrived.clear()
        self._wake_w.close()
        self.wake_conn.close()


def python_path(python: Any) -> Path | None:
    """``python`` as a `Path` to an existing file (or None), without running it: `check_python`'s cheap
    checks, which `dp_map` makes even when it has nothing to map. Raises TypeError / ValueError."""
    if python is None:
        return None
    if not isinstance(python, (str, os.PathLike)):
        raise TypeError(f"python must be a path to a Python interpreter or None, got {type(python).__name__}")
    path = Path(python)
    if not path.is_file():
        raise ValueError(f"python={str(path)!r} does not exist or is not a file; give a Python interpreter's path")
    return path


def check_python(python: Any) -> str | None:
    """``python`` as a path string after checking that it runs and imports this package (or None).

    Raises TypeError for a non-path and ValueError naming the path when it does not exist, cannot be
    run, is not Python, or cannot import ``agents.placement`` (with its error's last line).
    """
    path = python_path(python)
    if path is None:
        return None
    try:
        proc = subprocess.run(
            [str(path), "-c", _PROBE],
            input=pickle.dumps(_boot_path(own_python=False), protocol=4),
            capture_output=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"python={str(path)!r} cannot be run: {exc}") from exc
    if proc.returncode == 0 and proc.stdout.split() == [b"dp-probe", b"42"]:
        return str(path)
    why = last_line(proc.stderr.decode("utf-8", "replace").strip())
    why = why or f"exit code {proc.returncode}, output {proc.stdout[:200]!r}"
    raise ValueError(
        f"python={str(path)!r} cannot run the workers: {why}; it must be a Python that can import "
        "agents.placement and torch (a venv or conda env with this package installed)"
    )


def _boot_path(own_python: bool) -> dict[str, Any]:
    sys_path = list(sys.path)
    if not own_python:  # the parent's environment stays out of another interpreter's path
        prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        sys_path = [e for e in sys_path if e and not any(_under(e, pre) for pre in prefixes)]
    return {"sys_path": sys_path, "own_python": own_python}


def _under(entry: str, prefix: Path) -> bool:
    try:
        return Path(entry).resolve().is_relative_to(prefix)
    except (OSError, ValueError):
        return False


def start_process(
    hub: Hub,
    token: str,
    name: str,
    make_worker: bytes,
    device: str,
    threads: int,
    env: dict[str, str],
    python: str | None,
) -> subprocess.Popen:
    """Start one worker process; it connects to ``hub`` with ``token`` and builds its callable on ``device``.

    ``env`` is added to this process's environment. Raises what ``Popen`` raises (e.g. too many
    open files) and spawn's RuntimeError when called while a worker imports the main module.
    """
    prep = spawn.get_preparation_data(name)  # raises in a child still importing an unguarded script
    prep["authkey"] = bytes(prep["authkey"])  # an AuthenticationString refuses pickling
    own = python is None
    if not own:
        prep.pop("sys_path", None)
    boot = {
        **_boot_path(own),
        "prep": prep,
        "address": hub.address,
        "authkey": hub.authkey,
        "token": token,
        "make_worker": make_worker,
        "device": device,
        "threads": threads,
    }
    child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
    data = pickle.dumps(boot, protocol=4)  # before the start: a child is never left waiting for it
    proc = subprocess.Popen(
        [python or sys.executable, "-c", BOOT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
        bufsize=0,
    )
    with contextlib.suppress(OSError):  # the child is already gone: the pool sees it exit and says how
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    return proc


# ---------------------------------------------------------------------------------- the child
def call_batch(fn: Any, items: list, batched: bool) -> list:
    """``fn`` over one task's items: ``fn(items)`` when ``batched`` (it must return one result per
    item, in a list or tuple), else ``[fn(items[0])]``."""
    if not batched:
        return [fn(items[0])]
    out = fn(items)
    if not isinstance(out, (list, tuple)):
        raise TypeError(
            f"with batch_size, the worker's callable must return a list with one result per item, "
            f"got {type(out).__name__} (for a tensor of results, return list(tensor) or tensor.tolist())"
        )
    if len(out) != len(items):
        raise ValueError(
            f"the worker's callable returned {len(out)} result(s) for a batch of {len(items)} item(s); "
            "with batch_size it must return one result per item, in order"
        )
    return list(out)


def _receive(conn: Any, tasks: queue.SimpleQueue) -> None:
    """Move the parent's messages to ``tasks``; exit the process if the parent goes away."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(1)  # the parent died (or dropped us): no one will read our results
        tasks.put(msg)
        if msg is None:
            return


def serve(boot: dict[str, Any]) -> None:
    """Prepare like a spawned child, connect back, build the callable, then serve tasks until ``None``."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    me = current_process()
    me._inheriting = True  # as in spawn: a script that starts workers when imported fails clearly
    try:
        spawn.prepare(boot["prep"])  # the parent's cwd, sys.argv and __main__ (for make_worker)
    finally:
        me._inheriting = False
    conn = Client(boot["address"], authkey=boot["authkey"])
    conn.send(("hello", boot["token"], os.getpid()))
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_receive, args=(conn, tasks), name="dp-receive", daemon=True).start()
    torch.set_num_threads(boot["threads"])
    try:
        fn = build_worker(boot["make_worker"], torch.device(boot["device"]))
    except BaseException:
        conn.send(("init_error", -1, traceback.format_exc()))
        return
    conn.send(("ready", -1, os.getpid()))
    while True:
        msg = tasks.get()
        if msg is None:
            return
        task_id, batched, payload = msg
        kind, answer = run_task(fn, batched, payload)
        conn.send((kind, task_id, answer))


def build_worker(make_worker: bytes, device: torch.device) -> Any:
    """The callable the pickled ``make_worker`` builds on ``device`` (made the current CUDA device)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    fn = pickle.loads(make_worker)(device)
    if not callable(fn):
        raise TypeError(f"make_worker must return a callable item -> result, got {type(fn).__name__}")
    return fn


def run_task(fn: Any, batched: bool, payload: bytes) -> tuple[str, bytes | str]:
    """``("ok", pickled list of results)`` for one task's pickled list of items, or ``("error", traceback)``."""
    try:
        # results travel as CPU tensors: a CUDA tensor pickled here would be rebuilt on the
        # parent's cuda:0, which is a different GPU than this worker's cuda:0
        out = to_cpu(call_batch(fn, pickle.loads(payload), batched))
        return "ok", pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return "error", traceback.format_exc()
