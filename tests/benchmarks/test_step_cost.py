"""The step-cost model: its counting rules on hand-checked ops, and --quick's schema and determinism."""

import json
from pathlib import Path

import pytest
import torch

from benchmarks import step_cost, trainer_cost
from benchmarks.op_count import OpCounter, operand_bytes

PRESETS = Path(__file__).resolve().parents[2] / "configs"


def test_the_counter_skips_views_and_counts_operands_whole():
    x = torch.zeros(4, 8)  # 128 bytes
    idx = torch.zeros(4, 2, dtype=torch.int64)  # 64 bytes
    with OpCounter() as c:
        v = x.view(8, 4).t().unsqueeze(0)[0]  # views only: no kernel, no bytes
        y = x + 1  # reads 128, writes 128
        x.add_(y)  # reads x and y, writes x: 3 x 128
        x.copy_(y)  # copy_ only writes its destination: 2 x 128
        g = x.gather(1, idx)  # reads x (128) and idx (64), writes 4 x 2 floats (32)
        bool((x > 0).any())  # gt (128 + 32), any (32 + 1) and a host read
    assert v.shape == (4, 8)
    assert c.kernels == 6 and c.host_syncs == 1
    assert c.bytes == 256 + 384 + 256 + 224 + 160 + 33
    assert c.by_op["aten.gather"] == [1, 224] and g.shape == (4, 2)
    assert c.top_ops(1) == [{"op": "aten.add_", "calls": 1.0, "bytes": 384.0}]


def test_a_reshape_that_copies_counts_the_copy_once():
    # reshape of a tensor it cannot view is a copy (clone) and then `_unsafe_view`, which launches
    # nothing although its schema does not mark it as a view.
    y = torch.zeros(4, 1, 8)  # 128 bytes
    with OpCounter() as c:
        rows = y.expand(4, 3, 8).reshape(12, 8)  # reads the 128 bytes the expanded view spans, writes 384
    assert rows.shape == (12, 8)
    assert c.kernels == 1 and c.bytes == 128 + 384


def test_index_copy_in_place_counts_the_rows_it_writes_not_its_whole_destination():
    storage = torch.zeros(64, 10, 8)  # 20,480 bytes
    row, index = torch.ones(1, 10, 8), torch.tensor([3])  # 320 bytes, 8 bytes
    with OpCounter() as c:
        storage.index_copy_(0, index, row)  # reads index and row, writes one row
        fresh = storage.index_copy(0, index, row)  # out of place: reads and writes all of it
    assert c.by_op["aten.index_copy_"] == [1, 8 + 320 + 320]
    assert c.by_op["aten.index_copy"] == [1, 20480 + 8 + 320 + 20480]
    assert storage[3].eq(1).all() and fresh[3].eq(1).all()


def test_an_overlapping_view_counts_the_memory_it_spans():
    base = torch.zeros(10, dtype=torch.uint8)
    assert operand_bytes(base.expand(5, 10)) == 10  # stride 0: the same 10 bytes five times
    assert operand_bytes(base.unfold(0, 4, 1)) == 10  # 7 windows of 4 over 10 bytes
    assert operand_bytes(torch.zeros(3, 4)[:, 1]) == 3 * 4
    assert operand_bytes(torch.zeros(0, 4)) == 0


def test_data_dependent_shapes_and_mask_indexing_are_host_syncs():
    x = torch.arange(6.0)
    with OpCounter() as c:
        x.nonzero()
        x[x > 2]
    assert c.host_syncs == 2


@pytest.mark.parametrize("kind", ["foreach", "for-loop", "fused"])
def test_an_optimizers_host_step_counter_is_neither_kernel_nor_sync_unless_it_lives_on_the_device(kind):
    weight = torch.nn.Parameter(torch.ones(4))
    kw = {"fused": True} if kind == "fused" else {"foreach": kind == "foreach"}
    opt = torch.optim.Adam([weight], lr=0.1, **kw)
    weight.grad = torch.ones(4)
    opt.step()  # the state made: the step under count is the run's steady one
    with OpCounter() as c:
        opt.step()
    adds = c.by_op["aten._foreach_add_"][0] + c.by_op["aten.add_"][0]
    # fused: step += 1 on the device (a GPU's kernel), nothing read back; the others: eps added once,
    # step += 1 and its .item() host work (a CPU tensor on CUDA too)
    assert adds == 1 and c.host_syncs == 0
    with OpCounter() as outside:  # the same read outside an optimizer's step is a sync
        opt.state[weight]["step"].item()
    assert outside.host_syncs == 1


