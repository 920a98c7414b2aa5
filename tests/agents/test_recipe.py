"""`run.recipe`: the default preset becomes the GPU recipe on CUDA, and only there; an override still wins."""

import json
import re
from dataclasses import asdict

import pytest
import torch

from agents.config import ModelConfig, Recipe, load_config, to_yaml
from agents.config.recipe import GPU_RECIPE, choose_recipe, describe_recipe, recipe_paths
from agents.run import command_line, machine_defaults
from agents.run.command_line import DEFAULT_CONFIG, resolve_config
from agents.train_mappo import parse_args
from benchmarks.common import RESULTS_DIR

SMOKE = DEFAULT_CONFIG.parent / "smoke.yaml"


@pytest.mark.parametrize(
    ("recipe", "device", "default_preset", "chosen"),
    [
        (Recipe.auto, "cuda", True, Recipe.gpu),  # `make train` on a GPU machine
        (Recipe.auto, "cpu", True, Recipe.preset),
        (Recipe.auto, "cuda", False, Recipe.preset),  # --config names what to run
        (Recipe.gpu, "cpu", True, Recipe.gpu),  # the GPU recipe checked on a CPU
        (Recipe.preset, "cuda", True, Recipe.preset),
    ],
)
def test_auto_takes_the_gpu_recipe_for_the_default_preset_on_cuda(recipe, device, default_preset, chosen):
    assert choose_recipe(recipe, device, default_preset) == chosen


def test_the_gpu_recipe_is_wide_and_short_and_keeps_the_preset_task():
    cpu, gpu = load_config(DEFAULT_CONFIG), load_config(recipe_paths(DEFAULT_CONFIG, Recipe.gpu))
    assert recipe_paths(DEFAULT_CONFIG, Recipe.gpu) == [DEFAULT_CONFIG, GPU_RECIPE]
    assert gpu.env.num_envs >= 2048 and gpu.train.num_steps < cpu.train.num_steps
    assert gpu.imitation.steps_per_env * gpu.env.num_envs == gpu.imitation.env_steps  # every env demonstrates
    assert gpu.env_config() == cpu.env_config()  # the same task
    # the same networks, but for the critic's window: the recipe keeps the critic its learning was checked with
    assert asdict(gpu.model) == {**asdict(cpu.model), "critic_window": True}
    assert gpu.train.total_env_steps == cpu.train.total_env_steps
    with pytest.raises(ValueError, match="resolved"):
        recipe_paths(DEFAULT_CONFIG, Recipe.auto)


def test_the_command_line_resolves_the_recipe_for_its_device(monkeypatch):
    cpu = resolve_config(parse_args([]))
    assert cpu.run.recipe == Recipe.preset and cpu.env.num_envs == "auto"
    on_cpu = resolve_config(parse_args(["run.recipe=gpu", "run.device=cpu", "train.num_minibatches=4"]))
    assert on_cpu.run.recipe == Recipe.gpu and on_cpu.env.num_envs == 2048
    assert on_cpu.train.num_minibatches == 4  # an override is laid over the recipe
    monkeypatch.setattr(command_line, "pick_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(machine_defaults, "recipe_shortfall", lambda cfg, device: None)  # a GPU the recipe fits
    gpu = resolve_config(parse_args([]))
    assert gpu.run.recipe == Recipe.gpu and gpu.env.num_envs == 2048
    assert resolve_config(parse_args(["run.recipe=preset"])).env.num_envs == "auto"
    smoke = resolve_config(parse_args(["--config", str(SMOKE)]))
    assert smoke.run.recipe == Recipe.preset and smoke == load_config(SMOKE, ["run.recipe=preset"])


def test_the_gpu_recipe_alone_and_a_second_preset_are_refused(capsys):
    # alone the recipe went over the schema's defaults (a 7x7 window, no memory, no teacher), as "preset"
    with pytest.raises(ValueError, match="the GPU recipe is laid over a preset, not one itself; pass run.recipe=gpu"):
        resolve_config(parse_args(["--config", str(GPU_RECIPE)]))
    with pytest.raises(SystemExit):  # the second replaced the first without a word
        parse_args(["--config", str(SMOKE), "--config", "configs/default.yaml"])
    assert "--config given twice" in capsys.readouterr().err


def test_a_gpu_recipe_runs_saved_config_repeats_the_run_with_its_overrides(tmp_path):
    # RUN/config.yaml holds the recipe and the run's overrides of it; laid over it, the recipe undid them
    shape = ["env.num_envs=16", "train.num_steps=8", "train.update_epochs=1", "train.num_minibatches=2"]
    first = resolve_config(parse_args(["run.recipe=gpu", "run.device=cpu", *shape]))
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(first))
    assert recipe_paths(saved, Recipe.gpu) == [GPU_RECIPE, saved]
    again = resolve_config(parse_args(["--config", str(saved)]))
    assert again == first
    assert resolve_config(parse_args(["--config", str(saved), "train.update_epochs=2"])).train.update_epochs == 2


