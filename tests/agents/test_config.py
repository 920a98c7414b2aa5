"""Config: presets load, dotted overrides are typed, unknown keys and bad values name the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from agents.config import Amp, CriticKind, load_config, to_yaml
from uavsim import EnvConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_preset_loads(preset, monkeypatch):
    from agents.run import machine_defaults

    cfg = load_config(CONFIGS / preset)
    cfg.env_config()  # a valid EnvConfig
    # its batch geometry holds once the machine has chosen the `auto` values (a CPU without bf16 here)
    monkeypatch.setattr(machine_defaults, "bf16_matmul_time_ratio", lambda: 20.0)
    threads = torch.get_num_threads()
    try:
        resolved, _ = machine_defaults.resolve(cfg, torch.device("cpu"), ranks_here=1)
    finally:
        torch.set_num_threads(threads)
    assert resolved.resolved and resolved.batch_size % resolved.train.num_minibatches == 0


def test_overrides_are_typed_and_applied():
    cfg = load_config(
        None,
        [
            "env.num_envs=1024",
            "train.total_env_steps=2000000",
            "train.amp=bf16",
            "run.dir=runs/x",
            "run.checkpoint_interval=100000",
            "seed=3",
            "train.actor_lr=1e-3",
            "model.critic=ippo",
            "env.coverage_reward=5",
        ],
    )
    assert cfg.env.num_envs == 1024 and cfg.train.total_env_steps == 2_000_000
    assert cfg.train.amp == Amp.bf16 and cfg.model.critic == CriticKind.ippo
    assert cfg.run.dir == "runs/x" and cfg.run.checkpoint_interval == 100_000 and cfg.seed == 3
    assert cfg.train.actor_lr == 1e-3 and isinstance(cfg.train.actor_lr, float)
    assert cfg.env_config().coverage_reward == 5.0


def test_env_section_mirrors_env_config():
    cfg = load_config()
    env_fields = {f.name: f.default for f in dataclasses.fields(EnvConfig)}
    mine = dataclasses.asdict(cfg.env)
    assert mine.pop("num_envs") == "auto"
    assert mine == env_fields


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.lrr=0.1", "train.lrr"),
        ("nope=1", "nope"),
        ("env.num_uav=3", "env.num_uav"),
        ("run.checkpoint.interval=3", "run.checkpoint"),
    ],
)
def test_unknown_key_is_an_error_naming_it(override, key):
    with pytest.raises(ValueError, match=f"unknown config key '{key}"):
        load_config(None, [override])


def test_unknown_key_in_yaml_names_key_and_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("train:\n  num_step: 10\n")
    with pytest.raises(ValueError, match=r"unknown config key 'train.num_step'.*bad.yaml"):
        load_config(f)


@pytest.mark.parametrize(
    "override, err, key",
    [
        ("env.num_envs=abc", ValueError, "env.num_envs"),
        ("train.update_epochs=1.5", TypeError, "train.update_epochs"),
        ("train.anneal_lr=maybe", TypeError, "train.anneal_lr"),
        ("train.amp=fp32", ValueError, "train.amp"),
        ("train.clip_coef=-0.1", ValueError, "train.clip_coef"),
        ("train.gamma=1.5", ValueError, "train.gamma"),
        ("env.num_envs=0", ValueError, "env.num_envs"),
        ("run.device=tpu", ValueError, "run.device"),
        ("train.num_minibatches=7", ValueError, "train.num_minibatches"),
        ("env.moves=5", ValueError, "moves"),
        ("train.actor_lr=inf", ValueError, "train.actor_lr"),
        ("train.adam_eps=inf", ValueError, "train.adam_eps"),
        ("train.vf_coef=inf", ValueError, "train.vf_coef"),
        ("run.device=cuda:x", ValueError, "run.device"),
        (
            "run.device=cuda:",
            ValueError,
            "run.device' must be auto, cpu, cuda or cuda:N, got 'cuda:'",
        ),  # the text, not YAML
        ("train=3", TypeError, "'train'"),
        ("env=5", TypeError, "'env'"),
    ],
)
def test_bad_values_name_the_key(override, err, key):
    with pytest.raises(err, match=key):
        load_config(None, ["env.num_envs=64", override])  # an explicit num_envs: the batch geometry is checked


def test_a_plain_value_for_a_list_key_and_an_enum_say_what_to_write():
    # OmegaConf's "AnyNode is not a ListConfig" alone; an enum shown as <Teacher.greedy: 'greedy'>
    with pytest.raises(
        ValueError, match=r"run.evaluate_env.*expected a list, on the command line run.evaluate_env=\[\.\.\.\]"
    ):
        load_config(None, ["run.evaluate_env=path_radius=12"])
    with pytest.raises(ValueError, match=r"config key 'imitation.teacher' must be none .*, got 'greedy'$"):
        load_config(None, ["model.recurrent=true", "imitation.teacher=greedy"])
    with pytest.raises(ValueError, match=r"imitation.teacher.*Invalid value 'False'"):  # not the `off` it was read as
        load_config(None, ["imitation.teacher=false"])
    assert load_config(None, ["train.amp=off"]).train.amp == Amp.off  # YAML 1.1's false, where `off` is a value


def test_a_scalar_for_a_section_names_the_section(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("env: 5\n", encoding="utf-8")  # OmegaConf: "config key '?' ... int is not a subclass of EnvSection"
    with pytest.raises(TypeError, match=r"config key 'env' \(from .*bad\.yaml\) is a section of keys, got 5"):
        load_config(f)


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="key=value"):
        load_config(None, ["train.amp"])
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ValueError, match="bad.yaml is not valid YAML"):
        load_config(bad)


def test_a_directory_or_a_binary_file_as_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="is a directory, expected a YAML file"):
        load_config(tmp_path)
    binary = tmp_path / "weights.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ValueError, match="weights.yaml cannot be read as text"):
        load_config(binary)


@pytest.mark.parametrize("value", ["2", "-1", "1.5", "maybe"])
def test_a_bool_key_takes_true_or_false_only(tmp_path, value):
    # OmegaConf alone reads any int as a bool: train.anneal_lr=2 would silently be True
    with pytest.raises(TypeError, match="train.anneal_lr must be true or false"):
        load_config(None, [f"train.anneal_lr={value}"])
    f = tmp_path / "c.yaml"
    f.write_text(f"run:\n  progress: {value}\n")
    with pytest.raises(TypeError, match="c.yaml: run.progress must be true or false"):
        load_config(f)
    assert load_config(None, ["train.anneal_lr=false"]).train.anneal_lr is False


@pytest.mark.parametrize(("word", "value"), [("yes", True), ("off", False), ("True", True), ("NO", False)])
def test_a_bool_key_takes_the_yaml_bool_words(tmp_path, word, value):
    f = tmp_path / "c.yaml"
    f.write_text(f'run:\n  progress: "{word}"\n')  # quoted: a string, as from some YAML writers
    assert load_config(f).run.progress is value


def test_a_bool_key_takes_0_1_and_interpolations():
    assert load_config(None, ["train.anneal_lr=0"]).train.anneal_lr is False
    assert load_config(None, ["train.anneal_lr=1"]).train.anneal_lr is True
    assert load_config(None, ["train.norm_adv=false", "train.anneal_lr=${train.norm_adv}"]).train.anneal_lr is False


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("run.dir=2024_01_05", "dir", "2024_01_05"),  # YAML 1.1: the int 20240105
        ("run.dir=010", "dir", "010"),  # octal 8
        ("run.dir=1:30", "dir", "1:30"),  # sexagesimal 90
        ("run.dir=1e5", "dir", "1e5"),
        ("run.dir=runs/x y", "dir", "runs/x y"),
        ("run.dir='a: b'", "dir", "a: b"),  # quoted: YAML reads it
        ("run.dir=null", "dir", None),
        ("env.maps=no", "maps", "no"),  # the bool False, then "False"
    ],
)
def test_a_string_key_takes_the_text_as_written(override, key, value):
    cfg = load_config(None, [override])
    assert (cfg.run.dir if key == "dir" else cfg.env.maps) == value


def test_run_dir_and_maps_may_start_at_the_users_home(tmp_path, monkeypatch):
    # `run.dir=~/runs/a` reaches Python as typed: bash expands `~` after `=` only in an assignment
    monkeypatch.setenv("HOME", str(tmp_path))  # os.path.expanduser: HOME on POSIX, USERPROFILE on Windows
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    cfg = load_config(None, ["run.dir=~/runs/a", "env.maps=~/maps"])
    assert Path(cfg.run.dir) == tmp_path / "runs" / "a" and Path(cfg.env.maps) == tmp_path / "maps"
    f = tmp_path / "preset.yaml"
    f.write_text("run:\n  dir: ~/runs/b\n", encoding="utf-8")  # a YAML `~` alone is null; `~/...` is text
    assert Path(load_config(f).run.dir) == tmp_path / "runs" / "b"
    assert load_config(None, ["run.dir=a~b"]).run.dir == "a~b"  # only a leading `~` is the home


def test_resolved_yaml_round_trips(tmp_path):
    cfg = load_config(None, ["train.amp=fp16", "seed=7", "run.dir=somewhere"])
    f = tmp_path / "config.yaml"
    f.write_text(to_yaml(cfg))
    assert load_config(f) == cfg


def test_derived_sizes():
    cfg = load_config(
        None,
        [
            "env.num_envs=8",
            "env.num_uavs=3",
            "env.launch_size=2",
            "train.num_steps=16",
            "train.num_minibatches=4",
            "train.total_env_steps=1000",
        ],
    )
    assert cfg.batch_size == 16 * 8 * 3 and cfg.minibatch_size == 96
    assert cfg.env_steps_per_iteration == 128 and cfg.num_iterations() == 7 and cfg.num_iterations(world_size=2) == 3


def test_print_config_shows_every_key_and_trains_nothing(tmp_path, capsys):
    from agents import train_mappo

    explicit = ["train.amp=off", "run.torch_threads=1", f"run.dir={tmp_path / 'run'}"]  # nothing left to resolve
    assert train_mappo.main(["--print-config", "--config", "configs/smoke.yaml", *explicit]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    # run.recipe is resolved for the machine too (a named preset runs as written)
    assert load_config(printed) == load_config("configs/smoke.yaml", [*explicit, "run.recipe=preset"])
    assert not (tmp_path / "run").exists()
    assert train_mappo.main(["--print-config", "train.amp=fast"]) == 2  # still checked


def test_recurrent_chunks_must_tile_the_rollout_and_the_minibatches():
    base = ["model.recurrent=true", "env.num_envs=4", "train.num_steps=16", "train.num_minibatches=4"]
    with pytest.raises(ValueError, match=r"config key 'train.chunk_length' must be a divisor of train.num_steps=16"):
        load_config(None, [*base, "train.chunk_length=5"])
    with pytest.raises(ValueError, match=r"config key 'train.chunk_length' must be >= 1"):
        load_config(None, [*base, "train.chunk_length=0"])
    # 16 / 8 chunks x 4 envs = 8 sequences: 8 minibatches of one chunk, but not 16 (which divides the 64 steps)
    assert load_config(None, [*base, "train.chunk_length=8", "train.num_minibatches=8"]).train.chunk_length == 8
    with pytest.raises(ValueError, match=r"'train.num_minibatches' must be a divisor of the number of sequences.* = 8"):
        load_config(None, [*base, "train.chunk_length=8", "train.num_minibatches=16"])
    # feed-forward runs do not cut the rollout into chunks: any chunk_length is left alone
    cfg = load_config(None, ["train.num_steps=15", "train.num_minibatches=1", "train.chunk_length=4"])
    assert cfg.train.num_steps == 15


def test_env_comm_radius_passes_through_as_an_optional_int():
    assert load_config(overrides=["env.comm_radius=3"]).env_config().comm_radius == 3
    assert load_config(overrides=["env.comm_radius=null"]).env_config().comm_radius is None
    with pytest.raises(ValueError, match="comm_radius"):
        load_config(overrides=["env.comm_radius=-2"]).env_config()
