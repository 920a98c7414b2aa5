"""Stage pipeline: stages on different devices (policy -> generator -> reward), overlapped.

Each stage runs in its own thread with a bounded queue in front of it, so stage k works on item
i+1 while stage k+1 works on item i, and a slow stage holds back the ones before it instead of
letting items pile up in memory. Threads, not processes: the stages share the caller's models
(the policy being trained stays in the trainer), and CUDA kernels and most torch CPU kernels
release the GIL. For several copies of one stage, use :func:`agents.placement.dp_map` instead.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from .checks import as_device, check_int, check_visible_gpu, device_key
from .pool.arguments import check_items
from .pool.errors import PicklableError
from .tensors import to_device

_POLL_S = 0.1  # how often a blocked thread checks whether the pipeline is stopping
_END = object()  # end-of-stream marker passed down the queues


@dataclass(frozen=True)
class Stage:
    """One step of a :class:`StagePipeline`: ``fn(item) -> output`` run on ``device``.

    With ``move_inputs`` the tensors in each input (nested in dicts/lists/tuples) are moved to
    ``device`` before ``fn`` sees them, so a stage never gets another GPU's tensors (the
    "expected all tensors to be on the same device" errors of seed 000).
    """

    fn: Callable[[Any], Any]
    device: str | torch.device = "cpu"
    name: str | None = None
    move_inputs: bool = True

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(f"Stage fn must be callable, got {type(self.fn).__name__}")
        as_device(self.device, what="Stage device")
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"Stage name must be a str or None, got {type(self.name).__name__}")


class StageError(PicklableError):
    """A stage raised on an item; ``stage`` names it and ``index`` is the item's input position."""

    def __init__(self, stage: str, index: int, exc: BaseException):
        self.stage, self.index = stage, index
        where = f"on item {index}" if index >= 0 else "to start"
        super().__init__(f"stage {stage!r} failed {where}: {type(exc).__name__}: {exc}")


class StagePipeline:
    """Stages run concurrently over a stream of items; outputs come back in input order.

    ``stages`` are :class:`Stage` objects or plain callables (run on the CPU). ``queue_size``
    bounds how many items wait in front of each stage.
    """

    def __init__(self, stages: Sequence[Stage | Callable[[Any], Any]], *, queue_size: int = 2):
        if isinstance(stages, (Stage, str)) or callable(stages) or not isinstance(stages, Sequence) or not stages:
            raise ValueError("stages must be a non-empty list of Stage objects or callables")
        self.queue_size = check_int(queue_size, "queue_size", 1)
        self.stages = [s if isinstance(s, Stage) else Stage(s) for s in stages]
        self.names = [s.name or f"stage{k}:{getattr(s.fn, '__name__', 'fn')}" for k, s in enumerate(self.stages)]
        for stage, name in zip(self.stages, self.names):
            check_visible_gpu(stage.device, f"stage {name!r}")

    def run(self, items: Iterable[Any], *, progress: bool = False) -> list[Any]:
        """All outputs of the last stage, in input order (raises :class:`StageError` on failure)."""
        return list(tqdm(self.imap(items), desc="pipeline", unit="item", disable=not progress))

    def imap(self, items: Iterable[Any]) -> Iterator[Any]:
        """Yield the last stage's outputs in input order as they finish; ``items`` is read lazily.

        The stages run under the caller's ``torch.no_grad`` / ``inference_mode`` / ``autocast`` as
        they stand at this call. A failure is raised where the stream reaches its item: the outputs
        of the items before it come first.
        """
        check_items(items)
        return self._imap(items, _caller_modes())

    def _imap(self, items: Iterable[Any], modes: Callable[[], contextlib.AbstractContextManager]) -> Iterator[Any]:
        # A failure travels down the queues as a StageError after the items before it, so those
        # still reach the caller; ``halt[p]`` stops thread p (0: input, k+1: stage k) when a thread
        # after it fails, and ``stop`` stops them all when the caller is done.
        stop = threading.Event()
        halt = [threading.Event() for _ in range(len(self.stages) + 1)]
        queues = [queue.Queue(maxsize=self.queue_size) for _ in range(len(self.stages) + 1)]

        def put(p: int, value: Any) -> bool:
            while not (stop.is_set() or halt[p].is_set()):
                try:
                    queues[p].put(value, timeout=_POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        def get(q: queue.Queue, halted: threading.Event) -> Any:
            while not (stop.is_set() or halted.is_set()):
                try:
                    return q.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
            return _END

        def fail(p: int, name: str, index: int, exc: BaseException) -> None:
            for event in halt[:p]:
                event.set()
            error = StageError(name, index, exc)
            error.__cause__ = exc
            put(p, error)

        def feed() -> None:
            index = -1
            with modes():  # the caller's iterator may compute tensors too
                try:
                    for index, item in enumerate(items):
                        if not put(0, (index, item)):
                            return
                except BaseException as exc:  # the input iterator itself raised
                    fail(0, "input", index + 1, exc)
                    return
            put(0, _END)

        def work(k: int) -> None:
            stage, name = self.stages[k], self.names[k]
            try:
                dev = as_device(stage.device)
                if dev.type == "cuda":
                    # the current CUDA device is per thread: set it so that tensors the stage creates
                    # without a device land on its own GPU (seed 000 used torch.cuda.device() blocks);
                    # device_key: a bare "cuda" is cuda:0, which set_device needs spelled out
                    torch.cuda.set_device(torch.device(device_key(dev)))
            except BaseException as exc:  # a GPU that is not there: fail the pipeline, never hang it
                fail(k + 1, name, -1, exc)
                return
            with modes():
                while True:
                    msg = get(queues[k], halt[k + 1])
                    if msg is _END or isinstance(msg, StageError):
                        put(k + 1, msg)
                        return
                    index, item = msg
                    try:
                        if stage.move_inputs:
                            item = to_device(item, device_key(dev))
                        out = stage.fn(item)
                    except BaseException as exc:
                        fail(k + 1, name, index, exc)
                        return
                    del item
                    if not put(k + 1, (index, out)):
                        return

        threads = [threading.Thread(target=feed, name="pipeline-input", daemon=True)]
        threads += [
            threading.Thread(target=work, args=(k,), name=f"pipeline-{self.names[k]}", daemon=True)
            for k in range(len(self.stages))
        ]
        for t in threads:
            t.start()
        try:
            while True:
                msg = get(queues[-1], stop)
                if isinstance(msg, StageError):
                    raise msg
                if msg is _END:
                    return
                yield msg[1]
        finally:
            stop.set()  # also reached when the caller stops iterating early
            for t in threads:
                # daemon threads: one stuck inside a user fn or iterator cannot block exit
                t.join(timeout=1.0)


def _caller_modes() -> Callable[[], contextlib.AbstractContextManager]:
    """A context that enters, in another thread, the calling thread's grad, inference and autocast
    modes (torch keeps them per thread, so a new thread starts with grad on and autocast off)."""
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    casts = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]

    @contextlib.contextmanager
    def modes() -> Iterator[None]:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad), contextlib.ExitStack() as stack:
            for device_type, dtype in casts:
                stack.enter_context(torch.autocast(device_type, dtype=dtype))
            yield

    return modes
