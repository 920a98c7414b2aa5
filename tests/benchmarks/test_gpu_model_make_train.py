"""The GPU model's `make train` prediction: the run read from the config files, its phases from
counts at the run's batch (hand-made cases), and the committed report as this code's arithmetic."""

import json

import pytest

from benchmarks import gpu_model as gm
from benchmarks import gpu_model_arithmetic as arithmetic
from benchmarks import gpu_model_make_train as make_train

C = arithmetic.Constants(
    launch_eager_us=20.0,
    launch_compiled_us=10.0,
    launch_replayed_us=2.0,
    launch_planner_us=5.0,
    sync_us=50.0,
    bw_fraction=0.5,
    mm_efficiency=0.25,
    process_s=10.0,
)


def counts(kernels, syncs=0, nbytes=0, flops=0, **extra):
    return {"kernels": kernels, "syncs": syncs, "bytes": nbytes, "flops": flops, **extra}


def test_the_gpu_recipe_is_read_from_its_config_files():
    cfg = make_train.recipe_config("gpu")
    shape = make_train.run_shape(cfg)
    assert (shape["envs"], shape["steps"]) == (cfg.env.num_envs, cfg.train.num_steps)
    assert shape["iterations"] == cfg.train.total_env_steps // (shape["envs"] * shape["steps"])
    assert (shape["epochs"], shape["minibatches"]) == (cfg.train.update_epochs, cfg.train.num_minibatches)
    im = shape["imitation"]
    assert im["demo_envs"] >= 2048  # issue 48: demonstrations and DAgger at >= 2,048 environments a call
    assert im["demo_envs"] * im["demo_steps"] >= cfg.imitation.env_steps
    assert im["frames"] == [(im["demo_steps"] + r * im["dagger_steps"]) * im["demo_envs"] for r in range(3)]
    assert im["minibatch_steps"] == cfg.imitation.minibatch_steps
    # an override reaches the shape as it would reach a run; the preset at 256 envs is the old recipe
    eight = make_train.run_shape(make_train.recipe_config("gpu", ["train.num_steps=8", "train.num_minibatches=4"]))
    assert (eight["steps"], eight["minibatches"]) == (8, 4)
    assert eight["iterations"] == cfg.train.total_env_steps // (shape["envs"] * 8)
    assert make_train.run_shape(make_train.recipe_config("preset-256"))["envs"] == 256
    with pytest.raises(ValueError, match="unknown recipe"):
        make_train.recipe_config("tpu")


def iteration(per_minibatch=30):
    """Hand-made small-shape counts: 100 + 7 per step kernels at 2 epochs x 4 minibatches, and the
    first shape again at 8 minibatches (``per_minibatch`` more kernels and 1,000 more bytes each)."""
    it = {}
    for e, t in ((16, 18), (32, 18), (16, 36)):
        it[f"{e}x{t}"] = counts(100 + 7 * t, 0, 1000 + 5 * e * t, 2 * e * t, envs=e, steps=t)
    it["epochs"], it["minibatches"] = 2, 4
    base = it["16x18"]
    more = 2 * 4 * per_minibatch  # 2 epochs x 4 more minibatches
    it["minibatches_x2"] = counts(
        base["kernels"] + more, 0, base["bytes"] + 8 * 1000, base["flops"], envs=16, steps=18, minibatches=8
    )
    return it


def test_a_changed_shape_is_predicted_from_the_fit_and_the_per_minibatch_share():
    lc = {"iteration": iteration()}
    share = make_train.minibatch_share(lc["iteration"])
    assert share == pytest.approx({"kernels": 30, "syncs": 0, "bytes": 1000, "flops": 0})
    shape = {"envs": 64, "steps": 10, "epochs": 2, "minibatches": 4}
    whole, rollout, source = make_train.ppo_iteration(lc, shape)
    assert source.startswith("fitted") and rollout == pytest.approx(70)
    assert whole == pytest.approx(counts(170, 0, 1000 + 5 * 640, 2 * 640))
    # two more minibatches in each of 2 epochs: 4 x 30 kernels, 4 x 1,000 bytes
    whole6, _, _ = make_train.ppo_iteration(lc, shape | {"minibatches": 6})
    assert whole6 == pytest.approx(counts(170 + 120, 0, 1000 + 5 * 640 + 4000, 2 * 640))
    with pytest.raises(ValueError, match="epochs"):
        make_train.ppo_iteration(lc, shape | {"epochs": 3})
    # the count at the run's own shape wins where it was taken there
    lc["run_iteration"] = {**shape, "rollout": counts(50), "update": counts(400, 0, 10), "rest": counts(3, 1)}
    whole, rollout, source = make_train.ppo_iteration(lc, shape)
    assert source == "counted at the run's shape" and rollout == 50
    assert whole == counts(453, 1, 10, 0)
    assert make_train.ppo_iteration(lc, shape | {"steps": 20})[2].startswith("fitted")