def test_the_profilers_record_function_is_no_kernel():
    # a torch optimizer's step and zero_grad each open one, profiler on or off: on a GPU it launches nothing
    x = torch.ones(3)
    with OpCounter() as c:
        with torch.autograd.profiler.record_function("a region"):
            x.add(1)
    assert c.kernels == 1 and dict(c.by_op) == {"aten.add": [1, 24]}


def test_projection_is_the_smaller_of_the_two_bounds():
    rows = step_cost.projection(kernels=50, bytes_per_env_step=32 * 1024, launch_us=4.0)
    h100 = {r["envs"]: r for r in rows if r["gpu"] == "H100 SXM"}
    assert h100[4096]["launch_bound"] == pytest.approx(4096 / (50 * 4e-6))
    assert h100[4096]["bound_by"] == "launches" and h100[262144]["bound_by"] == "bandwidth"
    assert h100[262144]["ceiling"] == pytest.approx(3.35e12 / (32 * 1024))


def _counts(payload):
    return {name: {k: v for k, v in p.items()} for name, p in payload["paths"].items()}


def test_quick_run_writes_the_schema_and_counts_the_same_twice(tmp_path):
    first = step_cost.main(["--quick", "--out-dir", str(tmp_path / "a")])
    second = step_cost.main(["--quick", "--out-dir", str(tmp_path / "b")])
    assert set(first) == {"json", "md"} and first["json"].name.endswith("-quick.json")
    a, b = (json.loads(p["json"].read_text()) for p in (first, second))
    assert a["benchmark"] == "step_cost" and a["quick"] is True and a["settings"]["num_envs"] == 64
    names = set(a["paths"])
    assert {name for name, _ in step_cost.ENV_MODES} <= names
    assert {"policy step[fp32]", "policy step[bf16]", "rollout step[bf16]", "PPO minibatch[bf16]"} <= names
    assert any("rollout" in name for name in a["graph_breaks"])
    for name, p in a["paths"].items():
        assert p["kernels_min"] <= p["kernels_per_call"] <= p["kernels_max"] and p["kernels_per_call"] > 0
        assert p["bytes_per_env_step"] == pytest.approx(p["bytes_per_call"] / p["env_steps_per_call"])
        assert p["top_ops"] and all(o["bytes_per_env_step"] > 0 for o in p["top_ops"])
        assert a["graph_breaks"][name] == p["graph_breaks"]["breaks"] >= 0
        if not name.startswith("PPO") and "launches_per_call" not in p:  # the model's launches are eager ones
            assert len(p["projection"]) == len(step_cost.GPUS) * len(step_cost.PROJECTED_ENVS)
    for name in ("rollout step[bf16]", "PPO minibatch[bf16]"):  # captured: a few launches for the same kernels
        eager, captured = a["paths"][name], a["paths"][name.replace("]", ", captured]")]
        assert captured["graph_skips"] == [] and captured["graph_replays_per_call"] >= 1
        assert captured["launches_per_call"] < eager["kernels_per_call"] / 4, (name, captured["launches_per_call"])
    assert _counts(a) == _counts(b)  # counts are deterministic: projections and graph breaks too
    assert "| env.step[sparse] |" in first["md"].read_text()


@pytest.mark.parametrize(
    "argv", [["--num-envs", "0"], ["--steps", "0"], ["--launch-us", "0"], ["--env-only", "--fused"]]
)
def test_bad_arguments_are_rejected_before_any_run(tmp_path, argv):
    with pytest.raises(SystemExit):
        step_cost.main(["--quick", "--out-dir", str(tmp_path), *argv])
    assert not list(tmp_path.iterdir())


