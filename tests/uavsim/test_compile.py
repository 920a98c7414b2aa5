"""The GPU path captures whole: `torch.compile(env.step, fullgraph=True)` traces every non-sparse mode
on the CPU (a graph break raises), and the captured step plays exactly the eager episodes."""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from tests.uavsim.inductor_helpers import needs_compiler, restore_inductor_after
from uavsim import EnvConfig, UAVSwarmEnv, memory_bits
from uavsim.env import AUTORESET_MODES

# The prepared starts of this task are rebuilt every 6 steps (7 with next_step): episodes of 20.
SMALL = EnvConfig(
    grid_height=16, grid_width=16, num_uavs=4, num_obstacles=8, max_steps=20, launch_size=2, target_coverage=0.5
)


def outputs(step_out):
    obs, reward, terminated, truncated, info = step_out
    return [
        obs["local"],
        obs["state"],
        reward,
        terminated,
        truncated,
        *(info[k] for k in sorted(info) if k != "final_obs"),
        *info.get("final_obs", {}).values(),
    ]


def play_side_by_side(eager: UAVSwarmEnv, compiled: UAVSwarmEnv, step, steps: int) -> int:
    """Step ``eager`` and ``compiled`` (through ``step``) with the same random actions for ``steps`` steps,
    every output equal, then their states; returns the episodes that ended."""
    gen = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(steps):
        actions = torch.randint(0, eager.num_actions, (eager.num_envs, eager.num_uavs), generator=gen)
        want, got = outputs(eager.step(actions)), outputs(step(actions))
        for a, b in zip(want, got, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
        ended += int(want[3].sum() + want[4].sum())
    for k, v in eager.state.items():
        assert torch.equal(v, compiled.state[k]), k
    return ended


@pytest.mark.parametrize(
    "autoreset_mode, reset_mode, obs_dtype, comm_radius",
    [
        *(
            (autoreset, reset, dtype, None)
            for autoreset in AUTORESET_MODES
            for reset, dtype in (("prepared", torch.float32), ("dense", torch.float32), ("prepared", torch.bfloat16))
        ),
        ("same_step", "prepared", torch.float32, 3),  # onboard memory, shared within 3 cells
        ("next_step", "prepared", torch.float32, 0),  # each UAV's own: its block counts kept incrementally
        ("next_step", "prepared", torch.bfloat16, 64),  # shared with everyone (past the map)
    ],
)
def test_the_step_compiles_as_one_graph_and_plays_the_eager_episodes(
    reset_mode, obs_dtype, autoreset_mode, comm_radius
):
    import torch._dynamo

    torch._dynamo.reset()
    kwargs = dict(
        num_envs=5,
        seed=3,
        reset_mode=reset_mode,
        autoreset_mode=autoreset_mode,
        obs_dtype=obs_dtype,
        check_action_range=False,
    )  # the range check reads the actions back: trainers turn it off
    cfg = SMALL.replace(comm_radius=comm_radius)
    eager, compiled = UAVSwarmEnv(cfg, **kwargs), UAVSwarmEnv(cfg, **kwargs)
    eager.reset(), compiled.reset()
    assert compiled.prepare_period == {"prepared": 6, "dense": 1}[reset_mode] + (
        autoreset_mode == "next_step" and reset_mode == "prepared"
    )
    # Graphs: one per side of the rebuild's host-side branch, once the step counter turned dynamic.
    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(compiled.step, fullgraph=True, backend=counter)
    ended = play_side_by_side(eager, compiled, step, 3 * SMALL.max_steps)  # episodes end, starts are rebuilt
    assert ended >= 5 and counter.frame_count <= 3


@needs_compiler
@pytest.mark.timeout(600)  # inductor builds two graphs of the step's C++ kernels: ~3 minutes on 2 cores
def test_inductor_plays_the_default_presets_kind_of_step_exactly(monkeypatch):
    """The default preset's kind of step (13x13 windows, onboard memory as bit rows, window paths) compiled
    by inductor, as `train.compile_rollout` compiles it: the eager episodes, through ends and a rebuild.
    The memory's sensing once reached the truth's rows by `as_strided` past the memory's view, which
    inductor read elsewhere (an index out of bounds in its C++ kernel; `uavsim.record.Joined`)."""
    from uavsim.compile_compat import prepare_inductor

    restore_inductor_after(monkeypatch)
    cfg = EnvConfig(
        num_uavs=4, num_obstacles=10, max_steps=16, obs_radius=6, comm_radius=0, window_paths=True, target_coverage=0.3
    )
    assert memory_bits.fits(cfg)
    kwargs = dict(num_envs=3, seed=3, check_action_range=False)
    eager, compiled = UAVSwarmEnv(cfg, **kwargs), UAVSwarmEnv(cfg, **kwargs)
    eager.reset(), compiled.reset()
    prepare_inductor()
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):  # a cached graph would hide a lowering
        step = torch.compile(compiled.step, fullgraph=True, backend="inductor")
        assert play_side_by_side(eager, compiled, step, compiled.prepare_period + 4) >= 1  # ends and a rebuild
    torch._dynamo.reset()


def test_the_sparse_mode_is_the_one_that_breaks_the_graph():
    import torch._dynamo

    env = UAVSwarmEnv(SMALL, num_envs=3, reset_mode="sparse", check_action_range=False)
    env.reset()
    explained = torch._dynamo.explain(env.step)(torch.zeros(3, SMALL.num_uavs, dtype=torch.int64))
    assert explained.graph_break_count >= 1  # nonzero(): a data-dependent shape, a host sync on a GPU
    torch._dynamo.reset()