def hand_made_run():
    """A learn count and the shape of a run: 2 iterations of 64 x 10, 2 x 4 minibatches; 3
    demonstration calls of 8 envs, 1 DAgger round of 2 calls; cloning 2 epochs of 512 frames then 1
    of 768, at 256 frames a minibatch (counted also at 1,024); no evaluations."""
    lc = {
        "iteration": iteration(),
        "run_iteration": {
            **{"envs": 64, "steps": 10, "epochs": 2, "minibatches": 4},
            **{"rollout": counts(500), "update": counts(1000), "rest": counts(0, 2)},
        },
        "imitation": {
            "demo_envs": 8,
            "demo_call": counts(1000, 4),
            "dagger_policy_step": counts(100),
            "clone_minibatch": counts(50, 0, 1e9, 0, rows_per_minibatch=256),
            "clone_minibatch_x4": counts(50, 0, 4e9, 0, rows_per_minibatch=1024),
        },
    }
    shape = {"envs": 64, "steps": 10, "iterations": 2, "env_steps": 1280, "epochs": 2, "minibatches": 4}
    shape |= {"eval_interval": 0}
    shape["imitation"] = {
        "demo_envs": 8,
        "demo_steps": 3,
        "dagger_rounds": 1,
        "dagger_steps": 2,
        "epochs": [2, 1],
        "frames": [512, 768],
        "minibatch_steps": 256,
        "min_accuracy_gain": 0.0,
    }
    return lc, shape


def test_a_recipe_adds_its_phases_from_counts_at_its_batch():
    lc, shape = hand_made_run()
    parts = make_train.recipe_parts(lc, shape, "H100 SXM", C)
    assert list(parts) == [
        "process (start-up, checkpoints, shut-down)",
        "imitation: demonstrations (planner calls)",
        "imitation: DAgger (planner calls + policy steps)",
        "imitation: cloning",
        "PPO iterations",
    ]  # eval_interval 0: no evaluations, nor the planners' reference episodes
    sec = {k: v["seconds"] for k, v in parts.items()}
    assert sec["process (start-up, checkpoints, shut-down)"] == 10.0
    # a planner call: 1,000 ops at 5 us + 4 syncs at 50 us = 5.2 ms; DAgger adds 100 kernels at 20 us
    assert sec["imitation: demonstrations (planner calls)"] == pytest.approx(3 * 5.2e-3)
    assert sec["imitation: DAgger (planner calls + policy steps)"] == pytest.approx(2 * 7.2e-3)
    # 2 x 2 + 1 x 3 = 7 minibatches of max(50 x 20 us, 1 GB / (0.5 x 3.35 TB/s)) + 3 epochs' reads
    mb = max(1e-3, 1e9 / (0.5 * 3.35e12))
    assert sec["imitation: cloning"] == pytest.approx(7 * mb + 3 * 50e-6)
    # an iteration: 1,500 kernels at 20 us + 2 syncs; its rollout's launches 500 x 20 us
    assert sec["PPO iterations"] == pytest.approx(2 * (0.03 + 1e-4))
    assert parts["PPO iterations"]["rollout launches"] == pytest.approx(2 * 0.01)
    assert arithmetic.total(parts)["seconds"] == pytest.approx(sum(sec.values()))
    # replayed: 2 us a kernel
    replayed = make_train.recipe_parts(lc, shape, "H100 SXM", C, launch="replayed", clone_launch="replayed")
    assert replayed["PPO iterations"]["seconds"] == pytest.approx(2 * (3e-3 + 1e-4))
    assert replayed["imitation: cloning"]["seconds"] == pytest.approx(7 * max(1e-4, 1e9 / 1.675e12) + 3 * 50e-6)


def test_cloning_minibatches_of_another_size_scale_bytes_not_kernels():
    lc, shape = hand_made_run()
    im = lc["imitation"]
    at = make_train.clone_minibatch_at(im, 512)  # a third of the way from 256 to 1,024 frames
    assert at == pytest.approx(counts(50, 0, 2e9, 0))
    shape["imitation"]["minibatch_steps"] = 512  # 2 x 1 + 1 x 1 minibatches
    parts = make_train.recipe_parts(lc, shape, "H100 SXM", C)
    assert parts["imitation: cloning"]["seconds"] == pytest.approx(3 * 2e9 / 1.675e12 + 3 * 50e-6)
    # what an epoch adds beyond its minibatches, where counted: 3 epochs x (20 kernels at 20 us + its read)
    im["clone_minibatch"]["epoch"] = counts(20, 0, 0, 0)
    with_epoch = make_train.recipe_parts(lc, shape, "H100 SXM", C)["imitation: cloning"]["seconds"]
    assert with_epoch - parts["imitation: cloning"]["seconds"] == pytest.approx(3 * 20 * 20e-6)
    del im["clone_minibatch_x4"]
    with pytest.raises(ValueError, match="count again"):
        make_train.clone_minibatch_at(im, 512)


