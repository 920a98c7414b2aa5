"""`agents.export`: the exported actor, run by onnxruntime or loaded by torch.jit.load, gives the
torch actor's logits for one UAV's inputs (each config's inputs, any batch, a recurrent actor's
hidden state fed back); the sidecar says what to feed; bad arguments are clear errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agents import export
from agents.algo.learner import build_learner
from agents.algo.rollout import agent_ids
from agents.run import checkpoint as ckpt
from agents.run.learner_state import learner_state, trained_actor
from tests.agents.conftest import tiny_config
from uavsim.env import UAVSwarmEnv

# local: the default actor (tanh, agent id); shared_map: + heading and pooled map (ReLU, as
# configs/shared_map.yaml); recurrent: a GRU actor without an agent id; roles: `model.agent_roles`
CONFIGS = {
    "local": (),
    "shared_map": ("model.actor_shared_map=true", "model.activation=relu"),
    "recurrent": ("model.recurrent=true", "train.chunk_length=4", "model.agent_id=false"),
    # roles: size-agnostic with a one-hot of the index mod 2 (UAV 2 takes UAV 0's role in the file too)
    "roles": ("model.size_agnostic=true", "model.agent_id=false", "model.agent_roles=2", "env.num_uavs=3"),
}
ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-5
STEPS = 4  # env steps whose observations the exported actor is fed


def saved_run(run_dir, overrides: tuple[str, ...]):
    """A run directory with one checkpoint of the tiny config: a fresh learner whose actor's weights
    are shaken so that its logits are far from the initial near-zero ones (wiring errors show)."""
    learner = build_learner(tiny_config(*overrides), torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in learner.actor.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    ckpt.save_checkpoint(run_dir, learner_state(learner), keep=1)
    return run_dir


@pytest.fixture(scope="module", params=list(CONFIGS))
def run_dir(request, tmp_path_factory):
    return saved_run(tmp_path_factory.mktemp(request.param), CONFIGS[request.param])


def rollout_logits(actor, obs: dict, hidden: torch.Tensor | None):
    """The logits `[B * N, A]` (and next hidden `[B * N, H]`) of all UAVs, called as the rollout calls
    the actor (`Actor.act`): the shared state once per environment, headings from it."""
    b, n, _ = obs["local"].shape
    heading = actor.headings(obs["state"]).view(b * n, -1) if actor.map_dim else None
    state = obs["state"] if actor.map_dim else None
    out = actor(obs["local"].view(b * n, -1), agent_ids(b, n, torch.device("cpu")), state, n, heading, hidden)
    return out if actor.recurrent else (out, None)


def one_uav_rows(actor, obs: dict, names: list[str]) -> dict[str, np.ndarray]:
    """The exported file's inputs but `hidden` for every UAV of `obs`, one row each, as a flight
    computer feeds them."""
    b, n, _ = obs["local"].shape
    rows = {"local": obs["local"].reshape(b * n, -1), "agent_id": agent_ids(b, n, torch.device("cpu"))}
    if actor.map_dim:
        rows["heading"] = actor.headings(obs["state"]).reshape(b * n, -1)
        rows["pooled_map"] = obs["state"][:, : actor.map_dim].repeat_interleave(n, 0)
    return {name: rows[name].numpy() for name in names if name != "hidden"}


def play(run_dir, run_exported) -> None:
    """Feed `run_exported(rows) -> [logits, (next_hidden)]` the observations of `STEPS` random steps
    of three environments and compare with the torch actor (the hidden state fed back each step)."""
    _, _, cfg, actor = trained_actor(run_dir)
    names = export.OneUAVActor(actor, cfg.model.id_width(cfg.env.num_uavs) > 0).input_names
    env = UAVSwarmEnv(cfg.env_config(), num_envs=3, seed=5)
    obs, gen = env.reset(), torch.Generator().manual_seed(1)
    hidden = torch.zeros(env.num_envs * env.num_uavs, actor.hidden_size) if actor.recurrent else None
    exported_hidden = hidden.numpy() if hidden is not None else None
    with torch.no_grad():
        for _ in range(STEPS):
            logits, hidden_next = rollout_logits(actor, obs, hidden)
            feeds = one_uav_rows(actor, obs, names)
            if actor.recurrent:
                feeds["hidden"] = exported_hidden
            out = run_exported(feeds)
            np.testing.assert_allclose(out[0], logits.numpy(), atol=ATOL, rtol=0)
            assert np.abs(logits.numpy()).max() > 0.1  # the shaken weights: logits far from zero
            if actor.recurrent:
                np.testing.assert_allclose(out[1], hidden_next.numpy(), atol=ATOL, rtol=0)
                hidden, exported_hidden = hidden_next, out[1]  # each side carries its own state
            actions = torch.randint(0, env.num_actions, (env.num_envs, env.num_uavs), generator=gen)
            obs = env.step(actions)[0]
        feeds = {name: rows[:1] for name, rows in one_uav_rows(actor, obs, names).items()}  # one UAV
        if actor.recurrent:
            feeds["hidden"] = exported_hidden[:1]
        one = run_exported(feeds)
        np.testing.assert_allclose(one[0], rollout_logits(actor, obs, hidden)[0][:1].numpy(), atol=ATOL, rtol=0)


def test_onnx_matches_the_torch_actor_in_onnxruntime(run_dir):
    ort = pytest.importorskip("onnxruntime")
    out, side = export.export_actor(run_dir, "onnx")
    assert (out, side) == (run_dir / "actor.onnx", run_dir / "actor.onnx.json")
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    info = json.loads(side.read_text())
    assert [i.name for i in session.get_inputs()] == [i["name"] for i in info["inputs"]]
    assert [o.name for o in session.get_outputs()] == [o["name"] for o in info["outputs"]]
    assert [i.shape for i in session.get_inputs()] == [i["shape"] for i in info["inputs"]]
    play(run_dir, lambda rows: session.run(None, rows))
    # both formats side by side keep a sidecar each (a shared actor.json described the last one written)
    _, pt_side = export.export_actor(run_dir, "torchscript")
    assert (
        json.loads(side.read_text())["file"] == "actor.onnx" and json.loads(pt_side.read_text())["file"] == "actor.pt"
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")  # torch 2.13
def test_torchscript_matches_the_torch_actor(run_dir, tmp_path):
    out, side = export.export_actor(run_dir, "torchscript", tmp_path / "onboard" / "policy.pt")
    assert side == tmp_path / "onboard" / "policy.pt.json" and json.loads(side.read_text())["file"] == "policy.pt"
    module = torch.jit.load(str(out))
    names = [i["name"] for i in json.loads(side.read_text())["inputs"]]

    def run_exported(rows):
        with torch.no_grad():
            result = module(*(torch.from_numpy(rows[name]) for name in names))
        return [t.numpy() for t in (result if isinstance(result, tuple) else (result,))]

    play(run_dir, run_exported)


def test_the_flight_computer_snippet_of_the_docs_runs_with_onnxruntime_and_numpy_only(tmp_path):
    pytest.importorskip("onnxruntime")
    run_dir = saved_run(tmp_path / "run", CONFIGS["local"])
    export.export_actor(run_dir, "onnx")
    snippet = (ROOT / "docs" / "export.md").read_text().split("```python\n")[1].split("```")[0]
    local = np.random.default_rng(0).random(tiny_config().env_config().local_obs_dim, dtype=np.float32)
    prelude = (
        "import sys\n"
        "sys.modules.update(torch=None, agents=None, uavsim=None)  # none of them importable\n"
        "import numpy as np\n"
        f"observe = lambda: np.array({local.tolist()}, dtype=np.float32)\n"
        "MY_ID = np.int32(1)  # NumPy 1.x on Windows makes np.array([1]) int32; the file's agent_id is int64\n"
    )
    code = prelude + snippet + "print(action['name'], sampled['name'])\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=run_dir, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    actor = trained_actor(run_dir)[3]
    with torch.no_grad():
        expected = actor(torch.from_numpy(local)[None], torch.tensor([1])).argmax(-1).item()
    most_likely, sampled = proc.stdout.split()
    names = [a["name"] for a in json.loads((run_dir / "actor.onnx.json").read_text())["actions"]]
    assert most_likely == names[expected] and sampled in names


def test_the_sidecar_says_what_to_feed(tmp_path):
    run_dir = saved_run(tmp_path / "run", CONFIGS["shared_map"])
    cfg = tiny_config(*CONFIGS["shared_map"])
    env_cfg = cfg.env_config()
    _, side = export.export_actor(run_dir, "torchscript")
    info = json.loads(side.read_text())
    assert [(i["name"], i["shape"], i["dtype"]) for i in info["inputs"]] == [
        ("local", ["batch", env_cfg.local_obs_dim], "float32"),
        ("agent_id", ["batch"], "int64"),
        ("heading", ["batch", 3], "float32"),
        ("pooled_map", ["batch", 2 * env_cfg.state_pool**2], "float32"),
    ]
    assert [a["name"] for a in info["actions"]] == ["hover", "north", "south", "west", "east"]
    assert (info["actions"][1]["d_row"], info["actions"][4]["d_col"]) == (-1, 1)
    assert info["checkpoint"] == str(ckpt.list_checkpoints(run_dir)[-1].resolve()) and len(info["config_sha256"]) == 64
    assert info["env"] == env_cfg.to_dict() and info["model"]["actor_shared_map"] is True
    # the layout is where the env puts each part (after a step: the time is not zero)
    env = UAVSwarmEnv(env_cfg, num_envs=2, seed=3)
    env.reset()
    obs = env.step(torch.zeros(2, env_cfg.num_uavs, dtype=torch.long))[0]
    part = {p["name"]: p for p in info["observation"]["local"]["parts"]}
    n, p2, centre = env_cfg.num_uavs, env_cfg.state_pool**2, env_cfg.window**2 // 2
    local, state = obs["local"], obs["state"]
    positions = state[:, 2 * p2 : 2 * p2 + 2 * n].view(2, n, 2)
    assert torch.equal(local[..., part["row"]["start"]], positions[..., 0])
    assert torch.equal(local[..., part["col"]["start"]], positions[..., 1])
    assert torch.all(local[..., part["time"]["start"]] == 1 / env_cfg.max_steps)
    assert torch.all(local[..., part["blocked"]["start"] + centre] == 0)  # a UAV stands on a free cell
    assert torch.all(local[..., part["covered"]["start"] + centre] == 1)  # which it has covered


def test_errors_name_what_was_wrong_and_what_was_expected(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="neither a checkpoint file nor a run directory"):
        export.export_actor(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no checkpoints"):
        export.export_actor(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown format 'tflite': expected one of onnx, torchscript"):
        export.export_actor(tmp_path / "nothing", "tflite")  # checked before the checkpoint
    with (
        monkeypatch.context() as patch,
        pytest.raises(ValueError, match=r"onnx package: pip install -e \"\.\[export\]\" in this repository"),
    ):
        patch.setitem(sys.modules, "onnx", None)  # as if it were not installed
        export.export_actor(tmp_path / "nothing", "onnx")
    run_dir = saved_run(tmp_path / "run", CONFIGS["local"])
    with pytest.raises(ValueError, match="a .json name is a sidecar's; expected a file name ending in .pt"):
        export.export_actor(run_dir, "torchscript", tmp_path / "actor.json")
    with pytest.raises(ValueError, match=r"--out .*actor\.onnx: a \.onnx name for --format torchscript"):
        export.export_actor(run_dir, "torchscript", tmp_path / "actor.onnx")  # onboard code would load it as ONNX
    with pytest.raises(ValueError, match="is a directory, expected a file path"):
        export.export_actor(run_dir, "torchscript", tmp_path)
    assert export.main([str(run_dir), "--format", "tflite"]) == 2
    assert "error: unknown format 'tflite'" in capsys.readouterr().err
    assert export.main([str(run_dir), "--format", "torchscript"]) == 0
    assert (run_dir / "actor.pt").is_file() and f"wrote {run_dir / 'actor.pt'}" in capsys.readouterr().out
    out = run_dir / "actor.pt"
    assert export.main([str(run_dir), "--format", "torchscript", "--out", str(out)]) == 0
    assert f"replaced {out}" in capsys.readouterr().out

    # the checkpoint it exports, or another file of the run, is never written over (it was, without a word)
    newest = ckpt.list_checkpoints(run_dir)[-1]
    before = newest.read_bytes()
    (run_dir / "config.yaml").write_text("seed: 0\n", encoding="utf-8")
    for fmt, bad in (
        ("torchscript", newest),
        ("onnx", run_dir / "config.yaml"),
        ("torchscript", run_dir / "ckpt_1.pt"),
    ):
        assert export.main([str(newest), "--format", fmt, "--out", str(bad)]) == 2
        assert "an existing file that is not an exported actor" in capsys.readouterr().err or bad.name == "ckpt_1.pt"
    assert newest.read_bytes() == before and (run_dir / "config.yaml").read_text(encoding="utf-8") == "seed: 0\n"
    # a sidecar that cannot be written: refused before anything is, and an OSError is one line, no file left
    (tmp_path / "blocked.pt.json").mkdir()
    assert export.main([str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "blocked.pt")]) == 2
    assert "blocked.pt.json is a directory" in capsys.readouterr().err and not (tmp_path / "blocked.pt").exists()
    long = tmp_path / ("a" * 250 + ".pt")  # the sidecar's name, 5 longer, is past most file systems' 255
    code = export.main([str(run_dir), "--format", "torchscript", "--out", str(long)])
    err = capsys.readouterr().err  # refused before writing, where the file system takes no such name
    assert (code, long.exists()) == (0, True) or (code == 2 and "cannot be used" in err and not long.exists())


def test_the_layout_names_the_memory_and_window_path_parts_where_the_env_puts_them():
    from uavsim.config import EnvConfig

    env_cfg = EnvConfig(comm_radius=0, window_paths=True, obs_radius=6)
    parts = export.observation_layout(env_cfg)["parts"]
    # contiguous, in order, to the end of the observation
    ends = [p["start"] + math.prod(p["shape"]) for p in parts]
    assert [p["start"] for p in parts[1:]] == ends[:-1] and ends[-1] == env_cfg.local_obs_dim
    part = {p["name"]: p for p in parts}
    assert list(part)[-5:] == ["known_blocked", "known_covered", "memory_heading", "path_closer", "path_distance"]
    env = UAVSwarmEnv(env_cfg, num_envs=2, seed=3)
    local = env.reset()["local"]
    known = local[..., part["known_covered"]["start"] : part["memory_heading"]["start"]]
    assert torch.all(known.sum(-1) > 0)  # each UAV knows its launch windows covered
    closer = local[..., part["path_closer"]["start"] : part["path_distance"]["start"]]
    assert ((closer == 0) | (closer == 1)).all() and local[..., part["path_distance"]["start"]].gt(0).all()


def test_the_layout_says_what_the_memory_paths_search_and_their_scale():
    from uavsim.config import EnvConfig

    window = {
        p["name"]: p["what"] for p in export.observation_layout(EnvConfig(comm_radius=0, window_paths=True))["parts"]
    }
    memory = EnvConfig(comm_radius=0, window_paths=True, obs_radius=6, path_radius=12)
    searched = {p["name"]: p["what"] for p in export.observation_layout(memory)["parts"]}
    assert (
        "window's nearest uncovered free cell" in window["path_closer"]
        and "/ 7 (1: none within 6" in window["path_distance"]
    )
    assert "its memory within 12 cells" in searched["path_closer"]
    assert "/ 25 (1: none within 24 moves in that square)" in searched["path_distance"]


def test_env_overrides_describe_the_task_played_onboard_and_a_task_the_actor_cannot_play_is_refused(tmp_path, capsys):
    overrides = ("env.comm_radius=0", "env.window_paths=true", "env.obs_radius=2")
    run_dir = saved_run(tmp_path / "run", overrides)
    _, side = export.export_actor(run_dir, "torchscript", env=["path_radius=6"])
    info = json.loads(side.read_text())
    assert info["env"]["path_radius"] == 6 and info["env_overrides"] == ["path_radius=6"]
    part = {p["name"]: p for p in info["observation"]["local"]["parts"]}
    assert "/ 13 (1: none within 12 moves in that square)" in part["path_distance"]["what"]
    _, plain = export.export_actor(run_dir, "torchscript", tmp_path / "plain.pt")
    assert json.loads(plain.read_text())["env"]["path_radius"] == 0  # the run's own env without --env
    assert export.main([str(run_dir), "--format", "torchscript", "--env", "obs_radius=3"]) == 2
    assert "obs_radius" in capsys.readouterr().err  # another window: the actor's input would change
    assert export.main([str(run_dir), "--format", "torchscript", "--env", "path_radius=1"]) == 2
    assert "EnvConfig.path_radius must be >= obs_radius (2) or 0" in capsys.readouterr().err


def test_the_runs_evaluate_env_is_the_task_exported_unless_env_says_otherwise(tmp_path):
    overrides = ("env.comm_radius=0", "env.window_paths=true", "env.obs_radius=2", "run.evaluate_env=[path_radius=6]")
    run_dir = saved_run(tmp_path / "run", overrides)
    info = json.loads(export.export_actor(run_dir, "torchscript")[1].read_text())
    assert info["env"]["path_radius"] == 6 and info["env_overrides"] == ["path_radius=6"]
    info = json.loads(export.export_actor(run_dir, "torchscript", env=["path_radius=0"])[1].read_text())
    assert info["env"]["path_radius"] == 0 and info["env_overrides"] == ["path_radius=6", "path_radius=0"]
