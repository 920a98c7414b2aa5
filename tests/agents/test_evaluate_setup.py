"""`python -m agents.evaluate RUN --env KEY=VALUE ... --maps PATH`: the run's task with overrides,
checked like the training config's; every policy on the same task and maps; the meta records
them; an actor that cannot play the task (a one-hot id sized to the training team) says why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from agents import evaluate, train_mappo
from agents.config import load_config
from agents.config.actor_fit import check_actor_fits
from agents.evaluate.setup import untrained_roles_note, with_task
from agents.run import checkpoint as ckpt
from tests.agents.conftest import TINY, tiny_config
from uavsim.env import UAVSwarmEnv
from uavsim.maps import load_map_set, map_indices
from uavsim.scripted import make_scripted


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny trained run (8x8 grid, 2 UAVs, launch 2x2, local actor with a one-hot agent id)."""
    run = tmp_path_factory.mktemp("evaluate_setup") / "run"
    threads = torch.get_num_threads()
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    torch.set_num_threads(threads)  # the run set its own
    return run


def write_maps(folder, count=3, size=8):
    """``count`` maps of ``size`` x ``size``: a wall of growing length, the 2x2 launch area free."""
    folder.mkdir()
    for i in range(count):
        rows = ["." * size for _ in range(size)]
        rows[4] = "#" * (2 + i) + "." * (size - 2 - i)
        (folder / f"map{i}.txt").write_text("\n".join(rows) + "\n")
    return folder


def test_env_overrides_are_checked_like_config_overrides():
    cfg = tiny_config()
    task = with_task(cfg, ["grid_height=10", "grid_width=12", "max_steps=30"], None)
    assert (task.env.grid_height, task.env.grid_width, task.env.max_steps) == (10, 12, 30)
    assert task.env_config().num_uavs == cfg.env.num_uavs  # the rest is the run's
    with pytest.raises(ValueError, match=r"--env 'bogus=3': unknown env key 'bogus'; EnvConfig keys: grid_height"):
        with_task(cfg, ["bogus=3"], None)
    with pytest.raises(ValueError, match=r"unknown env key 'num_envs'"):  # --episodes sets the batch
        with_task(cfg, ["num_envs=3"], None)
    with pytest.raises(ValueError, match=r"--env 'grid_height': expected KEY=VALUE"):
        with_task(cfg, ["grid_height"], None)
    with pytest.raises(TypeError, match=r"config key 'env.num_uavs'.*'abc'"):
        with_task(cfg, ["num_uavs=abc"], None)
    with pytest.raises(ValueError, match=r"EnvConfig.launch_size must be <= the smaller grid side \(8\)"):
        with_task(cfg, ["launch_size=9"], None)
    assert with_task(cfg, [], "my maps/#1").env.maps == "my maps/#1"  # a path, not a YAML scalar
    # a size-agnostic run takes lists in its config; --env's would have played the largest group alone, recorded
    # in the results as if every size had been
    mixed = load_config(Path(__file__).resolve().parents[2] / "configs" / "size_agnostic.yaml", [])
    with pytest.raises(ValueError, match=r"--env 'num_uavs=\[3,4\]': one value per key .*got a list"):
        with_task(mixed, ["num_uavs=[3,4]"], None)
    assert with_task(mixed, ["num_uavs=7"], None).env.num_uavs == 7


def test_roles_the_run_never_trained_are_named():
    # UAV i plays role i mod K: teams of 3 and 5 never trained roles 5-7, and a 7-UAV team played them silently
    preset = Path(__file__).resolve().parents[2] / "configs" / "size_agnostic.yaml"
    small = load_config(preset, ["env.num_uavs=[3,5]"])
    assert untrained_roles_note(small, with_task(small, ["num_uavs=7"], None)) == (
        "note: 7 UAVs play roles 0-6 of model.agent_roles=8, but the run trained teams of 3, 5 UAVs: roles 5-6 "
        "were never trained (docs/training.md, roles)"
    )
    assert "roles 5-7 were never trained" in untrained_roles_note(small, with_task(small, ["num_uavs=16"], None))
    assert untrained_roles_note(small, with_task(small, ["num_uavs=4"], None)) is None
    preset_cfg = load_config(preset, [])  # teams of 6, 8 and 12: every role of 8 trained
    assert untrained_roles_note(preset_cfg, with_task(preset_cfg, ["num_uavs=16"], None)) is None