def test_the_gpu_safe_step_keeps_to_its_budget_on_the_default_task():
    # Issue 15's targets, counted by the model at 1,024 environments over one rebuild period of the
    # prepared starts: <= 60 kernels per step and <= 32 KiB per env-step for the GPU-safe step the
    # trainer can use (next_step autoreset, bfloat16 observations), and no host read in any
    # prepared mode. (Counts are deterministic; a change to the step that costs more fails here.)
    from uavsim import EnvConfig

    for name, kwargs in step_cost.ENV_MODES:
        if kwargs.get("reset_mode") != "prepared":
            continue
        env = step_cost.staggered_env(EnvConfig(), 1024, 100, **kwargs)
        steps = step_cost.whole_periods(1, env)
        actions = step_cost.random_actions(EnvConfig(), 1024, steps, env.device)
        counted = step_cost.count_calls(lambda i, env=env, actions=actions: env.step(actions[i]), steps, 1024)
        assert counted["host_syncs_per_call"] == 0, name
        assert counted["kernels_per_call"] <= 60, (name, counted["kernels_per_call"])
        if kwargs.get("autoreset_mode") == "next_step" and kwargs.get("obs_dtype") == torch.bfloat16:
            assert counted["bytes_per_env_step"] <= 32 * 1024, counted["bytes_per_env_step"]


def test_the_default_presets_env_step_keeps_to_its_count():
    # The env step of configs/default.yaml's task (13x13 windows, onboard memory, window paths), in
    # the env's default modes at 1,024 environments over one rebuild period of the prepared starts,
    # as the model counts it (`step_cost.preset_paths`): no host read, 100 kernels a step without a
    # rebuild, 108.1 on average, 368.9 KiB per env-step. Issue 48 found 229.4 kernels and 854.4 KiB:
    # the window paths' rounds were 8 int64 ops each (then 4 on int32 / int16 row bit sets, the row's
    # own dilation one table read: about 121 -> 63 kernels, 422 -> 103 KiB; now 3, on the window
    # turned by 45 degrees, uavsim.diamond_search: 143 -> 131 kernels), the memory's heading ~30
    # small ops (now 9, from per-cell tables), and the window was read twice (143 kernels, 502.8
    # KiB). The onboard memory is bit rows (uavsim.memory_bits: 10.6 KB per environment instead of
    # 16.8 KB, 13 rows per UAV read and written instead of 169 cells through int64 indices; 3.5
    # kernels more than the byte memory, 63 KiB less; 7.9 KB since the border rows are one spare
    # row: 405 -> 386 KiB). 126 -> 116 kernels: the heading's nearest block by one amin over keys
    # (-2), the diamond search's empty rows and a last all-cells set kept per shape and its open
    # rows built by the index_add (-5), one table read for a move's cells (-2), the penalties as
    # addcmul (-1). 116 -> 114: a move's cells and the memory's block counts each one index op by
    # [cell, action] and [column, row bits] (no add of a flat index). 114 -> 110: (t, covered) and
    # (max_steps, free) side by side in the record, one add, one division (into the observation) and
    # one comparison for both. 110 -> 108: the search's open and goal rows one product of the
    # observation's float32 (blocked, covered) channels (an addmm and a cast instead of a comparison,
    # a copy, a product and an index_add). 108 -> 107: the memory's sensing reads each UAV's rows and
    # its env's truth's in one index op (the truth follows the memories in the record). 107 -> 106
    # (0.9 KiB more): the per-block covered counts follow the grid in the record, one scatter adds to
    # both. 106 -> 104 (7.5 KiB more): one index op reads what the step needs of each UAV's new cell
    # (memory fields, heading keys, position: `Layout.cell_reads`), so the cells may be strided and one
    # `where` gives the moves. 104 -> 102 (0.3 KiB more: the table counted whole): the team reward one read
    # of a [free, newly] table (`dynamics.team_reward_table`) instead of a division, a product and a
    # subtraction. 102 -> 100 (6.2 KiB less): the heading's nearest block one argmin over int16
    # squared distances after a column for "none", its row read by [cell, block] (no key bits to
    # mask off), and the position and time one addcmul of the read (row, column, 0). Issue 48's
    # target is 100 kernels and 128 KiB; a change that costs more than today fails here.
    cfg = step_cost.preset_env_config()
    assert cfg.window_paths and cfg.comm_radius == 0 and cfg.obs_radius == 6
    env = step_cost.staggered_env(cfg, 1024, 100)
    steps = step_cost.whole_periods(1, env)
    actions = step_cost.random_actions(cfg, 1024, steps, env.device)
    counted = step_cost.count_calls(lambda i: env.step(actions[i]), steps, 1024)
    assert counted["host_syncs_per_call"] == 0
    assert counted["kernels_min"] == 100, counted["kernels_min"]
    assert counted["kernels_per_call"] <= 108.2, counted["kernels_per_call"]
    assert counted["bytes_per_env_step"] <= 368.9 * 1024, counted["bytes_per_env_step"] / 1024


