"""Seed 002: score a folder of images with a vision-language model, one replica per GPU, in batches.

``device_map="auto"`` put a model that fits one GPU on one GPU and left the others idle. Here
``dp_map`` starts one worker process per GPU, each builds the model once, and batches of
``batch_size`` images go to whichever worker is free; scores come back in input order, and the
journal keeps every finished batch, so a rerun after a crash scores only what is left. A tiny
random-weight LLaVA (transformers, with its processor) stands in for Qwen3-VL-30B.

Run from the repository root: ``python examples/seed002_vlm_scoring.py`` (every GPU when present,
two CPU workers otherwise); it writes demo images and scores.json under ./seed002_vlm_scoring/ (and
failed.json, naming any image that could not be scored).
"""

import functools
import json
import os
from pathlib import Path

import torch
import toy_models as toy  # tiny random-weight models (examples/toy_models.py)
from PIL import Image

from agents.placement import ItemFailure, dp_map

QUESTION = "user : <image> is there a cat in the picture ? assistant :"


def make_scorer(device, question=QUESTION, seed=0):
    """Runs once in each worker: the model on the worker's device; returns ``paths -> P("yes")``."""
    # a real job: AutoModelForImageTextToText.from_pretrained(NAME, dtype=torch.bfloat16, device_map=str(device))
    #             and AutoProcessor.from_pretrained(NAME, padding_side="left"); NAME an argument, as question is
    model, processor = toy.tiny_vlm(seed=seed)
    model.to(device)
    yes = processor.tokenizer.convert_tokens_to_ids("yes")

    @torch.no_grad()
    def score(paths):  # a batch: up to batch_size image paths
        images = [Image.open(p).convert("RGB") for p in paths]
        x = processor(images=images, text=[question] * len(images), padding=True, return_tensors="pt")
        logits = model(**x.to(device)).logits[:, -1].float()
        return logits.softmax(-1)[:, yes].tolist()

    return score


def main(n=16, batch_size=4, folder="seed002_vlm_scoring"):
    devices = toy.gpus_or_two_cpus()
    paths = [str(p) for p in toy.save_random_images(Path(folder) / "images", n)]
    journal = Path(folder) / "scores.journal"
    # what configures the scorer goes in as arguments: they are part of the journal's job key, so a rerun with
    # another question is refused (name another journal) instead of answered with the old scores
    scorer = functools.partial(make_scorer, question=QUESTION, seed=0)
    # "collect": an unreadable image costs its own score, not the other thousands (its failure is recorded)
    scores = dp_map(scorer, paths, devices, batch_size=batch_size, journal=journal, on_error="collect", progress=False)
    result = {Path(p).name: s for p, s in zip(paths, scores) if not isinstance(s, ItemFailure)}
    failed = {Path(p).name: s.error for p, s in zip(paths, scores) if isinstance(s, ItemFailure)}
    for name, value in (("scores.json", result), ("failed.json", failed)):
        tmp = Path(folder) / f".{name}.tmp"  # written whole, then renamed: a kill leaves the old file
        tmp.write_text(json.dumps(value, indent=1), encoding="utf-8")
        os.replace(tmp, Path(folder) / name)
    print(f"scored {len(result)} images on {devices} ({len(failed)} failed); first: {next(iter(result.items()), None)}")
    return result


if __name__ == "__main__":
    from command_line import run  # examples/command_line.py: --help and the sizes as options

    run(main, __doc__)
