"""Tiny real models for the tests, the benchmark and the docs: random weights, built from configs.

The VLM-policy / SD3 / CLIP trio of seed 000 at toy size: a transformers GPT-2 language model as
the prompt policy, a diffusers ``UNet2DModel`` + ``DDPMScheduler`` pipeline as the image generator
and a transformers ``CLIPModel`` as the reward. No weights are downloaded. Needs the
``[pipelines]`` extra (diffusers, transformers); they are imported only when a builder runs.
"""

from __future__ import annotations

from typing import Any

import torch

VOCAB = 1000
PROMPT_LEN = 16


def tiny_clip(seed: int = 0, *, image_size: int = 32, hidden: int = 64, layers: int = 2) -> Any:
    """A random-weight ``transformers.CLIPModel`` (vocab 1000, ``image_size`` px, patch 4), in eval mode."""
    from transformers import CLIPConfig, CLIPModel

    text = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_attention_heads=4,
        num_hidden_layers=layers,
        max_position_embeddings=PROMPT_LEN * 2,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    vision = dict(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_attention_heads=4,
        num_hidden_layers=layers,
        image_size=image_size,
        patch_size=4,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)).eval()


def tiny_ddpm(seed: int = 0, *, sample_size: int = 32) -> Any:
    """A random-weight diffusers ``DDPMPipeline`` (``UNet2DModel`` + ``DDPMScheduler``), RGB ``sample_size`` px."""
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DModel(
            sample_size=sample_size,
            in_channels=3,
            out_channels=3,
            layers_per_block=1,
            block_out_channels=(32, 64),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
        ).eval()
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_policy_lm(seed: int = 0, *, hidden: int = 64, layers: int = 2) -> Any:
    """A random-weight transformers ``GPT2LMHeadModel`` (vocab 1000), in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = GPT2Config(
            vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=1
        )
        return GPT2LMHeadModel(config).eval()


class PromptPolicy:
    """Policy stage: prompt token ids ``(B, L)`` -> "enhanced" ids (the LM's greedy next tokens)."""

    def __init__(self, model: Any, device: str | torch.device):
        self.device = torch.device(device)
        self.model = model.to(self.device)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        ids = input_ids.to(self.device)
        return {"prompt_ids": ids, "enhanced_ids": self.model(ids).logits.argmax(-1)}


class ImageGenerator:
    """Generator stage: ``{"enhanced_ids": (B, L), ...}`` -> the same dict plus ``"images"`` (B, 3, H, W) in [0, 1].

    The unconditional toy UNet stands in for SD3; each image's noise is seeded from its prompt's
    tokens, so the output is a deterministic function of the prompt on any device or worker.
    """

    def __init__(self, pipe: Any, device: str | torch.device, steps: int = 4):
        self.device = torch.device(device)
        self.pipe = pipe.to(self.device)
        self.steps = steps

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        images = []
        for ids in batch["enhanced_ids"]:
            g = torch.Generator("cpu").manual_seed(int(ids.long().sum()))
            out = self.pipe(batch_size=1, generator=g, num_inference_steps=self.steps, output_type="np").images
            images.append(torch.from_numpy(out).permute(0, 3, 1, 2))
        return {**batch, "images": torch.cat(images).to(self.device)}


class ClipReward:
    """Reward stage: ``{"images": (B, 3, H, W), "prompt_ids": (B, L)}`` -> CLIP cosine similarity, shape (B,)."""

    def __init__(self, model: Any, device: str | torch.device):
        self.device = torch.device(device)
        self.model = model.to(self.device)

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.model(input_ids=batch["prompt_ids"].to(self.device), pixel_values=batch["images"].to(self.device))
        img = torch.nn.functional.normalize(out.image_embeds, dim=-1)
        txt = torch.nn.functional.normalize(out.text_embeds, dim=-1)
        return (img * txt).sum(-1)


# ---- module-level worker factories for dp_map (picklable; each builds its model once per worker)
def make_clip_scorer(device: torch.device, *, image_size: int = 32, hidden: int = 64, layers: int = 2) -> ClipReward:
    """dp_map worker: a :class:`ClipReward` on ``device`` (seed 0, so every worker has the same weights).

    Bind the size with ``functools.partial(make_clip_scorer, image_size=64)``.
    """
    return ClipReward(tiny_clip(0, image_size=image_size, hidden=hidden, layers=layers), device)


def make_ddpm_generator(device: torch.device) -> ImageGenerator:
    """dp_map worker: an :class:`ImageGenerator` on ``device`` (seed 0, 4 denoising steps)."""
    return ImageGenerator(tiny_ddpm(0), device, steps=4)


class GenerateAndScore:
    """Generator then reward in one worker: prompt ids ``(B, L)`` -> ``{"images", "scores"}`` (seeds 002/003)."""

    def __init__(self, device: str | torch.device, steps: int = 4):
        self.generate = ImageGenerator(tiny_ddpm(0), device, steps=steps)
        self.reward = ClipReward(tiny_clip(0), device)

    def __call__(self, prompt_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = self.generate({"prompt_ids": prompt_ids, "enhanced_ids": prompt_ids})
        return {"images": batch["images"], "scores": self.reward(batch)}


def make_generate_and_score(device: torch.device, *, steps: int = 4) -> GenerateAndScore:
    """dp_map worker: a :class:`GenerateAndScore` on ``device`` (``steps`` denoising steps)."""
    return GenerateAndScore(device, steps=steps)


def random_prompts(n: int, batch: int, seed: int = 0) -> list[torch.Tensor]:
    """``n`` batches of random prompt token ids, each ``(batch, 16)``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (batch, PROMPT_LEN), generator=g) for _ in range(n)]


def random_clip_items(n: int, batch: int, image_size: int = 32, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` CLIP-scoring items: random images in [0, 1] and prompt ids, ``batch`` pairs each."""
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "images": torch.rand(batch, 3, image_size, image_size, generator=g),
            "prompt_ids": torch.randint(2, VOCAB, (batch, PROMPT_LEN), generator=g),
        }
        for _ in range(n)
    ]
