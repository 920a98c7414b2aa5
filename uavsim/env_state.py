"""`UAVSwarmEnv`'s state in the rules' terms and its checkpoints: what the env holds, read and restored
(`uavsim.state_checks` keys, checks and packs it); the step itself is `uavsim.env`'s."""

from __future__ import annotations

from typing import Any

import torch

from uavsim.state_checks import checked_state, rules_state, state_record, state_spec


class EnvState:
    """`state`, `state_spec`, `state_dict` and `load_state_dict` of `uavsim.env.UAVSwarmEnv`, over its
    state record (``_buf``, views ``_v``, layout ``_lay``, next_step's ``_pending``)."""

    @property
    def state(self) -> dict[str, torch.Tensor]:
        """The state in the rules' terms (`uavsim.state_checks.state_keys`), ``[B, ...]``: views of the live
        state (read-only by convention), except ``cells`` ([B, Hp * Wp] uint8 codes FREE 0 / COVERED 1 /
        BLOCKED 2), ``pos`` ([B, N, 2] int16 (row, col)), ``memory`` ([B, N, H * W]), and ``t``, ``covered``
        and ``free`` where the record keeps them wider than ``state_spec`` says, computed on access."""
        if self._buf is None:
            raise RuntimeError("call reset() before reading the state")
        return rules_state(self._lay, self._v, self._pending)

    def read_state(self, *keys: str) -> tuple[torch.Tensor, ...]:
        """``state[k]`` for each of ``keys``, in that order, computing only those: the planners' read of the
        cells and positions each call, without decoding every UAV's memory.

        Raises:
            RuntimeError: before ``reset()``.
            ValueError: a key the state does not have.
        """
        if self._buf is None:
            raise RuntimeError("call reset() before reading the state")
        state = rules_state(self._lay, self._v, self._pending, keys)
        return tuple(state[k] for k in keys)  # a key named twice: twice

    def state_spec(self) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """``{key: (dtype, shape)}`` of each tensor of ``state`` (and of checkpoints)."""
        return state_spec(self._lay, self.num_envs)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (tensors are copies on the env's device)."""
        if self._buf is None:
            raise RuntimeError("call reset() before state_dict()")
        return {
            "config": self.config.to_dict(),
            "seed": self.seed,
            "num_envs": self.num_envs,
            "first_env_index": int(self.env_index[0]),
            "state": {k: v.clone() for k, v in self.state.items()},
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Continue from `state_dict()`'s output; anything else is a `TypeError` / `ValueError`
        naming what does not fit (this env's identity, a tensor's dtype or shape, values out of
        range, counts that disagree with the map)."""
        s = checked_state(self, self._lay, d)
        self._pending.copy_(s["reset_pending"])
        self._set_buffer(state_record(self._lay, s))
        if self.reset_mode != "sparse":
            self._prepare()
