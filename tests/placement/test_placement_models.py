"""The utilities on real (tiny, random-weight) diffusers and transformers models, on CPU workers."""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("diffusers", reason="needs the [pipelines] extra (diffusers)")
pytest.importorskip("transformers", reason="needs the [pipelines] extra (transformers)")

import toy_models as toy  # noqa: E402 -- examples/toy_models.py, on the path by conftest.py

from agents.placement import Stage, StagePipeline, dp_map, model_bytes, place_models  # noqa: E402


@pytest.mark.timeout(120)
def test_dp_map_generates_and_scores_like_one_process():
    prompts = toy.random_prompts(4, batch=1, seed=1)
    make = functools.partial(toy.make_generate_and_score, steps=2)
    out = dp_map(make, prompts, ["cpu", "cpu"], progress=False)
    local = make(torch.device("cpu"))
    for p, got in zip(prompts, out):
        want = local(p)
        assert got["images"].shape == (1, 3, 32, 32) and got["scores"].shape == (1,)
        assert torch.allclose(got["images"], want["images"], atol=1e-5)
        assert torch.allclose(got["scores"], want["scores"], atol=1e-5)


def test_policy_generator_reward_pipeline_matches_sequential():
    policy = toy.PromptPolicy(toy.tiny_policy_lm(), "cpu")
    generator = toy.ImageGenerator(toy.tiny_ddpm(), "cpu", steps=2)
    reward = toy.ClipReward(toy.tiny_clip(), "cpu")
    prompts = toy.random_prompts(3, batch=1)
    sequential = [reward(generator(policy(p))) for p in prompts]
    pipe = StagePipeline(
        [Stage(policy, "cpu", "policy"), Stage(generator, "cpu", "generator"), Stage(reward, "cpu", "reward")]
    )
    for got, want in zip(pipe.run(prompts), sequential):
        assert torch.allclose(got, want)


def test_sizes_of_real_models_from_meta_and_their_placement():
    from transformers import CLIPConfig, CLIPModel

    clip = toy.tiny_clip()
    with torch.device("meta"):
        meta_clip = CLIPModel(clip.config)
        full_clip = CLIPModel(CLIPConfig())  # CLIP ViT-B/32 shape: about 151M parameters
    assert model_bytes(meta_clip) == model_bytes(clip)
    assert 150e6 * 4 < model_bytes(full_clip, buffers=False) < 152e6 * 4
    assert model_bytes(full_clip, torch.float16, buffers=False) * 2 == model_bytes(full_clip, buffers=False)
    ddpm = toy.tiny_ddpm()
    assert model_bytes(ddpm) == model_bytes(ddpm.unet) > 0  # the scheduler holds no module
    sizes = {"policy": model_bytes(toy.tiny_policy_lm()), "generator": model_bytes(ddpm), "reward": model_bytes(clip)}
    free = {f"cuda:{i}": 8 * 2**20 for i in range(3)}
    assert sorted(place_models(sizes, free).values()) == ["cuda:0", "cuda:1", "cuda:2"]
    assert set(place_models(sizes, free, strategy="pack").values()) == {"cuda:0"}
