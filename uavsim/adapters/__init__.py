"""Adapters for the ecosystem, each a thin layer over `UAVSwarmEnv` or `ReferenceEnv` (no rules here).

=====================================  ============================================  ===========
module                                 class                                         wraps
=====================================  ============================================  ===========
``gymnasium_vector``                   `CoverageVectorEnv` (gymnasium VectorEnv)      UAVSwarmEnv
``gymnasium_single``                   `CoverageReferenceEnv` (gymnasium Env)         ReferenceEnv
``pettingzoo_env``                     `CoverageParallelEnv` (PettingZoo ParallelEnv) ReferenceEnv
``torchrl_env``                        `UAVTorchRLEnv` (TorchRL EnvBase)              UAVSwarmEnv
=====================================  ============================================  ===========

Gymnasium ids (registered by ``import uavsim``):
    ``uavsim/Coverage-v0``: ``make_vec`` gives `CoverageVectorEnv` (batched torch); ``make`` and
        ``make_vec(..., vectorization_mode="sync" | "async")`` give / run `CoverageReferenceEnv`
        (every copy built alike: the same maps until ``reset(seed=s)`` seeds copy ``i`` with ``s + i``;
        pass ``env_index=i`` per worker to play the batched env's episodes, see ``gymnasium_single``).
    ``uavsim/CoverageReference-v0``: `CoverageReferenceEnv` only (NumPy, no torch in workers).

Nothing is imported here: each module pulls in its own ecosystem package when it is imported.
"""

from __future__ import annotations

COVERAGE_ID = "uavsim/Coverage-v0"
COVERAGE_REFERENCE_ID = "uavsim/CoverageReference-v0"
_SINGLE = "uavsim.adapters.gymnasium_single:CoverageReferenceEnv"
_VECTOR = "uavsim.adapters.gymnasium_vector:CoverageVectorEnv"


def register_gymnasium() -> None:
    """Register the Gymnasium ids (entry points are strings: nothing heavy is imported)."""
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # gymnasium is a runtime dependency, but the rest of uavsim works without it
        return
    if COVERAGE_ID not in registry:
        register(id=COVERAGE_ID, entry_point=_SINGLE, vector_entry_point=_VECTOR)
    if COVERAGE_REFERENCE_ID not in registry:
        register(id=COVERAGE_REFERENCE_ID, entry_point=_SINGLE)
