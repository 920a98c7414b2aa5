"""Tiny real models for the tests, the benchmark, the examples and the docs: random weights, from configs.

The VLM-policy / SD3 / CLIP trio of seed 000 at toy size: a transformers GPT-2 language model as
the prompt policy, a diffusers ``UNet2DModel`` + ``DDPMScheduler`` pipeline as the image generator
and a transformers ``CLIPModel`` as the reward. For the examples (``examples/``), the same library
classes a real job loads with ``from_pretrained``: a word-level tokenizer
(``PreTrainedTokenizerFast``), a Stable Diffusion text-to-image pipeline and its
InstructPix2Pix editing twin (diffusers), and a LLaVA vision-language model with its processor
(transformers). No weights are downloaded. Needs the ``[pipelines]`` extra (diffusers,
transformers); they are imported only when a builder runs.

Not part of the library: the example scripts import it as ``toy_models`` (their folder is on
``sys.path`` when run as ``python examples/<script>.py``), the tests put examples/ on the path
(tests/placement/conftest.py) and the benchmarks import ``examples.toy_models`` from the
repository root.
"""

from __future__ import annotations

import os
from pathlib import Path
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


def tiny_policy_lm(seed: int = 0, *, hidden: int = 64, layers: int = 2, vocab_size: int = VOCAB) -> Any:
    """A random-weight transformers ``GPT2LMHeadModel`` (bos 0, eos and pad 1), in eval mode.

    Pass ``vocab_size=len(tiny_tokenizer())`` to generate only ids the tiny tokenizer can decode.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden,
            n_layer=layers,
            n_head=4,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
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


# ---- the examples' models: the classes a real job loads with from_pretrained, at toy size
WORDS = (
    "a an the of in on over under with and is there photo picture image painting drawing of cat dog bird "
    "horse car house tree flower mountain river city street sky sea red blue green yellow black white "
    "bright dark small big old new sunset night morning snow rain make it more less add remove turn into "
    "style yes no user assistant ? : ."
).split()
SPECIALS = ("<s>", "</s>", "<unk>", "<image>")  # ids 0-3: bos, eos (also pad), unknown, image placeholder


def tiny_tokenizer(*, padding_side: str = "right", max_length: int = PROMPT_LEN) -> Any:
    """A word-level ``transformers.PreTrainedTokenizerFast`` over :data:`WORDS` (bos 0, eos and pad 1).

    ``padding_side="right"`` (text encoders: CLIP, a diffusion pipeline's) adds ``<s> ... </s>``;
    ``"left"`` (decoders: batched ``generate()``, the VLM's last-token scores) adds only ``<s>``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    vocab = {t: i for i, t in enumerate(dict.fromkeys(SPECIALS + tuple(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    template = "<s> $A </s>" if padding_side == "right" else "<s> $A"
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("<s>", 0), ("</s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"},
        padding_side=padding_side,
        model_max_length=max_length,
    )


def tiny_sd_pipeline(seed: int = 0, *, edit: bool = False) -> Any:
    """A random-weight diffusers ``StableDiffusionPipeline`` (32 px), or with ``edit`` the
    ``StableDiffusionInstructPix2PixPipeline`` (image + instruction -> edited image); no safety checker."""
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        EulerAncestralDiscreteScheduler,
        StableDiffusionInstructPix2PixPipeline,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = tiny_tokenizer(padding_side="right")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text = CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=PROMPT_LEN,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
        unet = UNet2DConditionModel(
            sample_size=16,
            in_channels=8 if edit else 4,  # InstructPix2Pix: the noisy latents + the input image's
            out_channels=4,
            layers_per_block=1,
            block_out_channels=(16, 32),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=8,
        )
        vae = AutoencoderKL(
            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
            block_out_channels=(16, 32),
            latent_channels=4,
            norm_num_groups=8,
            sample_size=32,
        )
        parts = dict(text_encoder=CLIPTextModel(text).eval(), unet=unet.eval(), vae=vae.eval(), tokenizer=tokenizer)
    ddim = dict(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1)
    if edit:
        pipe = StableDiffusionInstructPix2PixPipeline(
            **parts,
            scheduler=EulerAncestralDiscreteScheduler(**ddim),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
    else:
        pipe = StableDiffusionPipeline(
            **parts,
            scheduler=DDIMScheduler(**ddim, clip_sample=False, set_alpha_to_one=False),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_image_processor() -> Any:
    """A CLIP image processor for 32 px images: the PIL one (transformers 5 names it ``CLIPImageProcessorPil``;
    4.x, which the ``pipelines`` extra admits, has it as ``CLIPImageProcessor``)."""
    import transformers

    kind = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return kind(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})


def tiny_clip_processor() -> Any:
    """A ``transformers.CLIPProcessor`` for :func:`tiny_clip`: 32 px images, the right-padded tiny tokenizer."""
    from transformers import CLIPProcessor

    return CLIPProcessor(image_processor=tiny_image_processor(), tokenizer=tiny_tokenizer(padding_side="right"))


def tiny_vlm(seed: int = 0) -> tuple[Any, Any]:
    """A random-weight transformers ``LlavaForConditionalGeneration`` (CLIP vision tower, Llama text
    model, 32 px images) and its ``LlavaProcessor`` (left padding): ``AutoModelForImageTextToText``'s kind."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    tokenizer = tiny_tokenizer(padding_side="left", max_length=64)
    images = tiny_image_processor()
    # 16 patches + the CLS token the vision tower adds, which "default" feature selection drops again
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,
    )
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    vision.update(num_attention_heads=4, image_size=32, patch_size=8)
    text = dict(model_type="llama", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64)
    text.update(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    text.update(bos_token_id=0, eos_token_id=1, pad_token_id=1)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlavaForConditionalGeneration(config).eval(), processor


def save_random_images(folder: str | os.PathLike, n: int, *, size: int = 32, seed: int = 0) -> list[Path]:
    """Write ``n`` random RGB PNGs (``size`` px) to ``folder`` as ``image-000.png``, ...; return their paths.

    Stands in for a folder of real images; files already there are kept as they are.
    """
    import numpy as np
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        path = folder / f"image-{i:03d}.png"
        if not path.exists():
            Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


def visible_gpus() -> list[str]:
    """Every GPU torch sees; with none, says why: a CPU-only torch build (pip's default wheel on Windows) would
    otherwise load a real model into host memory without a word."""
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if not gpus:
        build = "a CPU-only build: docs/install.md" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        print(f"no GPU visible to torch {torch.__version__} ({build}): the CPU instead")
    return gpus


def gpus_or_two_cpus() -> list[str]:
    """Every GPU torch sees, else two CPU workers (saying why: `visible_gpus`)."""
    return visible_gpus() or ["cpu", "cpu"]
