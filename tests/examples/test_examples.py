"""The seed notes' four jobs in examples/: in-process checks at tiny sizes, then one script run each.

The examples are scripts run from the repository, not a package: they are found through this
file's path, imported by name from examples/ for the in-process checks, and run as
``python examples/<script>.py`` (their own small defaults, CPU workers here) in a subprocess.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("diffusers", reason="needs the [pipelines] extra (diffusers)")
pytest.importorskip("transformers", reason="needs the [pipelines] extra (transformers)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
from examples import toy_models as toy  # noqa: E402 -- the tiny models, from the repository root

SCRIPTS = sorted(p.name for p in EXAMPLES.glob("seed*.py"))


@pytest.fixture(scope="module")
def examples():
    """The example modules, imported by name from examples/ (as a copied script would be)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield {name[:7]: importlib.import_module(name[:-3]) for name in SCRIPTS}
    finally:
        sys.path.remove(str(EXAMPLES))


def test_there_is_one_example_per_seed_job_and_the_readme_names_each():
    assert [s[:7] for s in SCRIPTS] == ["seed000", "seed001", "seed002", "seed003"]
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for script in SCRIPTS:
        assert f"python examples/{script}" in readme
        assert len((EXAMPLES / script).read_text(encoding="utf-8").splitlines()) <= 90  # a few dozen lines


def test_grpo_advantages_against_a_hand_computation(examples):
    adv = examples["seed000"].group_advantages(torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    # group 1: mean 2, sample std 1 -> (r - 2) / 1; group 2: all equal -> 0 (the 1e-6 keeps it finite)
    torch.testing.assert_close(adv, torch.tensor([[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), atol=1e-5, rtol=0)


def test_grpo_loop_takes_one_policy_step_per_iteration(examples, monkeypatch):
    module, build, built = examples["seed000"], toy.tiny_policy_lm, []
    monkeypatch.setattr(module.toy, "tiny_policy_lm", lambda **kw: built.append(build(**kw)) or built[-1])
    history = module.main(prompts=["a red cat", "a house"], group=2, iterations=2, new_tokens=3, steps=1)
    assert [h["steps"] for h in history] == [1, 1]
    assert all(-1.0 <= h["reward"] <= 1.0 and math.isfinite(h["loss"]) for h in history)
    fresh = build(vocab_size=built[0].config.vocab_size)
    moved = [not torch.equal(a, b.to(a.device)) for a, b in zip(fresh.parameters(), built[0].parameters())]
    assert any(moved)  # the policy-gradient steps reached the policy the stages generated with


def test_streaming_example_learns_batch_by_batch(examples):
    stats = examples["seed001"].main(images=48, batch_size=8, accumulate=2)
    assert stats.batches == 6 and stats.steps == 3 and stats.samples == 48 and len(stats.memory) == 6
    assert stats.losses[-1] < stats.losses[0]


def test_vlm_scores_of_a_batch_equal_those_of_single_images(examples, tmp_path):
    score = examples["seed002"].make_scorer("cpu")
    paths = [str(p) for p in toy.save_random_images(tmp_path, 3, seed=1)]
    batched, single = score(paths), [score([p])[0] for p in paths]
    assert len(batched) == 3 and all(0.0 < s < 1.0 for s in batched)
    assert batched == pytest.approx(single, abs=1e-5)  # left padding: the batch changes no score
    assert len(set(batched)) == 3  # and the images do


def test_edits_do_not_depend_on_the_batch_they_ran_in(examples, tmp_path):
    inputs = toy.save_random_images(tmp_path / "in", 2)
    pairs = [(str(p), "make the sky red") for p in inputs]
    edit = examples["seed003"].make_editor("cpu", tmp_path / "out", steps=1)
    saved = edit(pairs)
    assert [Path(p).name for p in saved] == ["image-000-edited.png", "image-001-edited.png"]
    together = [np.asarray(Image.open(p).convert("RGB"), dtype=int) for p in saved]
    alone = [np.asarray(Image.open(edit([pair])[0]).convert("RGB"), dtype=int) for pair in pairs]
    for a, b in zip(together, alone):  # each edit's noise is seeded from its file name
        assert a.shape == (32, 32, 3) and np.abs(a - b).max() <= 2
    assert np.abs(together[0] - together[1]).max() > 10  # and the two inputs' edits differ


def test_an_unreadable_image_costs_its_own_score_and_another_question_another_journal(examples, tmp_path, monkeypatch):
    module, folder = examples["seed002"], tmp_path / "job"
    toy.save_random_images(folder / "images", 4)
    broken = folder / "images" / "image-002.png"
    broken.write_bytes(broken.read_bytes()[:60])  # truncated, as a killed writer leaves a file
    scores = module.main(n=4, batch_size=2, folder=str(folder))
    assert sorted(scores) == ["image-000.png", "image-001.png", "image-003.png"]  # no scores.json at all before
    assert json.loads((folder / "scores.json").read_text()) == scores
    assert list(json.loads((folder / "failed.json").read_text())) == ["image-002.png"]
    monkeypatch.setattr(module, "QUESTION", "user : <image> is there a dog in the picture ? assistant :")
    with pytest.raises(ValueError, match="was written for job_key"):  # it answered with the cat's scores before
        module.main(n=4, batch_size=2, folder=str(folder))


def test_edits_are_journaled_and_renamed_whole(examples, tmp_path):
    module, folder = examples["seed003"], tmp_path / "job"
    first = module.main(n=2, batch_size=1, folder=str(folder))
    stamps = {p: Path(p).stat().st_mtime_ns for p in first}
    assert module.main(n=2, batch_size=1, folder=str(folder)) == first  # a rerun edits nothing again
    assert {p: Path(p).stat().st_mtime_ns for p in first} == stamps
    assert sorted(p.name for p in (folder / "edited").iterdir()) == ["image-000-edited.png", "image-001-edited.png"]


def test_the_image_processor_of_transformers_4(monkeypatch):
    import types

    import transformers

    # transformers 4.x has no CLIPImageProcessorPil (the examples failed to import there): its PIL processor is
    # CLIPImageProcessor (a stand-in module: transformers' lazy module would find the 5.x name again)
    four = types.SimpleNamespace(CLIPImageProcessor=transformers.CLIPImageProcessorPil)
    monkeypatch.setitem(sys.modules, "transformers", four)
    assert toy.tiny_image_processor().crop_size == {"height": 32, "width": 32}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs_as_a_script(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=220
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if not torch.cuda.is_available():  # every script says it runs on the CPU (README: "saying so")
        assert "no GPU visible to torch" in done.stdout
    if script.startswith("seed000"):
        assert done.stdout.count("mean reward") == 2
    elif script.startswith("seed001"):
        assert "256 images, 8 optimizer steps" in done.stdout
    elif script.startswith("seed002"):
        scores = json.loads((tmp_path / "seed002_vlm_scoring" / "scores.json").read_text())
        assert len(scores) == 16 and all(0.0 < s < 1.0 for s in scores.values())
    else:
        assert len(list((tmp_path / "seed003_diffusion_editing" / "edited").glob("*-edited.png"))) == 8


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_and_a_mistyped_option_start_no_worker(script, tmp_path):
    # before, every argument was ignored: `--help` (or `--batchsize 8`) ran the whole job, on every GPU
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def run(*args):
        command = [sys.executable, str(EXAMPLES / script), *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)

    shown = run("--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"Seed {script[4:7]}" in shown.stdout and "default: " in shown.stdout  # its note, and its sizes as options
    bad = run("--batchsize", "8")
    assert bad.returncode == 2 and "unrecognized arguments: --batchsize" in bad.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, no worker started