def test_a_stale_count_says_to_count_again():
    lc, shape = hand_made_run()
    shape["imitation"]["demo_envs"] = 16
    with pytest.raises(ValueError, match="planner counted at 8 envs"):
        make_train.recipe_parts(lc, shape, "H100 SXM", C)
    lc, shape = hand_made_run()
    shape["eval_interval"] = 100
    with pytest.raises(ValueError, match="eval_interval 0"):
        make_train.recipe_parts(lc, shape, "H100 SXM", C)


def test_merge_folds_new_counts_into_the_old_and_replaces_the_working_trees(tmp_path):
    old = {"env": {"abc": {"x": 1}}, "trainer": {}, "learn": {"abc": {"y": 2}, "today": {"z": 3}}}
    (tmp_path / "learn-today-gpu.json").write_text(json.dumps({"what": "learn", "commit": "def", "counts": {"a": 1}}))
    (tmp_path / "trainer-1.json").write_text(json.dumps({"what": "trainer", "commit": "fed", "counts": {"b": 2}}))
    out = gm.merge(tmp_path, old)
    assert out["env"] == {"abc": {"x": 1}} and out["trainer"] == {"fed": {"b": 2}}
    assert out["learn"] == {"abc": {"y": 2}, "today-gpu": {"a": 1, "commit": "def"}}  # the older 'today' dropped
    assert old["learn"]["today"] == {"z": 3}  # the given counts are not changed in place


def test_the_committed_make_train_prediction_is_this_codes_arithmetic():
    committed = json.loads(gm.COUNTS.read_text())
    report = json.loads(gm.OUT.with_suffix(".json").read_text())
    c = arithmetic.Constants(**report["constants"])
    mt = report["make_train"]
    assert set(mt["recipes"]) == set(make_train.RECIPES) and mt["target_s"] == make_train.TARGET_S
    for name, entry in mt["recipes"].items():
        lc = committed["learn"][f"today-{name}"]
        shape = make_train.run_shape(make_train.recipe_config(name))
        assert entry["shape"] == shape, f"{name}: the config changed; run `python -m benchmarks.gpu_model` again"
        assert set(entry["gpus"]) == set(make_train.MAKE_TRAIN_GPUS)
        for gpu, got in entry["gpus"].items():
            parts = make_train.recipe_parts(lc, shape, gpu, c)
            assert got["seconds"] == pytest.approx(arithmetic.total(parts)["seconds"])
            assert got["seconds"] == pytest.approx(sum(p["seconds"] for p in got["parts"].values()))
            assert "PPO iterations" in got["parts"] and "process (start-up, checkpoints, shut-down)" in got["parts"]
    assert not any(k.startswith("in-training") for k in mt["recipes"]["gpu"]["gpus"]["H100 SXM"]["parts"])
    assert set(mt["designs"]) == set(make_train.DESIGNS)
    base = mt["designs"]["as configured (PPO and cloning eager)"]
    for gpu in make_train.MAKE_TRAIN_GPUS:
        assert base[gpu]["seconds"] == pytest.approx(mt["recipes"]["gpu"]["gpus"][gpu]["seconds"])
        # a graph's replay launches cheaper than eager dispatch, so it can only shorten the run
        assert mt["designs"]["PPO iterations replayed as CUDA graphs"][gpu]["seconds"] < base[gpu]["seconds"]


def test_the_counts_of_the_working_tree_agree_with_the_models_assumptions():
    committed = json.loads(gm.COUNTS.read_text())
    for name in make_train.RECIPES:
        lc = committed["learn"][f"today-{name}"]
        ri, it, im = lc["run_iteration"], lc["iteration"], lc["imitation"]
        # the small-shape fit predicts the count at the run's own shape: bytes and FLOPs within 1 %,
        # kernels within 5 % (the staggered episodes' resets differ between 16 and thousands of envs)
        fitted = arithmetic.iteration_counts(it, ri["envs"], ri["steps"])
        whole = {k: sum(ri[p][k] for p in ("rollout", "update", "rest")) for k in make_train.COUNT_KEYS}
        assert fitted["bytes"] == pytest.approx(whole["bytes"], rel=0.01), name
        assert fitted["flops"] == pytest.approx(whole["flops"], rel=0.01), name
        assert fitted["kernels"] == pytest.approx(whole["kernels"], rel=0.05), name
        # one more minibatch costs at most what the run's own minibatches cost on average (theirs carry
        # GAE's and the clone's log-probabilities too), and most of it
        per = ri["update"]["kernels"] / (ri["epochs"] * ri["minibatches"])
        assert 0.8 * per < make_train.minibatch_share(it)["kernels"] <= per, name
        # cloning minibatches launch the same kernels at both counted sizes; the planner at the run's batch
        assert im["clone_minibatch"]["kernels"] == im["clone_minibatch_x4"]["kernels"], name
        assert im["demo_call"]["envs"] == im["demo_envs"], name
        # issue 48: one host read a planner call; the rest are the demonstration env's (its action-range
        # check, which `warm_start`'s env keeps on, and a rebuild step's)
        assert im["demo_call"]["syncs"] <= 3, name
