"""The same env on a GPU: identical results to the CPU, and a step with no host sync (dense resets)."""

import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SMALL = EnvConfig(grid_height=16, grid_width=16, num_uavs=6, num_obstacles=12, max_steps=40, launch_size=3)


def test_cuda_matches_cpu_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    actions = torch.randint(0, SMALL.num_actions, (120, 64, SMALL.num_uavs), generator=gen)
    cpu = UAVSwarmEnv(SMALL, num_envs=64, device="cpu", seed=5)
    gpu = UAVSwarmEnv(SMALL, num_envs=64, device="cuda", seed=5)
    assert torch.equal(cpu.reset()["local"], gpu.reset()["local"].cpu())
    for a in actions:
        c, g = cpu.step(a), gpu.step(a.cuda())
        for x, y in zip(c[:4], g[:4]):
            x, y = (x["local"], y["local"]) if isinstance(x, dict) else (x, y)
            assert torch.equal(x, y.cpu())


def test_dense_step_never_syncs():
    env = UAVSwarmEnv(EnvConfig(), num_envs=1024, device="cuda", check_action_range=False, reset_mode="dense")
    env.reset()
    gen = torch.Generator(device="cuda").manual_seed(0)
    actions = [torch.randint(0, 5, (1024, 10), generator=gen, device="cuda") for _ in range(210)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for a in actions:  # 210 steps: every env truncates and auto-resets at least once
            env.step(a)
    finally:
        torch.cuda.set_sync_debug_mode("default")
