"""accelerate's ``split_between_processes`` as a contender of the placement benchmark.

The parent side (:class:`Accelerate`) runs this module under ``accelerate launch`` in a
subprocess and reads back the record it writes; the launched side (:func:`main`) builds the same
worker and the same items in every process, times each job inside the processes and writes the
record from the main process. ``accelerate launch --cpu --num_processes 2`` starts a single
process (accelerate's multi-CPU launch goes through mpirun and a hostfile), so the CPU processes
are started with ``--multi_gpu`` (torch.distributed.run) and the script asks for the CPU:
``PartialState(cpu=True)`` is accelerate's MULTI_CPU mode with gloo.

    python -m accelerate.commands.launch --multi_gpu --num_processes 2 -m benchmarks.placement_accelerate \\
        --config '{"echo_items": 300, "clip_items": 12, "clip_batch": 8, "clip_image_size": 64}' --out r.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.placement_contenders import Skip
from benchmarks.placement_worker import build_worker, make_jobs

REPO = Path(__file__).resolve().parents[1]


class Accelerate:
    """``accelerate launch`` of this module; its processes time themselves (see :func:`main`)."""

    how = (
        "accelerate launch --multi_gpu --num_processes n (PartialState(cpu=True): MULTI_CPU, gloo); every process "
        "builds the items itself, split_between_processes(items, apply_padding=True) + gather_object, timed in the "
        "processes; start-up from the launch command to every process holding its worker"
    )

    def __init__(self, devices: list[str], threads: int, cfg: dict):
        if importlib.util.find_spec("accelerate") is None:
            raise Skip("accelerate is not installed (pip install -e '.[pipelines]')")
        if any(d != "cpu" for d in devices):
            raise Skip("measured on CPU workers only")
        if len(devices) < 2:
            raise Skip("accelerate launch --multi_gpu needs at least 2 processes")
        self.n, self.threads, self.cfg = len(devices), threads, cfg

    def measure(self) -> tuple[dict[str, float], dict[str, list]]:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "record.json"
            cmd = [
                *(sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1"),
                *("--num_processes", str(self.n), "--main_process_port", str(free_port())),
                *("--mixed_precision", "no", "--dynamo_backend", "no", "-m", "benchmarks.placement_accelerate"),
                *("--config", json.dumps(self.cfg), "--threads", str(self.threads), "--out", str(out)),
            ]
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                "CUDA_VISIBLE_DEVICES": "",
                "OMP_NUM_THREADS": str(self.threads),
                "MKL_NUM_THREADS": str(self.threads),
            }
            proc = subprocess.run(
                [*cmd, "--launched-at", repr(time.time())], cwd=REPO, env=env, capture_output=True, text=True
            )
            if proc.returncode != 0 or not out.exists():
                raise RuntimeError(
                    f"accelerate launch exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
                )
            written = json.loads(out.read_text(encoding="utf-8"))
        outputs = {"echo": written["outputs"]["echo"], "clip": [torch.tensor(s) for s in written["outputs"]["clip"]]}
        return written["record"], outputs


def free_port() -> int:
    """A TCP port free now, for the processes' rendezvous (29500, the default, may be taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_map(state: Any, worker: Any, items: list) -> list:
    """Every process runs its contiguous share; the main process gets all results in input order."""
    from accelerate.utils import gather_object

    with state.split_between_processes(items, apply_padding=True) as part:
        mine = [worker(item) for item in part]
    return gather_object(mine)[: len(items)]  # padding repeated the last item on the short process


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the accelerate contender of benchmarks.placement (launched)")
    parser.add_argument("--config", required=True, help="JSON: echo_items, clip_items, clip_batch, clip_image_size")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--launched-at", type=float, required=True, help="time.time() when the launch started")
    args = parser.parse_args(argv)
    from accelerate import PartialState

    cfg = json.loads(args.config)
    state = PartialState(cpu=True)
    worker = build_worker("cpu", args.threads, cfg["clip_image_size"])
    jobs = make_jobs(cfg)
    state.wait_for_everyone()
    record: dict[str, Any] = {"startup_s": time.time() - args.launched_at, "processes": state.num_processes}
    split_map(state, worker, jobs["clip"][: 2 * state.num_processes])  # warm-up, as the other contenders
    outputs = {}
    for job, items in jobs.items():
        state.wait_for_everyone()
        start = time.perf_counter()
        outputs[job] = split_map(state, worker, items)
        record[f"{job}_s"] = time.perf_counter() - start
    if state.is_main_process:
        outputs["clip"] = [s.tolist() for s in outputs["clip"]]
        Path(args.out).write_text(json.dumps({"record": record, "outputs": outputs}), encoding="utf-8")
    state.wait_for_everyone()
    state.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