@pytest.mark.parametrize(
    "config, budget_kib",
    [(trainer_cost.TRAINER_CONFIG, 40), (PRESETS / "shared_map.yaml", 48), (PRESETS / "default.yaml", 36)],
    ids=["trainer_config", "shared_map", "default"],
)
def test_the_policy_step_keeps_to_its_budget(config, budget_kib):
    # The trainer's bf16 policy step (1,024 environments), as counted by the model. The config the
    # committed step_cost results count (benchmarks/trainer_config.yaml: the communicating recipe
    # until 2026-11-25, 7x7 window): 99.4 KiB per env-step before the heading was computed from
    # integer tables and the narrow inputs (heading, agent id) shared one product; 51.5 after; 39.3
    # once the GEMMs accumulate in place and apply the ReLUs in their epilogues (issue 15; target 24,
    # see docs/performance.md). The communicating preset now (13x13 window): 46.7. The decentralized
    # default (13x13 window, no shared map): 31.0; 33.7 since its observation carries the onboard
    # memory (641 inputs instead of 510, issue 30); 33.8 with its window paths (646 inputs). A change
    # that costs more fails here.
    from agents.algo.rollout import agent_ids

    learner = trainer_cost.learner_for(1024, 2, "bf16", 100, config=config)
    assert (learner.actor.heading is not None) == (config.name != "default.yaml")
    agent = agent_ids(1024, learner.env.num_uavs, learner.env.device)
    with torch.no_grad():
        counted = step_cost.count_calls(
            lambda i: learner.actor.act(learner.obs, agent, learner.action_noise, learner.autocast), 2, 1024
        )
    assert counted["host_syncs_per_call"] == 0
    assert counted["bytes_per_env_step"] <= budget_kib * 1024, counted["bytes_per_env_step"]


def test_the_fused_count_of_the_policy_step_is_deterministic_and_meets_the_24_kib_target():
    # inductor's own count (benchmarks/fused_count.py) of the trainer config's bf16 policy step at
    # 1,024 environments as `train.compile_rollout` compiles it (`Form.fused`), twice: issue 15's
    # target (<= 24 KiB per env-step), below the eager form compiled alike and the eager count.
    from agents.algo.layers import Form
    from agents.algo.networks import with_form
    from agents.algo.rollout import agent_ids
    from benchmarks.fused_count import fused_count

    learner = trainer_cost.learner_for(1024, 2, "bf16", 100)
    agent = agent_ids(1024, learner.env.num_uavs, learner.env.device)
    args = (learner.obs, agent, learner.action_noise, learner.autocast)
    pointwise = torch.no_grad()(with_form(learner.actor, Form.fused).act)
    chain = torch.no_grad()(learner.actor.act)
    first, second = (fused_count(pointwise, *args, env_steps_per_call=1024) for _ in range(2))
    assert first == second and first["kernels_per_call"] > 0
    assert first["bytes_per_env_step"] <= 24 * 1024, first
    compiled_chain = fused_count(chain, *args, env_steps_per_call=1024)
    assert first["bytes_per_env_step"] < compiled_chain["bytes_per_env_step"]
    eager = step_cost.count_calls(lambda i: chain(*args), 1, 1024)
    assert first["kernels_per_call"] < eager["kernels_per_call"] / 2
    assert first["bytes_per_env_step"] < eager["bytes_per_env_step"]
