"""Seed 003: edit a folder of images with a diffusion pipeline, one pipeline per GPU, through a pool.

Data parallel beats splitting a pipeline that fits one GPU: a ``WorkerPool`` keeps one pipeline
per GPU (built once per worker), batches of (image, instruction) pairs go to whichever worker is
free, each worker saves its edits as it finishes them, and ``imap`` yields their paths in input
order as they come. Each edit's noise is seeded from its file name, so the result does not depend
on which worker made it. Each edit is saved under a temporary name and renamed, so a killed worker
leaves no truncated image, and a journal records the finished batches: a rerun after a crash edits
only what is left. A tiny random-weight InstructPix2Pix pipeline (diffusers) stands in for Qwen-Image-Edit.

Run from the repository root: ``python examples/seed003_diffusion_editing.py`` (every GPU when
present, two CPU workers otherwise); it writes demo inputs and the edits under ./seed003_diffusion_editing/.
"""

import functools
import os
import zlib
from pathlib import Path

import torch
import toy_models as toy  # tiny random-weight models (examples/toy_models.py)
from PIL import Image

from agents.placement import WorkerPool

INSTRUCTIONS = ["make the sky red", "turn it into snow", "add a tree", "make it night"]


def make_editor(device, out_dir, steps=2):
    """Runs once in each worker: the pipeline on its device; returns ``[(path, instruction)] -> saved paths``."""
    # a real job: QwenImageEditPipeline.from_pretrained(NAME, torch_dtype=torch.bfloat16).to(device)
    pipe = toy.tiny_sd_pipeline(edit=True).to(device)
    Path(out_dir).mkdir(parents=True, exist_ok=True)

    @torch.no_grad()
    def edit(batch):
        images = [Image.open(path).convert("RGB") for path, _ in batch]
        seeds = [torch.Generator().manual_seed(zlib.crc32(Path(path).name.encode())) for path, _ in batch]
        prompts = [text for _, text in batch]
        edited = pipe(image=images, prompt=prompts, num_inference_steps=steps, generator=seeds).images
        saved = [Path(out_dir, Path(path).stem + "-edited.png") for path, _ in batch]
        for image, target in zip(edited, saved):
            tmp = target.with_name(f".{target.name}.tmp")
            image.save(tmp, format="PNG")
            os.replace(tmp, target)
        return [str(p) for p in saved]

    return edit


def main(n=8, batch_size=2, folder="seed003_diffusion_editing"):
    devices = toy.gpus_or_two_cpus()
    inputs = toy.save_random_images(Path(folder) / "inputs", n)
    out_dir = Path(folder) / "edited"
    pairs = [(str(p), INSTRUCTIONS[i % len(INSTRUCTIONS)]) for i, p in enumerate(inputs)]
    with WorkerPool(functools.partial(make_editor, out_dir=str(out_dir)), devices) as pool:
        edited = list(pool.imap(pairs, batch_size=batch_size, journal=Path(folder) / "edits.journal", progress=False))
    print(f"edited {len(edited)} images on {devices} into {out_dir}")
    return edited


if __name__ == "__main__":
    from command_line import run  # examples/command_line.py: --help and the sizes as options

    run(main, __doc__)