def test_the_actor_plays_other_grids_but_not_other_teams_with_its_one_hot_id():
    trained = tiny_config().env_config()
    model = tiny_config().model
    check_actor_fits(trained, trained.replace(grid_height=48, grid_width=40, max_steps=99), model)
    with pytest.raises(ValueError, match=r"one-hot agent id sized to the training team of num_uavs=2"):
        check_actor_fits(trained, trained.replace(num_uavs=4), model)
    check_actor_fits(trained, trained.replace(num_uavs=4), tiny_config("model.agent_id=false").model)
    with pytest.raises(ValueError, match=r"local observation of 78 floats, this task's 30: obs_radius=2, not 1"):
        check_actor_fits(trained, trained.replace(obs_radius=1), model)
    with pytest.raises(ValueError, match=r"78 floats, this task's 83: window_paths=False, not True"):
        check_actor_fits(trained, trained.replace(window_paths=True), model)
    with pytest.raises(ValueError, match=r"comm_radius=None, not 0 \(the onboard memory's part\)"):
        check_actor_fits(trained, trained.replace(comm_radius=0), model)
    remembers = trained.replace(comm_radius=0)
    with pytest.raises(ValueError, match=r"state_pool=4, not 2"):
        check_actor_fits(remembers, remembers.replace(state_pool=2), model)
    check_actor_fits(remembers, remembers.replace(comm_radius=8), model)  # the range shapes nothing
    with pytest.raises(ValueError, match=r"moves=4 moves, not moves=8"):
        check_actor_fits(trained, trained.replace(moves=8), model)
    shared = tiny_config("model.actor_shared_map=true").model
    with pytest.raises(ValueError, match=r"state_pool=4 blocks, not 2"):
        check_actor_fits(trained, trained.replace(state_pool=2), shared)


def test_evaluate_with_env_overrides_plays_the_larger_grid_and_records_them(tiny_run, tmp_path):
    out = tmp_path / "eval.json"
    argv = [str(tiny_run), "--episodes", "3", "--seed", "5", "--out", str(out)]
    assert evaluate.main([*argv, "--env", "grid_height=10", "grid_width=12", "--env", "max_steps=9"]) == 0
    result = json.loads(out.read_text())
    meta = result["meta"]
    assert meta["env_overrides"] == ["grid_height=10", "grid_width=12", "max_steps=9"] and meta["maps"] is None
    assert (meta["env"]["grid_height"], meta["env"]["grid_width"], meta["env"]["max_steps"]) == (10, 12, 9)
    assert all(len(result["coverage_curve"][name]["mean"]) == 10 for name in evaluate.POLICIES)


def test_evaluate_on_user_maps_plays_every_policy_on_them(tiny_run, tmp_path, capsys):
    maps = write_maps(tmp_path / "maps")
    out = tmp_path / "eval.json"
    assert evaluate.main([str(tiny_run), "--episodes", "6", "--seed", "5", "--out", str(out), "--maps", str(maps)]) == 0
    result = json.loads(out.read_text())
    meta = result["meta"]
    assert meta["env"]["maps"] == str(maps) and meta["env_overrides"] == [f"maps={maps}"]
    assert meta["maps"]["files"] == [str(maps / f"map{i}.txt") for i in range(3)]
    assert sum(meta["maps"]["episodes_per_map"]) == 6
    # the baselines played the map set: the greedy planner on the same env gives the same results
    env_cfg = tiny_config(f"env.maps={maps}").env_config()
    env = UAVSwarmEnv(env_cfg, num_envs=6, seed=5)
    greedy = make_scripted("greedy", env, 5)
    raw = evaluate.run_episodes(env, lambda obs: greedy(env))
    assert evaluate.summarize(raw) == result["greedy"]
    # per map: the episodes that drew it, each policy's results over those alone
    drawn = {f"map{i}.txt": k for i, k in enumerate(meta["maps"]["episodes_per_map"]) if k}
    assert {name: m["episodes"] for name, m in result["per_map"].items()} == drawn
    picked = map_indices(5, np.arange(6), 0, 3)
    for name, m in result["per_map"].items():
        mask = picked == int(name[3])
        assert m["greedy"] == evaluate.summarize({k: v[mask] for k, v in raw.items()})
        assert (
            m["paired_vs_greedy"]["policy"]["faster"]
            + m["paired_vs_greedy"]["policy"]["equal"]
            + m["paired_vs_greedy"]["policy"]["slower"]
            == m["episodes"]
        )
    printed = capsys.readouterr().out
    assert all(f"map {name}: {k} maps, reached 95 %: policy" in printed for name, k in drawn.items())
    blocked = env.state["cells"].view(6, 12, 12)[:, 2:-2, 2:-2] == 2  # pad 2 around the 8x8 map
    assert all(any(np.array_equal(b, m) for m in load_map_set(maps, env_cfg).blocked) for b in blocked.numpy())


