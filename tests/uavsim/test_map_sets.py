"""The env on a map set (`EnvConfig.maps`): each episode's map is one of the set's, picked per
environment and episode by the counter hash, reproducibly; the prepared starts stay exact on maps
with few free cells; and the step still captures as one graph. The step-for-step match with the
NumPy reference on map sets is in test_equivalence.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from uavsim import EnvConfig, UAVSwarmEnv, rules
from uavsim.env import AUTORESET_MODES
from uavsim.maps import load_map_set, map_indices

from .helpers import run_lockstep

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = EnvConfig(maps=str(ROOT / "examples" / "maps"))


def played_maps(env: UAVSwarmEnv) -> np.ndarray:
    """``[B, H, W]`` bool: the obstacles of each environment's current map."""
    cfg, p = env.config, env.config.pad
    cells = env.state["cells"].view(env.num_envs, cfg.grid_height + 2 * p, cfg.grid_width + 2 * p)
    return (cells[:, p:-p, p:-p] == rules.BLOCKED).numpy()


def test_each_episode_plays_the_map_its_hash_picks_from_the_set():
    maps = load_map_set(EXAMPLES.maps, EXAMPLES)
    env = UAVSwarmEnv(EXAMPLES.replace(max_steps=3), num_envs=16, seed=7)
    env.reset()
    hover = torch.zeros(16, EXAMPLES.num_uavs, dtype=torch.int64)
    seen = set()
    for episode in range(3):  # the first three episodes of every environment
        picked = map_indices(7, np.arange(16), episode, len(maps))
        assert np.array_equal(played_maps(env), maps.blocked[picked]), episode
        assert env.state["free"].tolist() == maps.free_cells[picked].tolist()
        seen.update(picked.tolist())
        for _ in range(3):
            env.step(hover)  # max_steps=3: every environment restarts
    assert seen == set(range(len(maps)))  # 16 environments x 3 episodes use every map of the set


def test_one_seed_gives_the_same_maps_and_environments_and_seeds_differ():
    a, b = UAVSwarmEnv(EXAMPLES, num_envs=12, seed=3), UAVSwarmEnv(EXAMPLES, num_envs=12, seed=3)
    a.reset(), b.reset()
    assert np.array_equal(played_maps(a), played_maps(b))
    assert torch.equal(a.state["pos"], b.state["pos"])
    first = map_indices(3, np.arange(12), 0, 3)
    assert len(set(first.tolist())) > 1  # environments of one batch play different maps
    other = map_indices(4, np.arange(12), 0, 3)
    assert not np.array_equal(first, other)  # another seed, another assignment
    # environment 5 alone (first_env_index=5) plays what it plays inside the batch
    alone = UAVSwarmEnv(EXAMPLES, num_envs=1, seed=3, first_env_index=5)
    alone.reset()
    assert np.array_equal(played_maps(alone)[0], played_maps(a)[5])


def test_random_map_settings_play_no_part_with_a_map_set():
    a = UAVSwarmEnv(EXAMPLES, num_envs=6, seed=1)
    b = UAVSwarmEnv(EXAMPLES.replace(num_obstacles=3, obstacle_min_size=2, obstacle_max_size=3), num_envs=6, seed=1)
    assert torch.equal(a.reset()["local"], b.reset()["local"])


def pocket_set(folder: Path, cfg: EnvConfig) -> str:
    """A set of an open map and a pocket: the launch area alone is free, so its episodes end at once."""
    folder.mkdir()
    pocket = np.ones((cfg.grid_height, cfg.grid_width), dtype=bool)
    pocket[: cfg.launch_size, : cfg.launch_size] = False
    np.save(folder / "pocket.npy", pocket)
    np.save(folder / "open.npy", np.zeros_like(pocket))
    return str(folder)


@pytest.mark.parametrize("autoreset_mode", AUTORESET_MODES)
def test_prepared_starts_stay_exact_on_maps_that_end_episodes_at_once(tmp_path, autoreset_mode):
    # On random maps the default task's episodes take >= 18 steps; the pocket ends one in 1 step,
    # so the env must prepare its starts every step, and mask a launch that meets the target.
    cfg = EnvConfig(max_steps=40)
    cfg = cfg.replace(maps=pocket_set(tmp_path / "maps", cfg))
    env = UAVSwarmEnv(cfg, num_envs=2, reset_mode="prepared", autoreset_mode=autoreset_mode)
    assert env.prepare_period == 1 + (autoreset_mode == "next_step")
    assert run_lockstep(cfg, 6, 2, 90, "prepared", autoreset_mode=autoreset_mode) >= 6


def test_a_map_set_env_reports_a_bad_set_when_built(tmp_path):
    (tmp_path / "bad.txt").write_text("#" * 32 + "\n")
    with pytest.raises(ValueError, match=r"bad\.txt is 1x32 cells"):
        UAVSwarmEnv(EnvConfig(maps=str(tmp_path)), num_envs=1)


def test_the_map_set_step_compiles_as_one_graph_and_plays_the_eager_episodes():
    # No graph break means no host read and no data-dependent shape: the map pick is a gather.
    import torch._dynamo
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    cfg = EXAMPLES.replace(max_steps=6)
    kwargs = dict(num_envs=4, seed=2, reset_mode="prepared", check_action_range=False)
    eager, compiled = UAVSwarmEnv(cfg, **kwargs), UAVSwarmEnv(cfg, **kwargs)
    eager.reset(), compiled.reset()
    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(compiled.step, fullgraph=True, backend=counter)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3 * cfg.max_steps):  # episodes end and restart on other maps
        actions = torch.randint(0, cfg.num_actions, (4, cfg.num_uavs), generator=gen)
        want, got = eager.step(actions), step(actions)
        assert torch.equal(want[0]["local"], got[0]["local"]) and torch.equal(want[1], got[1])
    assert counter.frame_count <= 3
    assert np.array_equal(played_maps(eager), played_maps(compiled))
    torch._dynamo.reset()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_map_set_on_cuda_matches_the_cpu_and_its_prepared_step_never_syncs():
    cfg = EXAMPLES.replace(max_steps=30)
    gen = torch.Generator().manual_seed(0)
    actions = torch.randint(0, cfg.num_actions, (70, 64, cfg.num_uavs), generator=gen)
    cpu = UAVSwarmEnv(cfg, num_envs=64, device="cpu", seed=5, check_action_range=False)
    gpu = UAVSwarmEnv(cfg, num_envs=64, device="cuda", seed=5, check_action_range=False)
    assert torch.equal(cpu.reset()["local"], gpu.reset()["local"].cpu())
    gpu_actions = actions.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # 70 steps: every env restarts twice, on the set's maps
    outs = []
    try:
        for a in gpu_actions:
            obs, reward, *_ = gpu.step(a)
            outs.append((obs["local"].clone(), reward.clone()))  # copies on the device: no sync
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for a, (local, reward) in zip(actions, outs):
        obs, want, *_ = cpu.step(a)
        assert torch.equal(obs["local"], local.cpu()) and torch.equal(want, reward.cpu())
