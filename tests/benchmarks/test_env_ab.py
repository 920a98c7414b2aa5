"""`benchmarks.env_ab`: a commit's uavsim beside the working tree's, in one process."""

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import env_ab
from benchmarks.step_cost import preset_env_config

ROOT = Path(__file__).resolve().parents[2]


def _git_checkout() -> bool:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _git_checkout(), reason="needs a git checkout with git on PATH")


def test_the_committed_env_steps_as_the_working_tree_with_a_time_for_each(tmp_path):
    out = tmp_path / "ab.json"
    (point,) = env_ab.main(["HEAD", "--envs", "4", "--threads", "1", "--steps", "20", "--out", str(out)])
    assert point["before_ms"] > 0 and point["after_ms"] > 0 and point["steps"] == 20
    uavsim_edited = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "uavsim"], cwd=ROOT).returncode != 0
    assert point["equal_every_step"] or uavsim_edited  # a clean checkout (CI's): HEAD's uavsim is the working tree's
    assert point["counts"]["before"] == point["counts"]["after"] or uavsim_edited
    assert point["counts"]["after"]["kernels"] > 50 and point["counts"]["after"]["bytes_per_env_step"] > 0
    saved = json.loads(out.read_text())
    assert saved["points"] == [point] and saved["base"] == "HEAD" and "cpu" in saved["machine"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert saved["base_commit"] == head.stdout.strip()  # HEAD~3 names another commit once more are made
    assert saved["config"] == "configs/default.yaml" and saved["after"]


def test_a_step_that_differs_is_reported(tmp_path, monkeypatch):
    base = env_ab.base_package("HEAD", tmp_path)
    assert base.__name__ == env_ab.BASE_PACKAGE and base.UAVSwarmEnv.__module__.startswith(env_ab.BASE_PACKAGE)
    step = base.UAVSwarmEnv.step

    def shifted(self, actions):
        obs, reward, terminated, truncated, info = step(self, actions)
        return obs, reward + 1, terminated, truncated, info

    monkeypatch.setattr(base.UAVSwarmEnv, "step", shifted)
    point = env_ab.compare(base, preset_env_config(), num_envs=4, threads=1, steps=3, warmup=1)
    assert not point["equal_every_step"]


def test_an_unknown_revision_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="no-such-revision"):
        env_ab.base_package("no-such-revision", tmp_path)


def test_bad_counts_are_rejected(capsys):
    with pytest.raises(SystemExit):
        env_ab.main(["HEAD", "--envs", "0"])
    assert "--envs must be positive" in capsys.readouterr().err
    for argv, message in (  # each was a traceback
        (["no-such-revision", "--envs", "4", "--steps", "2"], "cannot read uavsim at 'no-such-revision'"),
        (["HEAD", "--config", "/no/such.yaml"], "--config /no/such.yaml is not a file"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            env_ab.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