def test_evaluate_refuses_tasks_the_actor_cannot_play_and_bad_maps(tiny_run, tmp_path, capsys):
    argv = [str(tiny_run), "--episodes", "2", "--out", str(tmp_path / "eval.json")]
    assert evaluate.main([*argv, "--env", "num_uavs=3"]) == 2
    err = capsys.readouterr().err
    assert "error: the checkpoint's actor cannot play this task" in err and "training team of num_uavs=2" in err
    assert evaluate.main([*argv, "--env", "no_such_key=1"]) == 2
    assert "unknown env key 'no_such_key'" in capsys.readouterr().err
    big = write_maps(tmp_path / "big", count=1, size=10)
    assert evaluate.main([*argv, "--maps", str(big)]) == 2
    assert "map0.txt is 10x10 cells" in capsys.readouterr().err
    assert evaluate.main([*argv, "--maps", str(big), "--env", "grid_height=10", "grid_width=10"]) == 0
    assert not (tmp_path / "nowhere").exists()
    assert evaluate.main([*argv, "--maps", str(tmp_path / "nowhere")]) == 2
    assert "does not exist: expected a map file or a folder" in capsys.readouterr().err
    assert evaluate.main([*argv, "--env", f"maps={tmp_path / 'nowhere'}"]) == 2  # the user's path, not the run's
    assert f"error: --env maps={tmp_path / 'nowhere'} is not found" in capsys.readouterr().err


