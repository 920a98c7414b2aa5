"""The baselines' results kept between evaluations (`agents.evaluate.baseline_cache`): read back
they give the same results and drawn episodes as played; any change of what they depend on plays
them again; a broken file is played again with a warning; a failed write leaves no file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import uavsim
from agents.algo.networks import make_actor
from agents.evaluate import BASELINES, RECORDED, baseline_cache, episodes, evaluate_all
from agents.evaluate.baseline_cache import BaselineCache, baseline_key, default_cache_dir, source_digest
from agents.evaluate.report import nan_to_none
from tests.agents.conftest import TINY, tiny_config

CPU = torch.device("cpu")
CFG = tiny_config()
ACTOR = make_actor(CFG.env_config(), CFG.model, torch.Generator().manual_seed(0))


@pytest.fixture
def planner_calls(monkeypatch):
    """`[name, ...]` of every scripted policy built from now on (each played or drawn episode builds one)."""
    calls, make = [], episodes.make_scripted

    def counted(name, env, *args, **kwargs):
        calls.append(name)
        return make(name, env, *args, **kwargs)

    monkeypatch.setattr(episodes, "make_scripted", counted)
    return calls


def evaluate(cache=None, env_cfg=None, maps=6, seed=3, record=True):
    return evaluate_all(ACTOR, env_cfg or CFG.env_config(), maps, seed, CPU, record=record, cache=cache)


def as_json(results: dict) -> str:
    """The JSON `write_report` writes of `results` (NaN as null: NaN != NaN in a dict comparison)."""
    return json.dumps(nan_to_none(results), indent=2)


def same_frames(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(
        len(a[k]) == len(b[k]) and all(np.array_equal(x, y) for x, y in zip(a[k], b[k])) for k in a
    )


def test_cached_baselines_give_the_results_and_drawn_episodes_played_ones_give(tmp_path, planner_calls):
    fresh, fresh_frames = evaluate()
    assert sorted(planner_calls) == sorted([*BASELINES, *(b for b in BASELINES if b in RECORDED)])  # batch + drawn
    cold_cache = BaselineCache(tmp_path)
    cold, cold_frames = evaluate(cold_cache)
    assert cold == fresh and same_frames(cold_frames, fresh_frames)
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == sorted(BASELINES)  # one file each, no leftovers
    assert all(where.startswith("played (stored in ") for where in cold_cache.served.values())

    planner_calls.clear()
    warm_cache = BaselineCache(tmp_path)
    warm, warm_frames = evaluate(warm_cache)
    assert planner_calls == []  # no baseline played, none drawn
    assert as_json(warm) == as_json(fresh)  # the JSON written
    assert same_frames(warm_frames, fresh_frames) and set(warm_frames) == set(RECORDED)
    assert list(warm_cache.served) == list(BASELINES)
    assert all(where.startswith(f"from the cache ({tmp_path}") for where in warm_cache.served.values())
    assert warm_cache.lines()[0].startswith("baseline random ") and "from the cache" in warm_cache.lines()[0]


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 4},
        {"maps": 5},  # one generator over the batch (random, greedy): no prefix
        {"env_cfg": CFG.env_config().replace(collision_penalty=0.2)},
        {"source": "another simulator"},
        {"torch": "0.0.0"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_change_of_what_the_baselines_depend_on_plays_them_again(tmp_path, planner_calls, monkeypatch, change):
    evaluate(BaselineCache(tmp_path), record=False)
    planner_calls.clear()
    evaluate(BaselineCache(tmp_path), record=False)
    assert planner_calls == []  # the same key: a hit
    if "source" in change:
        source = change.pop("source")
        monkeypatch.setattr(baseline_cache, "source_digest", lambda: source)
    if "torch" in change:
        monkeypatch.setattr(torch, "__version__", change.pop("torch"))
    cache = BaselineCache(tmp_path)
    results, _ = evaluate(cache, record=False, **change)
    assert sorted(planner_calls) == sorted(BASELINES) and all(w.startswith("played") for w in cache.served.values())
    assert results == evaluate(record=False, **change)[0]
    assert len(list(tmp_path.iterdir())) == 2 * len(BASELINES)


def test_the_key_holds_the_device_type_not_its_index():
    env_cfg = CFG.env_config()
    cpu, cuda = (baseline_key("greedy", env_cfg, 6, 3, torch.device(d)) for d in ("cpu", "cuda:1"))
    assert cpu["device"] == "cpu" and cuda["device"] == "cuda"
    assert BaselineCache(Path("c")).path(cpu) != BaselineCache(Path("c")).path(cuda)
    assert baseline_key("greedy", env_cfg, 6, 3, torch.device("cuda:0")) == cuda
    assert cpu["maps_digest"] is None and cpu["source"] == source_digest() and cpu["torch"] == torch.__version__


def test_a_map_file_edited_in_place_plays_the_baselines_again(tmp_path, planner_calls):
    folder = tmp_path / "maps"
    folder.mkdir()
    for i in range(3):  # a wall of growing length, the 2x2 launch area free
        rows = ["." * 8] * 4 + ["#" * (2 + i) + "." * (6 - i)] + ["." * 8] * 3
        (folder / f"map{i}.txt").write_text("\n".join(rows) + "\n")
    env_cfg = CFG.env_config().replace(maps=str(folder))
    fresh, _ = evaluate(env_cfg=env_cfg, record=False)
    evaluate(BaselineCache(tmp_path / "cache"), env_cfg=env_cfg, record=False)
    planner_calls.clear()
    cached, _ = evaluate(BaselineCache(tmp_path / "cache"), env_cfg=env_cfg, record=False)
    assert (
        planner_calls == []
        and as_json(cached) == as_json(fresh)
        and set(cached["per_map"]) == {"map0.txt", "map1.txt", "map2.txt"}
    )

    (folder / "map1.txt").write_text("\n".join(["." * 8] * 6 + ["...##...", "........"]) + "\n")  # the same config
    edited, _ = evaluate(BaselineCache(tmp_path / "cache"), env_cfg=env_cfg, record=False)
    assert sorted(planner_calls) == sorted(BASELINES) and as_json(edited) == as_json(
        evaluate(env_cfg=env_cfg, record=False)[0]
    )


def test_the_source_digest_covers_every_simulator_file(tmp_path, monkeypatch):
    copy = tmp_path / "uavsim"
    shutil.copytree(Path(uavsim.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    nested = sorted(p for p in copy.rglob("*.py") if p.parent != copy)[0]  # a subpackage's file too
    monkeypatch.setattr(uavsim, "__file__", str(copy / "__init__.py"))
    digests = []
    for text in (None, "\n# changed\n", None):
        if text is not None:
            nested.write_text(nested.read_text() + text)
        elif digests:
            nested.write_text(nested.read_text().removesuffix("\n# changed\n"))
        source_digest.cache_clear()
        digests.append(source_digest())
    source_digest.cache_clear()
    assert digests[0] == digests[2] != digests[1]


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(b"not an npz file")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "another key":  # a file of another key under this name
        other = next(p for p in path.parent.iterdir() if p != path and p.name.startswith("greedy-"))
        shutil.copyfile(other, path)
    elif how == "an .npy":  # np.load gives one array, no archive to close
        np.save(path.with_suffix(".npy"), np.zeros(3))
        path.with_suffix(".npy").replace(path)
    elif how == "wrong shape":
        with np.load(path) as z:
            arrays = dict(z)
        arrays["coverage"] = arrays["coverage"][:-1]
        np.savez_compressed(path, **arrays)


@pytest.mark.parametrize("how", ["garbage", "truncated", "another key", "wrong shape", "an .npy"])
def test_a_broken_file_is_played_again_with_a_warning_and_replaced(tmp_path, planner_calls, how):
    fresh, fresh_frames = evaluate()
    evaluate(BaselineCache(tmp_path))
    evaluate(BaselineCache(tmp_path), seed=4)  # another greedy file beside it
    path = BaselineCache(tmp_path).path(baseline_key("greedy", CFG.env_config(), 6, 3, CPU))
    corrupt(path, how)
    planner_calls.clear()
    cache = BaselineCache(tmp_path)
    with pytest.warns(UserWarning, match=f"baseline cache: {re.escape(str(path))} unreadable .*; playing greedy again"):
        results, frames = evaluate(cache)
    assert results == fresh and same_frames(frames, fresh_frames)
    assert sorted(planner_calls) == ["greedy", "greedy"]  # the batch and the drawn episode; the others read
    assert cache.served["greedy"].startswith(f"played ({path} unreadable")
    planner_calls.clear()
    assert evaluate(BaselineCache(tmp_path))[0] == fresh and planner_calls == []  # replaced by a good file


def test_results_stored_without_frames_are_played_again_when_the_episode_is_drawn(tmp_path, planner_calls):
    evaluate(BaselineCache(tmp_path), record=False)
    planner_calls.clear()
    cache = BaselineCache(tmp_path)
    _, frames = evaluate(cache)
    assert sorted(planner_calls) == sorted([*BASELINES[1:], *BASELINES[1:]])  # random is not drawn: a hit
    assert cache.served["random"].startswith("from the cache") and "holds no frames" in cache.served["greedy"]
    planner_calls.clear()
    _, again = evaluate(BaselineCache(tmp_path))
    assert planner_calls == [] and same_frames(again, frames)


def test_a_failed_write_leaves_no_file_and_the_evaluation_goes_on(tmp_path, monkeypatch):
    fresh, _ = evaluate(record=False)

    def half_written(file, **arrays):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(baseline_cache.np, "savez_compressed", half_written)
    cache = BaselineCache(tmp_path / "cache")
    with pytest.warns(UserWarning, match="cannot write .*No space left on device.*played again next time"):
        results, _ = evaluate(cache, record=False)
    assert results == fresh and list((tmp_path / "cache").iterdir()) == []  # neither the file nor its temporary
    assert all("not stored: " in where for where in cache.served.values())

    def interrupted(file, **arrays):
        file.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(baseline_cache.np, "savez_compressed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate(BaselineCache(tmp_path / "cache"), record=False)
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_default_folder_is_beside_the_run_directories(tmp_path):
    run_ckpt = tmp_path / "runs" / "mappo-0" / "checkpoints" / "ckpt_000000001024.pt"
    assert default_cache_dir(run_ckpt) == tmp_path / "runs" / ".baseline-cache"
    assert default_cache_dir(tmp_path / "models" / "actor.pt") == tmp_path / "models" / ".baseline-cache"
    # agents.average's run inside its run: the same folder's cache (it played every baseline again into RUN/)
    (tmp_path / "runs" / "mappo-0" / "checkpoints").mkdir(parents=True)
    averaged = tmp_path / "runs" / "mappo-0" / "averaged-last3" / "checkpoints" / "ckpt_000000001024.pt"
    assert default_cache_dir(averaged) == tmp_path / "runs" / ".baseline-cache"


def test_the_default_folder_of_a_run_given_as_dot_is_beside_it(tmp_path, monkeypatch):
    # `agents.evaluate .` from inside a run: the checkpoint's run is `.`, whose parent is `.` (it looped forever)
    (tmp_path / "runs" / "mappo-0" / "checkpoints").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "runs" / "mappo-0")
    assert default_cache_dir(Path("checkpoints") / "ckpt_000000001024.pt") == tmp_path / "runs" / ".baseline-cache"


def test_a_writer_killed_mid_write_leaves_no_file_for_long(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    key = baseline_key("greedy", CFG.env_config(), 6, 3, CPU)
    path = BaselineCache(tmp_path).path(key)
    orphan = tmp_path / f".{path.stem}-{dead.stdout.strip()}-0123456789ab.tmp"  # a pid that no longer runs
    orphan.write_bytes(b"half an archive")
    evaluate(BaselineCache(tmp_path))
    assert not orphan.exists() and path.is_file()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from agents import train_mappo

    run = tmp_path_factory.mktemp("runs") / "run"
    threads = torch.get_num_threads()
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    torch.set_num_threads(threads)  # the run set its own
    return run


def test_the_command_reads_the_cache_it_wrote_and_says_so(tiny_run, tmp_path, capsys):
    from agents import evaluate as command

    argv = [str(tiny_run), "--episodes", "4", "--seed", "3"]
    cache = tmp_path / "cache"
    capsys.readouterr()
    assert command.main([*argv, "--out", str(tmp_path / "cold.json"), "--baseline-cache", str(cache)]) == 0
    cold = capsys.readouterr().out
    assert command.main([*argv, "--out", str(tmp_path / "warm.json"), "--baseline-cache", str(cache)]) == 0
    warm = capsys.readouterr().out
    for name in BASELINES:
        assert f"baseline {name:11s} played (stored in {cache}" in cold
        assert f"baseline {name:11s} from the cache ({cache}" in warm
    assert (tmp_path / "warm.json").read_text() == (tmp_path / "cold.json").read_text()

    # --no-baseline-cache plays them and writes no cache; the default folder is beside the run
    default = tiny_run.parent / ".baseline-cache"
    shutil.rmtree(default, ignore_errors=True)
    assert command.main([*argv, "--out", str(tmp_path / "none.json"), "--no-baseline-cache"]) == 0
    assert "baselines played (--no-baseline-cache)" in capsys.readouterr().out and not default.exists()
    assert (tmp_path / "none.json").read_text() == (tmp_path / "cold.json").read_text()
    assert command.main([*argv, "--out", str(tmp_path / "default.json")]) == 0
    assert f"played (stored in {default}" in capsys.readouterr().out and len(list(default.iterdir())) == 3


def test_the_command_refuses_a_cache_folder_it_cannot_use(tiny_run, tmp_path, capsys):
    from agents import evaluate as command

    afile = tmp_path / "afile"
    afile.write_text("")
    assert command.main([str(tiny_run), "--episodes", "2", "--baseline-cache", str(afile)]) == 2
    assert f"error: --baseline-cache: {afile} exists and is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.main([str(tiny_run), "--baseline-cache", str(tmp_path), "--no-baseline-cache"])
    assert "not allowed with argument" in capsys.readouterr().err
