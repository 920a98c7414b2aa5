"""Evaluation helpers: every policy plays the same episodes, per-episode results come from the
episode's own end, and the drawn episode is the evaluated one, ending on its terminal map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agents.evaluate import actor_policy, first_episode_frames, paired_difference, run_episodes, summarize
from uavsim import EnvConfig
from uavsim.coordinated import CoordinatedFrontierPolicy
from uavsim.env import UAVSwarmEnv
from uavsim.policies import GreedyFrontierPolicy, RandomPolicy

CFG = EnvConfig(grid_height=10, grid_width=10, num_uavs=3, num_obstacles=5, max_steps=30, launch_size=2, state_pool=5)


def test_results_are_first_episode_statistics():
    env = UAVSwarmEnv(CFG, num_envs=6, seed=4)
    greedy = GreedyFrontierPolicy(env)
    res = run_episodes(env, lambda obs: greedy(env))
    assert set(res) >= {"coverage", "steps_to_target", "reached", "collisions", "return", "length"}
    reached = res["reached"].astype(bool)
    assert np.all(res["steps_to_target"][reached] == res["length"][reached])
    assert np.all(res["steps_to_target"][~reached] == CFG.max_steps)
    assert np.all(res["coverage"][reached] >= CFG.target_coverage)
    s = summarize(res)
    assert s["episodes"] == 6 and s["mean_steps_to_target"] == float(res["steps_to_target"].mean())


def test_same_seed_same_maps_for_every_policy():
    a = UAVSwarmEnv(CFG, num_envs=4, seed=9)
    b = UAVSwarmEnv(CFG, num_envs=4, seed=9)
    rand = RandomPolicy(b, seed=1)
    run_episodes(a, lambda obs: torch.zeros(4, 3, dtype=torch.long))  # a hovering policy
    run_episodes(b, lambda obs: rand(b))
    # both played episode 0 of each environment: their next episodes start identically
    assert torch.equal(a.reset()["state"], b.reset()["state"])


def test_the_drawn_episode_is_the_evaluated_map_zero_and_ends_on_its_terminal_map():
    # The trained actor's episode 0 of environment 0, drawn on a one-environment batch, is the one
    # it played in the evaluation's batch: as many frames as steps plus the start, and the last
    # frame is the terminal map (the coverage of its drawn cells is the episode's).
    from agents.algo.networks import make_actor
    from agents.config import ModelConfig
    from uavsim.render import _BLOCKED, _COVERED

    actor = make_actor(CFG, ModelConfig(hidden_size=16), torch.Generator().manual_seed(0))
    env = UAVSwarmEnv(CFG, num_envs=5, seed=7)
    res = run_episodes(env, actor_policy(actor, env, False, 7))
    frames = first_episode_frames(CFG, lambda e: actor_policy(actor, e, False, 7), 7, torch.device("cpu"))
    assert len(frames) == res["length"][0] + 1 and frames[0].shape == (10 * 8, 10 * 8, 3)

    def count(frame, colour):  # cells whose corner pixel has `colour`, plain or tinted by a footprint
        corner = frame[::8, ::8].astype(np.int32)
        return int((np.all(corner == colour, -1) | np.all(corner == np.minimum(colour + 25, 255), -1)).sum())

    free = np.float32(CFG.grid_height * CFG.grid_width - count(frames[-1], _BLOCKED))
    assert count(frames[0], _COVERED) < count(frames[-1], _COVERED)
    assert np.float32(count(frames[-1], _COVERED)) / free == np.float32(res["coverage"][0])  # as the env computes


def test_paired_difference_counts_and_standard_error():
    res = {"steps_to_target": np.array([10.0, 20.0, 30.0, 40.0])}
    base = {"steps_to_target": np.array([12.0, 20.0, 25.0, 44.0])}
    d = paired_difference(res, base)  # differences -2, 0, 5, -4
    assert d["mean_steps_diff"] == pytest.approx(-0.25)
    assert d["stderr"] == pytest.approx(np.std([-2, 0, 5, -4], ddof=1) / 2)
    assert (d["faster"], d["equal"], d["slower"]) == (2, 1, 1)


@pytest.mark.parametrize(
    "name, policy_cls", [("greedy", GreedyFrontierPolicy), ("coordinated", CoordinatedFrontierPolicy)]
)
def test_baseline_reference_is_deterministic_and_computed_once(monkeypatch, name, policy_cls):
    from agents.evaluate import episodes

    cfg = EnvConfig(grid_height=8, grid_width=8, num_uavs=2, num_obstacles=3, max_steps=20, launch_size=2, state_pool=4)
    env = UAVSwarmEnv(cfg, num_envs=3, device="cpu", seed=5)
    policy = policy_cls(env)
    direct = summarize(run_episodes(env, lambda obs: policy(env)))
    assert episodes.baseline_reference(name, cfg, 3, 5, torch.device("cpu")) == direct
    monkeypatch.setattr(episodes, "run_episodes", lambda *a, **k: pytest.fail(f"{name} replayed"))
    assert episodes.baseline_reference(name, cfg, 3, 5, torch.device("cpu")) == direct


def test_unknown_scripted_policy_is_an_error():
    from uavsim.scripted import make_scripted

    env = UAVSwarmEnv(CFG, num_envs=1)
    with pytest.raises(ValueError, match="unknown scripted policy 'astar'; expected one of"):
        make_scripted("astar", env)
    assert isinstance(make_scripted("greedy", env), GreedyFrontierPolicy)


def test_coverage_curve_follows_each_first_episode_and_then_holds_its_final_value():
    env = UAVSwarmEnv(CFG, num_envs=5, seed=4)
    policy = CoordinatedFrontierPolicy(env)
    res = run_episodes(env, lambda obs: policy(env))
    curve = res["coverage_curve"]
    assert curve.shape == (5, CFG.max_steps + 1) and curve.dtype == np.float64

    # the same episodes, tracked by hand from the env's own coverage
    env = UAVSwarmEnv(CFG, num_envs=5, seed=4)
    policy = CoordinatedFrontierPolicy(env)
    obs = env.reset()
    want = [obs["state"][:, -1].numpy().astype(np.float64)]
    ended = np.zeros(5, dtype=bool)
    for _ in range(CFG.max_steps):
        _, _, terminated, truncated, info = env.step(policy(env))
        want.append(np.where(ended, want[-1], info["coverage"].numpy()))
        ended |= (terminated | truncated).numpy()
    assert np.array_equal(curve, np.stack(want, 1))
    assert np.all(np.diff(curve, axis=1) >= 0)  # coverage never decreases
    assert np.array_equal(curve[:, -1], res["coverage"].astype(np.float32))  # ends at the episode's coverage
    length = res["length"].astype(int)
    assert all(np.all(curve[i, length[i] :] == curve[i, length[i]]) for i in range(5))


def test_evaluate_refuses_a_checkpoint_that_does_not_fit_its_config_and_bad_out_paths(tmp_path, capsys, monkeypatch):
    import hashlib
    import io

    from agents import evaluate, train_mappo
    from agents.run import checkpoint as ckpt
    from tests.agents.conftest import TINY

    run = tmp_path / "run"
    assert train_mappo.main([*TINY, "train.total_env_steps=32", f"run.dir={run}"]) == 0
    newest = ckpt.list_checkpoints(run)[-1]
    capsys.readouterr()
    for out, problem in (
        (tmp_path, "is a directory, expected a file path"),
        (run / "config.yaml" / "eval.json", "config.yaml exists and is not a directory"),
    ):
        assert evaluate.main([str(run), "--episodes", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "error: --out: " in err and problem in err
    assert not (run / "eval.json").exists()
    before = newest.read_bytes()
    for out in (newest, run / "config.yaml"):  # the checkpoint it evaluates was overwritten with JSON
        assert evaluate.main([str(run), "--episodes", "2", "--out", str(out)]) == 2
        assert f"error: --out {out}: an existing file that is not a results' JSON" in capsys.readouterr().err
    assert newest.read_bytes() == before

    # from inside the run, as `.` (the default baseline cache's search looped forever), twice: said when replaced
    monkeypatch.chdir(run)
    assert evaluate.main([".", "--episodes", "2", "--seed", "20261126"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"wrote {Path('eval.json')}")
    assert evaluate.main([".", "--episodes", "2", "--seed", "20261126"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"replaced {Path('eval.json')}")
    assert (run.parent / ".baseline-cache").is_dir()
    monkeypatch.chdir(tmp_path)

    payload = ckpt.load_checkpoint(newest)
    payload["config"]["env"]["num_uavs"] += 1  # the saved actor no longer fits the saved config
    buf = io.BytesIO()
    torch.save(payload, buf)
    newest.write_bytes(ckpt.MAGIC + hashlib.sha256(buf.getvalue()).digest() + buf.getvalue())
    assert evaluate.main([str(run), "--episodes", "2"]) == 2
    assert f"checkpoint {newest}: its actor does not fit its config" in capsys.readouterr().err
    payload["config"]["train"]["no_such_key"] = 1
    buf = io.BytesIO()
    torch.save(payload, buf)
    newest.write_bytes(ckpt.MAGIC + hashlib.sha256(buf.getvalue()).digest() + buf.getvalue())
    assert evaluate.main([str(run), "--episodes", "2"]) == 2
    assert f"checkpoint {newest} holds a config this code cannot use" in capsys.readouterr().err


def test_evaluate_all_shows_progress_without_changing_its_results(capsys):
    from agents.algo.networks import make_actor
    from agents.evaluate import POLICIES, evaluate_all
    from tests.agents.conftest import tiny_config

    cfg = tiny_config()
    actor = make_actor(cfg.env_config(), cfg.model, torch.Generator().manual_seed(0))
    quiet, frames = evaluate_all(actor, cfg.env_config(), 6, 3, torch.device("cpu"), progress=False)
    assert capsys.readouterr().err == ""
    shown, shown_frames = evaluate_all(actor, cfg.env_config(), 6, 3, torch.device("cpu"), progress=True)
    bar = capsys.readouterr().err
    assert f"{5 * cfg.env.max_steps}/{5 * cfg.env.max_steps}" in bar and "policy=coordinated" in bar
    assert shown == quiet and set(frames) == set(shown_frames) == {"policy", "policy_sampled", "greedy", "coordinated"}
    assert all(
        len(frames[k]) == len(shown_frames[k]) and all(np.array_equal(a, b) for a, b in zip(frames[k], shown_frames[k]))
        for k in frames
    )
    # progress=None (the command's): off a terminal, as here, a line as each policy is done, not silence
    logged, _ = evaluate_all(actor, cfg.env_config(), 6, 3, torch.device("cpu"), progress=None, record=False)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"evaluate: {name} done" for name in POLICIES]
    assert lines[-1].startswith(f"evaluate: {POLICIES[-1]} done ({len(POLICIES)}/{len(POLICIES)}, ") and logged == quiet


def test_evaluate_all_reports_both_baselines_paired_and_their_coverage_curves():
    from agents.algo.networks import make_actor
    from agents.evaluate import POLICIES, evaluate_all
    from tests.agents.conftest import tiny_config

    cfg = tiny_config()
    actor = make_actor(cfg.env_config(), cfg.model, torch.Generator().manual_seed(0))
    results, _ = evaluate_all(actor, cfg.env_config(), 6, 3, torch.device("cpu"), record=False)
    assert POLICIES == ("policy", "policy_sampled", "random", "greedy", "coordinated")
    for name in POLICIES:
        assert results[name]["episodes"] == 6
        curve = results["coverage_curve"][name]
        assert len(curve["mean"]) == len(curve["q25"]) == len(curve["q75"]) == cfg.env.max_steps + 1
        assert np.all(np.array(curve["q25"]) <= np.array(curve["q75"]))
        assert curve["mean"][-1] == pytest.approx(results[name]["mean_coverage"], abs=1e-6)  # 6 decimals
    for base in ("greedy", "coordinated"):
        assert set(results[f"paired_vs_{base}"]) == {"policy", "policy_sampled"}
        for name, d in results[f"paired_vs_{base}"].items():
            assert set(d) == {"mean_steps_diff", "stderr", "faster", "equal", "slower"}
            assert d["faster"] + d["equal"] + d["slower"] == 6
            assert d["mean_steps_diff"] == pytest.approx(
                results[name]["mean_steps_to_target"] - results[base]["mean_steps_to_target"]
            )
    # the coordinated baseline is the one CoordinatedFrontierPolicy plays on these maps
    env = UAVSwarmEnv(cfg.env_config(), num_envs=6, seed=3)
    policy = CoordinatedFrontierPolicy(env)
    assert summarize(run_episodes(env, lambda obs: policy(env))) == results["coordinated"]


def test_the_sampling_temperature_goes_from_the_most_likely_action_to_uniform():
    # T -> 0 is the argmax, T = 1 the trained distribution (the default, unchanged), T large near uniform
    from agents.algo.networks import make_actor
    from agents.config import ModelConfig

    actor = make_actor(CFG, ModelConfig(hidden_size=16), torch.Generator().manual_seed(0))
    env = UAVSwarmEnv(CFG, num_envs=64, seed=5)
    obs = env.reset()
    with torch.no_grad():
        likely = actor_policy(actor, env, True, 3)(obs)
        cold = actor_policy(actor, env, False, 3, temperature=1e-7)(obs)
        plain = actor_policy(actor, env, False, 3)(obs)
        warm = actor_policy(actor, env, False, 3, temperature=1.0)(obs)
        hot = torch.stack([actor_policy(actor, env, False, s, temperature=1e4)(obs) for s in range(40)])
    assert torch.equal(cold, likely) and torch.equal(plain, warm) and not torch.equal(plain, likely)
    share = torch.bincount(hot.view(-1), minlength=CFG.moves + 1).double() / hot.numel()
    assert torch.all((share - 1 / (CFG.moves + 1)).abs() < 0.03)  # 7680 draws: 3 % is > 4 standard errors


def test_evaluate_refuses_a_temperature_that_is_not_positive(tmp_path, capsys):
    from agents import evaluate

    for bad in ("0", "-1", "nan", "inf"):
        assert evaluate.main([str(tmp_path), "--temperature", bad]) == 2
        assert f"--temperature must be a finite number > 0, got {float(bad)}" in capsys.readouterr().err
