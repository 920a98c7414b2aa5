"""GPU placement utilities shared by the trainer and the diffusion / VLM pipelines.

Device inventory, model sizes, whole-model placement, a data-parallel map over worker processes,
streaming training with out-of-memory back-off, stage pipelines across devices and torchrun
helpers (guide: docs/placement.md). Importing this package does not import diffusers or
transformers (the tiny models of the examples and tests are ``examples/toy_models.py``).
"""

from .inventory import DeviceMemory, Inventory, format_bytes, inventory, inventory_report, memory_in_use
from .journal import Journal
from .oom import free_memory, is_oom_error, oom_backoff
from .pool import WorkerPool, dp_map
from .pool.errors import BatchShrunkWarning, DPMapError, ItemFailure, WorkerDiedWarning, WorkerInitError
from .stages import Stage, StageError, StagePipeline
from .streaming import StreamStats, stream_train
from .tensors import split_batch, to_cpu, to_device
from .torchrun import DistEnv, init_distributed, pick_backend, pick_device, read_dist_env
from .whole_models import PlacementError, model_bytes, place_models, remaining_memory, to_max_memory

__all__ = [
    # inventory
    "DeviceMemory",
    "Inventory",
    "inventory",
    "inventory_report",
    "memory_in_use",
    "format_bytes",
    # sizes and whole-model placement
    "model_bytes",
    "place_models",
    "PlacementError",
    "remaining_memory",
    "to_max_memory",
    # data-parallel map
    "dp_map",
    "WorkerPool",
    "DPMapError",
    "ItemFailure",
    "WorkerDiedWarning",
    "BatchShrunkWarning",
    "WorkerInitError",
    "Journal",
    # streaming and out-of-memory back-off
    "stream_train",
    "StreamStats",
    "oom_backoff",
    "is_oom_error",
    "free_memory",
    # stage pipeline
    "Stage",
    "StagePipeline",
    "StageError",
    # torchrun
    "DistEnv",
    "read_dist_env",
    "pick_device",
    "pick_backend",
    "init_distributed",
    # nested batches
    "to_device",
    "to_cpu",
    "split_batch",
]
