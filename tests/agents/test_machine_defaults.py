"""`auto` config values (agents.run.machine_defaults): each choice, explicit overrides, the memory check."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from agents.config import Amp, load_config
from agents.run import machine_defaults as md
from tests.agents.conftest import TINY, tiny_config

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def auto_config(*overrides: str):
    return tiny_config("train.amp=auto", "run.torch_threads=auto", "env.num_envs=auto", *overrides)


@pytest.mark.parametrize(
    "capability, amp",
    [
        ((9, 0), Amp.bf16),
        ((8, 0), Amp.bf16),
        ((8, 9), Amp.bf16),
        ((7, 5), Amp.fp16),
        ((7, 0), Amp.fp16),
        ((6, 1), Amp.off),
    ],
)
def test_cuda_precision_follows_compute_capability(capability, amp):
    chosen, why = md.choose_cuda_amp(capability)
    assert chosen == amp
    assert f"{capability[0]}.{capability[1]}" in why


@pytest.mark.parametrize("ratio, amp", [(0.4, Amp.bf16), (0.9, Amp.bf16), (0.95, Amp.off), (20.0, Amp.off)])
@pytest.mark.parametrize("cpu_class", ["AVX-512", "AVX512-BF16", "AMX"])
def test_a_cpu_with_avx512_takes_bf16_only_where_the_probe_finds_it_faster(ratio, amp, cpu_class):
    chosen, why = md.choose_cpu_amp(cpu_class, lambda: ratio)
    assert chosen == amp
    assert cpu_class in why and f"{ratio:.1f}" in why


@pytest.mark.parametrize("cpu_class", ["AVX2", "baseline"])
def test_a_cpu_without_avx512_is_fp32_without_a_probe(cpu_class):
    def no_probe():
        raise AssertionError("probed a CPU that has no bf16 instructions")

    chosen, why = md.choose_cpu_amp(cpu_class, no_probe)
    assert chosen == Amp.off and cpu_class in why and "no bf16 instructions" in why


def test_the_probe_measures_a_finite_ratio_on_one_thread_and_restores_the_threads(keep_threads):
    torch.set_num_threads(2)
    ratio = md.bf16_matmul_time_ratio(rows=64, inner=32, cols=16, repeats=1)
    assert math.isfinite(ratio) and ratio > 0
    assert torch.get_num_threads() == 2


def test_resolve_on_a_cpu_with_native_bf16(monkeypatch, keep_threads):
    monkeypatch.setattr(md, "bf16_matmul_time_ratio", lambda: 0.5)
    monkeypatch.setattr(md.hardware, "cpu_class", lambda: "AMX")
    monkeypatch.setattr(md.hardware, "usable_cores", lambda: (3, "test affinity"))
    cfg, reasons = md.resolve(auto_config(), CPU, ranks_here=1)
    assert cfg.resolved
    assert (cfg.train.amp, cfg.run.torch_threads, cfg.env.num_envs) == (Amp.bf16, 3, md.CPU_NUM_ENVS)
    assert torch.get_num_threads() == 3  # the probe measured with the run's threads
    assert reasons["precision"].startswith("bf16 (train.amp=bf16, auto:") and "AMX" in reasons["precision"]
    assert "3 usable cores" in reasons["threads"] and "test affinity" in reasons["threads"]
    assert reasons["environments"].startswith("64 (auto")


def test_resolve_on_a_cpu_without_native_bf16(monkeypatch, keep_threads):
    monkeypatch.setattr(md, "bf16_matmul_time_ratio", lambda: 22.0)
    monkeypatch.setattr(md.hardware, "cpu_class", lambda: "AVX2")
    cfg, reasons = md.resolve(auto_config(), CPU, ranks_here=1)
    assert cfg.train.amp == Amp.off  # no probe: an AVX2 CPU has no bf16 instructions
    assert reasons["precision"].startswith("fp32 (train.amp=off, auto:") and "AVX2" in reasons["precision"]
    monkeypatch.setattr(md.hardware, "cpu_class", lambda: "AVX-512")
    cfg, reasons = md.resolve(auto_config(), CPU, ranks_here=1)
    assert cfg.train.amp == Amp.off and "22.0x" in reasons["precision"]


def test_explicit_values_win_and_skip_the_probe(monkeypatch, keep_threads):
    def no_probe():
        raise AssertionError("the probe ran although train.amp was set")

    monkeypatch.setattr(md, "bf16_matmul_time_ratio", no_probe)
    cfg, reasons = md.resolve(tiny_config("train.amp=bf16", "run.torch_threads=1", "env.num_envs=8"), CPU)
    assert (cfg.train.amp, cfg.run.torch_threads, cfg.env.num_envs) == (Amp.bf16, 1, 8)
    assert all(v.endswith("(set)") for k, v in reasons.items() if k != "recipe")
    assert reasons["recipe"] == "preset (as written)"  # run.recipe=auto in code: the config as given


def test_resolve_on_a_gpu_uses_its_capability(monkeypatch, keep_threads):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(md, "available_memory", lambda device: 16 * 2**30)
    cfg, reasons = md.resolve(auto_config("run.torch_threads=1", "train.total_env_steps=10000000"), CUDA)
    assert cfg.train.amp == Amp.fp16 and "7.5" in reasons["precision"]
    assert cfg.env.num_envs > md.CPU_NUM_ENVS and "cuda:0" in reasons["environments"]


@pytest.mark.parametrize("usable, ranks, threads", [(8, 1, 8), (8, 2, 4), (2, 4, 1), (1, 1, 1)])
def test_threads_are_shared_by_the_ranks_of_a_machine(usable, ranks, threads):
    assert md.choose_threads(usable, ranks) == threads


def test_gpu_environments_keep_a_hundred_iterations_and_a_power_of_two():
    cfg = auto_config("train.total_env_steps=5000000", "train.num_steps=64")
    num_envs, why = md.choose_num_envs(cfg, CUDA, Amp.bf16, available=80 * 2**30)
    assert num_envs == 512 and "100 iterations" in why  # 5M / (64 x 100) = 781 -> 512
    big = auto_config("train.total_env_steps=1000000000", "train.num_steps=32")
    assert md.choose_num_envs(big, CUDA, Amp.bf16, available=80 * 2**30)[0] == md.GPU_MAX_NUM_ENVS


def test_gpu_environments_keep_a_hundred_iterations_over_every_rank_and_one_per_size_group():
    cfg = auto_config("train.total_env_steps=5000000", "train.num_steps=64")
    num_envs, why = md.choose_num_envs(cfg, CUDA, Amp.bf16, available=80 * 2**30, world_size=8)
    assert num_envs == 64 and "over 8 ranks" in why  # 5M / (64 x 100 x 8) = 97 -> 64: each rank's share
    groups = load_config("configs/size_agnostic.yaml", ["train.total_env_steps=100000"])  # 9 size groups
    amp = dataclasses.replace(groups, train=dataclasses.replace(groups.train, amp=Amp.bf16))
    num_envs, why = md.choose_num_envs(amp, CUDA, Amp.bf16, available=80 * 2**30, world_size=1)
    assert num_envs == 9 and "one environment per size group" in why


def test_cpu_ranks_of_one_machine_are_checked_against_its_memory_together(monkeypatch):
    cfg = tiny_config()
    need = sum(md.estimate_memory(cfg, cfg.env.num_envs, cfg.train.amp).values())
    md.check_memory(cfg, CPU, available=int(need / 0.9) + 1024)  # one process fits
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun --nproc_per_node=2 ... run.device=cpu
    with pytest.raises(ValueError, match="for each of the 2 ranks on this machine"):
        md.check_memory(cfg, CPU, available=int(need / 0.9) + 1024)
    md.check_memory(cfg, CUDA, available=int(need / 0.9) + 1024)  # each GPU rank has its own


def test_the_gpu_recipe_s_shortfall_on_a_small_gpu(monkeypatch):
    from agents.config.recipe import recipe_paths
    from agents.run.command_line import DEFAULT_CONFIG

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))  # an RTX 30x0 laptop
    gpu = load_config(recipe_paths(DEFAULT_CONFIG, md.Recipe.gpu), ["run.recipe=gpu"])
    monkeypatch.setattr(md, "available_memory", lambda device: 80 * 2**30)
    assert md.recipe_shortfall(gpu, CUDA) is None
    monkeypatch.setattr(md, "available_memory", lambda device: 4 * 2**30)
    assert "the GPU recipe needs about" in md.recipe_shortfall(gpu, CUDA) and "4.00 GiB is free on cuda:0" in (
        md.recipe_shortfall(gpu, CUDA)
    )
    with pytest.raises(ValueError, match=r"available: run\.recipe=preset"):  # refused, the preset's batch first
        md.check_memory(dataclasses.replace(gpu, train=dataclasses.replace(gpu.train, amp=Amp.bf16)), CUDA)


def test_gpu_environments_shrink_to_the_free_memory():
    cfg = auto_config("train.total_env_steps=1000000000", "train.num_steps=32")
    small = 256 * 2**20
    num_envs, why = md.choose_num_envs(cfg, CUDA, Amp.bf16, available=small)
    assert num_envs < md.GPU_MAX_NUM_ENVS and "free on cuda:0" in why
    assert sum(md.estimate_memory(cfg, num_envs, Amp.bf16).values()) <= md.GPU_MEMORY_SHARE * small
    assert sum(md.estimate_memory(cfg, 2 * num_envs, Amp.bf16).values()) > md.GPU_MEMORY_SHARE * small


@pytest.mark.parametrize("overrides", [(), ("model.recurrent=true", "train.chunk_length=4")])
def test_storage_estimate_is_the_real_allocation(overrides):
    from agents.algo.learner import build_learner

    cfg = tiny_config("train.amp=bf16", *overrides)
    real = build_learner(cfg, CPU).storage.nbytes()
    assert md.estimate_memory(cfg, cfg.env.num_envs, Amp.bf16)["storage"] == real


def test_an_oversized_run_is_refused_with_the_keys_to_change():
    cfg = tiny_config("env.num_envs=100000", "train.num_steps=512")
    with pytest.raises(ValueError, match=r"env\.num_envs \(now 100000\).*train\.num_steps \(now 512\)") as err:
        md.check_memory(cfg, CPU, available=2**30)
    assert str(err.value).count("lower env.num_envs (now 100000)") == 1  # each clause once
    assert str(err.value).count("lower train.num_steps (now 512)") == 1
    md.check_memory(tiny_config(), CPU, available=2**30)  # a small run fits


def test_the_trainer_refuses_an_oversized_run_before_allocating(tmp_path, capsys):
    from agents.train_mappo import main

    code = main(
        [
            "--config",
            "configs/smoke.yaml",
            "env.num_envs=200000000",
            "train.num_steps=4096",
            "train.num_minibatches=1",
            "run.device=cpu",
            f"run.dir={tmp_path / 'run'}",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "env.num_envs (now 200000000)" in err and "available" in err
    assert not (tmp_path / "run").exists()


def test_print_config_shows_the_resolved_values(capsys, monkeypatch, keep_threads):
    from agents.train_mappo import main

    monkeypatch.setattr(md, "bf16_matmul_time_ratio", lambda: 30.0)
    assert (
        main(["--print-config", "run.device=cpu", "train.amp=auto", "env.num_envs=auto", "run.torch_threads=auto"]) == 0
    )
    out = capsys.readouterr().out
    assert "auto" not in out and "amp: 'off'" in out and f"num_envs: {md.CPU_NUM_ENVS}" in out


def test_build_learner_refuses_an_unresolved_config():
    from agents.algo.learner import build_learner

    with pytest.raises(ValueError, match="resolved config"):
        build_learner(auto_config(), CPU)


@pytest.mark.parametrize(
    "override, match",
    [
        ("env.num_envs=abc", "env.num_envs"),
        ("env.num_envs=0", "env.num_envs"),
        ("run.torch_threads=-1", "run.torch_threads"),
        ("run.torch_threads=many", "run.torch_threads"),
        ("train.amp=fp8", "train.amp"),
    ],
)
def test_auto_keys_refuse_other_values(override, match):
    with pytest.raises((ValueError, TypeError), match=match):
        load_config(None, [override])


def test_an_explicit_geometry_is_checked_once_num_envs_is_known(keep_threads):
    cfg = auto_config("train.num_steps=3", "train.num_minibatches=5")  # 3 x 64 = 192 is not a multiple of 5
    with pytest.raises(ValueError, match="train.num_minibatches"):
        md.resolve(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, amp=Amp.off)), CPU, ranks_here=1)


def test_an_fp32_cpu_run_is_told_of_the_one_epoch_override():
    fp32 = tiny_config("train.amp=off", "train.update_epochs=2")
    note = md.fp32_update_note(fp32, CPU)
    assert note is not None and "docs/training.md" in note
    overrides = [word for word in note.split() if word.startswith("train.")]
    assert overrides == ["train.update_epochs=1", "train.num_minibatches=8"]
    one = tiny_config("train.amp=off", *overrides)  # the override it names is a valid one, and ends the note
    assert md.fp32_update_note(one, CPU) is None
    assert md.fp32_update_note(tiny_config("train.amp=bf16", "train.update_epochs=2"), CPU) is None
    assert md.fp32_update_note(fp32, CUDA) is None


def test_a_budget_under_one_iteration_is_told_it_trains_one(tmp_path, capsys):
    # it trained a whole iteration without a word (train.total_env_steps=100 ended "done: 512 env steps")
    from agents import train_mappo

    cfg = tiny_config("env.num_envs=4", "train.num_steps=8", "train.total_env_steps=5")
    note = md.short_budget_note(cfg)
    assert note == (
        "note: train.total_env_steps=5 is less than one iteration (env.num_envs 4 x train.num_steps 8 = 32 env "
        "steps): it trains one iteration"
    )
    assert "x 2 ranks = 64 env steps" in md.short_budget_note(cfg, world_size=2)
    assert md.short_budget_note(tiny_config("env.num_envs=4", "train.num_steps=8")) is None
    # rounded down to whole iterations: told where it drops 1 % or more (1000 trained 960, silently)
    assert md.short_budget_note(tiny_config("env.num_envs=4", "train.num_steps=16", "train.total_env_steps=1000")) == (
        "note: train.total_env_steps=1000 is not whole iterations (env.num_envs 4 x train.num_steps 16 = 64 env "
        "steps): it trains 960 env steps, 15 iterations"
    )
    assert (  # the default's 2M steps train 1,998,848: 0.06 % less, not worth a line
        md.short_budget_note(tiny_config("env.num_envs=64", "train.num_steps=64", "train.total_env_steps=2000000"))
        is None
    )
    run = tmp_path / "run"
    assert train_mappo.main([*TINY, "train.total_env_steps=5", f"run.dir={run}"]) == 0
    out = capsys.readouterr()
    assert "note: train.total_env_steps=5 is less than one iteration" in out.err and "done: 32 env steps" in out.out