def test_a_gpu_too_small_for_the_recipe_runs_the_preset_unless_the_recipe_is_asked_for(monkeypatch, capsys):
    monkeypatch.setattr(command_line, "pick_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(machine_defaults, "recipe_shortfall", lambda cfg, device: "the GPU recipe needs about 5 GiB")
    small = resolve_config(parse_args([]))
    assert small.run.recipe == Recipe.preset and small.env.num_envs == "auto"
    assert (
        "note: the GPU recipe needs about 5 GiB: the preset instead (run.recipe=gpu insists)" in capsys.readouterr().err
    )
    asked = resolve_config(parse_args(["run.recipe=gpu"]))  # asked for: kept (check_memory refuses it if it must)
    assert asked.run.recipe == Recipe.gpu and asked.env.num_envs == 2048
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun: every rank chooses alike, so no fallback
    assert resolve_config(parse_args([])).run.recipe == Recipe.gpu


def test_the_banner_names_the_recipe(restore_threads):
    cfg = load_config(SMOKE)  # run.recipe=auto: a config built in code is taken as given
    resolved, reasons = machine_defaults.resolve(cfg, torch.device("cpu"))
    assert resolved.run.recipe == Recipe.preset and reasons["recipe"] == describe_recipe(Recipe.preset, "cpu")
    _, reasons = machine_defaults.resolve(load_config(SMOKE, ["run.recipe=gpu"]), torch.device("cpu"))
    assert reasons["recipe"].startswith("gpu (configs/recipe_gpu.yaml over the preset")
    assert "run.recipe=gpu" in describe_recipe(Recipe.preset, "cuda")


def test_a_bad_recipe_names_the_key():
    with pytest.raises(ValueError, match="run.recipe"):
        load_config(DEFAULT_CONFIG, ["run.recipe=fast"])


def test_the_gpu_recipe_trains_as_its_committed_learning_check_did():
    """The preset may change (its epochs did: 3 -> 2); the GPU recipe keeps the PPO, imitation and model settings its
    learning was checked with (benchmarks/results/learning-gpu-recipe-2026-12-02, seed 0's config), but for its
    cloning caps (`imitation.epochs`, `dagger_epochs`), which must not end a fit of the checked seeds before
    the early stop did (learning-gpu-recipe-caps-2026-12-03: each fit's epochs without the caps and with them)."""
    runs = json.loads((RESULTS_DIR / "learning-gpu-recipe-2026-12-02" / "runs.json").read_text())
    checked = runs["files"]["gpu-s0/config.yaml"]
    gpu = load_config(recipe_paths(DEFAULT_CONFIG, Recipe.gpu))
    resolved_per_machine = {"amp"}  # train.amp=auto resolved to the machine's bf16 in the run
    train = {k: v for k, v in asdict(gpu.train).items() if k not in resolved_per_machine}
    assert train == {k: v for k, v in checked["train"].items() if k not in resolved_per_machine}
    caps = {"epochs", "dagger_epochs"}
    imitation = {k: v for k, v in asdict(gpu.imitation).items() if k not in caps}
    assert imitation == {k: v for k, v in checked["imitation"].items() if k not in caps}
    assert gpu.env.num_envs == checked["env"]["num_envs"]
    assert asdict(gpu.model) == with_later_keys(ModelConfig(), checked["model"])  # the networks it was checked with
    capped = json.loads((RESULTS_DIR / "learning-gpu-recipe-caps-2026-12-03" / "runs.json").read_text())["files"]
    for seed in range(3):
        uncapped, with_caps = (fit_epochs(capped[f"{run}-s{seed}/train.log"]) for run in ("uncapped", "capped"))
        assert uncapped == with_caps and len(uncapped) == 1 + gpu.imitation.dagger_rounds
        assert uncapped[0] <= gpu.imitation.epochs and max(uncapped[1:]) <= gpu.imitation.dagger_epochs, uncapped
        assert capped[f"uncapped-s{seed}/config.yaml"]["imitation"]["epochs"] == checked["imitation"]["epochs"]
        runs_caps = {k: capped[f"capped-s{seed}/config.yaml"]["imitation"][k] for k in caps}
        assert runs_caps == {k: getattr(gpu.imitation, k) for k in caps}  # the runs had the recipe's caps


def test_the_default_trains_as_its_committed_learning_check_did():
    """configs/default.yaml's PPO, imitation, model and task are those of the runs that chose and reported it
    (benchmarks/results/learning-critic-window-2026-12-05, seed 0 of the adopted arm, whose other settings were
    learning-update-epochs2-2026-12-03's): a change to the preset's learning needs runs of its own (the epochs'
    3 -> 2 and the critic's window had them; the fp32 shortcut of 2026-12-04 stays an override)."""
    files = json.loads((RESULTS_DIR / "learning-critic-window-2026-12-05" / "runs.json").read_text())["files"]
    earlier = json.loads((RESULTS_DIR / "learning-update-epochs2-2026-12-03" / "runs.json").read_text())["files"]
    preset = load_config(DEFAULT_CONFIG)
    resolved_per_machine = {"amp"}  # train.amp=auto, resolved to the class's bf16 or fp32 in the run
    for checked in (files["no_window/s0/config.yaml"], earlier["s0/config.yaml"], earlier["avx2/s0/config.yaml"]):
        train = {k: v for k, v in asdict(preset.train).items() if k not in resolved_per_machine}
        assert train == {k: v for k, v in checked["train"].items() if k not in resolved_per_machine}
        assert asdict(preset.imitation) == checked["imitation"]
        env = {k: v for k, v in asdict(preset.env).items() if k != "num_envs"}  # auto: 64 on a CPU
        assert env == {k: v for k, v in checked["env"].items() if k != "num_envs"}
    assert asdict(preset.model) == files["no_window/s0/config.yaml"]["model"]
    # the arms differ in the critic's window only
    window = files["window/s0/config.yaml"]
    assert with_later_keys(ModelConfig(), window["model"]) == {**asdict(preset.model), "critic_window": True}


def with_later_keys(defaults, checked: dict) -> dict:
    """A committed run's config section with the keys added to the schema since it ran, at their defaults
    (a new key's default keeps the old behaviour: `model.critic_window`'s true is the critic the run had)."""
    return {**asdict(defaults), **checked}


def fit_epochs(log: str) -> list[int]:
    """Each cloning fit's epochs from a run's log line ``... 12 cloning epochs (6 + 3 + 3), ...``."""
    (fits,) = re.findall(r"cloning epochs \(([\d + ]+)\)", log)
    return [int(x) for x in fits.split("+")]
