"""GPU placement utilities shared by the trainer and the diffusion / VLM pipelines.

Device inventory, model sizes, whole-model placement, a data-parallel map over worker processes,
streaming training with out-of-memory back-off, stage pipelines across devices and torchrun
helpers. Importing this package does not import diffusers or transformers (``.toy`` does, lazily).
"""

from .devices import format_bytes
from .dp import WorkerPool, dp_map
from .dp_types import DPMapError, ItemFailure, WorkerDiedWarning, WorkerInitError
from .meminfo import DeviceMemory, Inventory, inventory, inventory_report, memory_in_use
from .oom import free_memory, is_oom_error, oom_backoff
from .placement import PlacementError, place_models, remaining_memory, to_max_memory
from .sizing import model_bytes
from .streaming import StreamStats, stream_train
from .tensors import split_batch, to_cpu, to_device
from .dist import DistEnv, init_distributed, pick_backend, pick_device, read_dist_env
from .stages import Stage, StageError, StagePipeline
