"""Seed 002: score a folder of images with a vision-language model, one replica per GPU, in batches.

``device_map="auto"`` put a model that fits one GPU on one GPU and left the others idle. Here
``dp_map`` starts one worker process per GPU, each builds the model once, and batches of
``batch_size`` images go to whichever worker is free; scores come back in input order, and the
journal keeps every finished batch, so a rerun after a crash scores only what is left. A tiny
random-weight LLaVA (transformers, with its processor) stands in for Qwen3-VL-30B.

Run from the repository root: ``python examples/seed002_vlm_scoring.py`` (every GPU when present,
two CPU workers otherwise); it writes demo images and scores.json under ./seed002_vlm_scoring/.
"""

import json
from pathlib import Path

import torch
import toy_models as toy  # tiny random-weight models (examples/toy_models.py)
from PIL import Image

from agents.placement import dp_map

QUESTION = "user : <image> is there a cat in the picture ? assistant :"


def make_scorer(device):
    """Runs once in each worker: the model on the worker's device; returns ``paths -> P("yes")``."""
    # a real job: AutoModelForImageTextToText.from_pretrained(NAME, dtype=torch.bfloat16).to(device)
    #             and AutoProcessor.from_pretrained(NAME, padding_side="left")
    model, processor = toy.tiny_vlm()
    model.to(device)
    yes = processor.tokenizer.convert_tokens_to_ids("yes")

    @torch.no_grad()
    def score(paths):  # a batch: up to batch_size image paths
        images = [Image.open(p).convert("RGB") for p in paths]
        x = processor(images=images, text=[QUESTION] * len(images), padding=True, return_tensors="pt")
        logits = model(**x.to(device)).logits[:, -1].float()
        return logits.softmax(-1)[:, yes].tolist()

    return score


def main(n=16, batch_size=4, folder="seed002_vlm_scoring"):
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu", "cpu"]
    paths = [str(p) for p in toy.save_random_images(Path(folder) / "images", n)]
    journal = Path(folder) / "scores.journal"
    scores = dp_map(make_scorer, paths, devices, batch_size=batch_size, journal=journal, progress=False)
    result = {Path(p).name: s for p, s in zip(paths, scores)}
    (Path(folder) / "scores.json").write_text(json.dumps(result, indent=1))
    print(f"scored {len(result)} images on {devices}; first: {next(iter(result.items()))}")
    return result


if __name__ == "__main__":
    main()
