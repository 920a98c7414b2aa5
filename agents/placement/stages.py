"""Stage pipeline: stages on different devices (policy -> generator -> reward), overlapped.

Each stage runs in its own thread with a bounded queue in front of it, so stage k works on item
i+1 while stage k+1 works on item i, and a slow stage holds back the ones before it instead of
letting items pile up in memory. Threads, not processes: the stages share the caller's models
(the policy being trained stays in the trainer), and CUDA kernels and most torch CPU kernels
release the GIL. For several copies of one stage, use :func:`agents.placement.dp_map` instead.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from .checks import as_device, check_int, check_visible_gpu, device_key
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


class StageError(RuntimeError):
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
        """Yield the last stage's outputs in input order as they finish; ``items`` is read lazily."""
        stop = threading.Event()
        errors: list[StageError] = []
        queues = [queue.Queue(maxsize=self.queue_size) for _ in range(len(self.stages) + 1)]

        def put(q: queue.Queue, value: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(value, timeout=_POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        def get(q: queue.Queue) -> Any:
            while not stop.is_set():
                try:
                    return q.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
            return _END

        def fail(name: str, index: int, exc: BaseException) -> None:
            error = StageError(name, index, exc)
            error.__cause__ = exc
            errors.append(error)
            stop.set()

        def feed() -> None:
            index = -1
            try:
                for index, item in enumerate(items):
                    if not put(queues[0], (index, item)):
                        return
            except BaseException as exc:  # the input iterator itself raised
                fail("input", index + 1, exc)
                return
            put(queues[0], _END)

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
                fail(name, -1, exc)
                return
            while True:
                msg = get(queues[k])
                if msg is _END:
                    put(queues[k + 1], _END)
                    return
                index, item = msg
                try:
                    if stage.move_inputs:
                        item = to_device(item, device_key(dev))
                    out = stage.fn(item)
                except BaseException as exc:
                    fail(name, index, exc)
                    return
                del item
                if not put(queues[k + 1], (index, out)):
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
                msg = get(queues[-1])
                if errors:
                    raise errors[0]
                if msg is _END:
                    return
                yield msg[1]
        finally:
            stop.set()  # also reached when the caller stops iterating early
            for t in threads:
                # daemon threads: one stuck inside a user fn or iterator cannot block exit
                t.join(timeout=1.0)
