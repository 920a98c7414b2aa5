"""uavsim: cooperative multi-UAV coverage as batched torch tensors, with a NumPy reference.

``EnvConfig`` holds the task's constants, ``UAVSwarmEnv`` steps thousands of environments at once
and ``uavsim.reference.ReferenceEnv`` plays one environment in NumPy (imported lazily here so that
``import uavsim.reference`` alone never imports torch).
"""

from uavsim.adapters import register_gymnasium as _register_gymnasium
from uavsim.config import EnvConfig

_register_gymnasium()  # the "uavsim/Coverage-v0" ids (see uavsim.adapters)
__all__ = ["EnvConfig", "UAVSwarmEnv"]


def __getattr__(name):
    if name == "UAVSwarmEnv":
        from uavsim.env import UAVSwarmEnv

        return UAVSwarmEnv
    raise AttributeError(f"module 'uavsim' has no attribute {name!r}")