def test_a_run_trained_on_a_map_set_is_evaluated_on_it(tmp_path):
    maps = write_maps(tmp_path / "maps")
    run = tmp_path / "run"
    threads = torch.get_num_threads()
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}", f"env.maps={maps}"]) == 0
    torch.set_num_threads(threads)
    out = tmp_path / "eval.json"
    assert evaluate.main([str(run), "--episodes", "2", "--out", str(out)]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["env"]["maps"] == str(maps) and meta["env_overrides"] == [] and len(meta["maps"]["files"]) == 3
    cfg = load_config(run / "config.yaml")
    for generated in ("null", "~", " null "):  # generated maps: what the run never played
        assert with_task(cfg, [f"maps={generated}"], None).env.maps is None
    assert with_task(cfg, [f"maps= {maps} "], None).env.maps == str(maps)  # stripped, as a YAML value was


def test_a_run_trained_on_a_relative_map_path_is_evaluated_from_anywhere(tmp_path, monkeypatch, capsys):
    write_maps(tmp_path / "maps")
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    assert train_mappo.main([*TINY, "train.total_env_steps=32", "run.dir=run", "env.maps=maps"]) == 0
    torch.set_num_threads(threads)
    assert load_config(tmp_path / "run" / "config.yaml").env.maps == str(tmp_path / "maps")  # recorded whole
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "eval.json"
    assert evaluate.main([str(tmp_path / "run"), "--episodes", "2", "--out", str(out)]) == 0
    # a run that recorded the path as typed (before 2026-12-05), evaluated from another directory: say so
    newest = ckpt.list_checkpoints(tmp_path / "run")[-1]
    payload = ckpt.load_checkpoint(newest)
    payload["config"]["env"]["maps"] = "maps"
    newest.unlink()
    ckpt.save_checkpoint(tmp_path / "run", payload, keep=5)
    assert evaluate.main([str(tmp_path / "run"), "--episodes", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the run's map set env.maps=maps is not found from" in err and "relative to where the run trained" in err
    assert "--maps PATH" in err
    assert evaluate.main([str(tmp_path / "run"), "--episodes", "2", "--out", str(out), "--maps", "../maps"]) == 0


def test_the_protocol_splits_fill_what_is_not_given():
    """--split picks the maps (validation: where recipes are chosen; test: where figures are
    reported); an explicit --seed or --episodes wins."""
    import argparse

    from agents.evaluate.setup import SPLITS, add_protocol_arguments, split_defaults, split_of

    p = argparse.ArgumentParser()
    add_protocol_arguments(p)
    for argv, want in [
        ([], (12345, 256)),
        (["--split", "test"], (20261126, 512)),
        (["--split", "test", "--episodes", "64"], (20261126, 64)),
        (["--seed", "7"], (7, 256)),
    ]:
        args = p.parse_args(argv)
        split_defaults(args)
        assert (args.seed, args.episodes) == want, argv
    assert SPLITS["test"][1] >= 512 and SPLITS["test"][0] != SPLITS["validation"][0]
    assert split_of(20261126, 512) == "test" and split_of(12345, 256) == "validation"  # named by numbers too
    assert split_of(20261126, 64) is None
    with pytest.raises(SystemExit):
        p.parse_args(["--split", "train"])


def test_a_size_agnostic_actor_plays_other_teams_and_grids_also_from_a_mixed_run():
    sizes = ("env.num_uavs=[2,3]", "env.grid_height=[8,10]", "env.grid_width=[8,10]")
    mixed = tiny_config("model.size_agnostic=true", "model.agent_id=false", *sizes)
    bigger = mixed.env_config().replace(num_uavs=16, launch_size=4, grid_height=48, grid_width=48)
    check_actor_fits(mixed.env_config(), bigger, mixed.model)
    task = with_task(mixed, ["num_uavs=16", "launch_size=4"], None)  # a scalar replaces the list
    assert [(c.num_uavs, c.grid_height) for c in task.env_configs()] == [(16, 8), (16, 10)]
    assert task.env_config().grid_height == 10  # still two map sizes: the largest is played


def test_a_run_trained_with_walls_on_some_maps_is_evaluated_with_one_wall_count():
    walls = ("env.grid_height=[8,10]", "env.grid_width=[8,10]", "env.num_walls=[2,0]")
    run = tiny_config(
        "model.size_agnostic=true", "model.agent_id=false", *walls, "env.wall_min_length=3", "env.wall_max_length=6"
    )
    for items in ([], ["grid_height=10", "grid_width=10"]):  # which maps a size's largest group has is no answer
        with pytest.raises(ValueError, match=r"env.num_walls=\[2, 0\].*--env num_walls=0"):
            with_task(run, items, None)
    task = with_task(run, ["grid_height=10", "grid_width=10", "num_walls=2"], None)
    assert task.env_config().num_walls == 2 and task.env_config().grid_height == 10


def test_a_runs_evaluate_env_is_played_first_and_the_command_line_wins(tmp_path, capsys):
    memory = ["env.comm_radius=0", "env.window_paths=true", "env.obs_radius=2"]
    run = tmp_path / "run"
    flags = [
        *TINY,
        *memory,
        "train.total_env_steps=32",
        f"run.dir={run}",
        "run.evaluate_env=[path_radius=4,max_steps=7]",
    ]
    assert train_mappo.main(flags) == 0
    capsys.readouterr()
    out = tmp_path / "eval.json"
    argv = [str(run), "--episodes", "2", "--seed", "5", "--out", str(out)]
    assert evaluate.main(argv) == 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["env_overrides"] == ["path_radius=4", "max_steps=7"]
    assert (meta["env"]["path_radius"], meta["env"]["max_steps"]) == (4, 7)
    assert evaluate.main([*argv, "--env", "path_radius=0"]) == 0  # the command line comes last: it wins
    meta = json.loads(out.read_text())["meta"]
    assert meta["env_overrides"] == ["path_radius=4", "max_steps=7", "path_radius=0"]
    assert (meta["env"]["path_radius"], meta["env"]["max_steps"]) == (0, 7)


@pytest.mark.parametrize(
    "items, message",
    [
        ("[path_radius]", "item 'path_radius': expected KEY=VALUE with an EnvConfig key"),
        ("[num_envs=4]", "item 'num_envs=4': expected KEY=VALUE with an EnvConfig key"),
        ("[obs_radius=3]", "obs_radius"),  # another window: the actor's input would change
        ("[path_radius=1]", "EnvConfig.path_radius must be >= obs_radius"),
        ("[path_radius=four]", "EnvConfig.path_radius must be an int"),
    ],
)
def test_a_bad_evaluate_env_fails_before_training_and_names_the_key(items, message, tmp_path, capsys):
    memory = ["env.comm_radius=0", "env.window_paths=true", "env.obs_radius=2"]
    assert train_mappo.main([*TINY, *memory, f"run.dir={tmp_path / 'run'}", f"run.evaluate_env={items}"]) == 2
    err = capsys.readouterr().err
    assert "run.evaluate_env" in err and message in err
    assert not (tmp_path / "run").exists()


def test_a_map_path_is_read_as_written_and_the_gif_plays_at_its_pace(tiny_run, tmp_path, capsys):
    from PIL import Image

    maps = write_maps(tmp_path / "maps #2")  # YAML would read " #2" as a comment: another folder
    out = tmp_path / "e" / "eval.json"
    argv = [str(tiny_run), "--episodes", "2", "--seed", "5"]
    assert evaluate.main([*argv, "--out", str(out), "--env", f"maps={maps}"]) == 0
    assert json.loads(out.read_text())["meta"]["env"]["maps"] == str(maps)
    with Image.open(out.with_suffix(".gif")) as gif:  # 12.5 frames a second, as the comparison GIF
        durations = []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
    assert durations[0] == 80 and all(d % 80 == 0 for d in durations)  # Pillow merges identical frames into one
    capsys.readouterr()
    for name in ("res.gif", "res.PNG"):  # the images are written beside the JSON, under its stem
        assert evaluate.main([*argv, "--out", str(tmp_path / name)]) == 2
        assert "the results' JSON path, not a" in capsys.readouterr().err
        assert not (tmp_path / name).exists()
