"""Seed 001: train on embeddings as they are extracted, one batch at a time, in bounded memory.

A frozen vision model turns each batch of images into per-layer patch embeddings (the seed's
"trajectories": one vector per layer for every image position) and an autoencoder learns them at
once, with ``stream_train``: nothing is collected across batches, so memory stays flat however
large the data set. ``accumulate=2`` makes one optimizer step of two batches, bf16 autocast runs
on a GPU, and a batch that runs out of memory is split without changing the step. A tiny
random-weight CLIP vision tower stands in for the seed's extractor.

Run from the repository root: ``python examples/seed001_streaming_embeddings.py`` (a GPU when present).
"""

import torch
import toy_models as toy  # tiny random-weight models (examples/toy_models.py)
from torch import nn
from torch.utils.data import DataLoader, Dataset

from agents.placement import stream_train


class RandomImages(Dataset):
    """Stands in for an image folder: image ``i`` is made when it is asked for, never kept."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(i))


def main(images=256, batch_size=16, accumulate=2):
    device = toy.gpus_or_two_cpus()[0]  # one device: the first GPU, else the CPU (saying why)
    extractor = toy.tiny_clip().vision_model.to(device).requires_grad_(False)  # frozen
    layers, width = extractor.config.num_hidden_layers + 1, extractor.config.hidden_size
    autoencoder = nn.Sequential(nn.Linear(layers * width, 32), nn.GELU(), nn.Linear(32, layers * width)).to(device)
    opt = torch.optim.AdamW(autoencoder.parameters(), lr=3e-3)

    def loss_fn(pixels):  # pixels: [B, 3, 32, 32], already on the device
        with torch.no_grad():
            hidden = extractor(pixel_values=pixels, output_hidden_states=True).hidden_states
            traj = torch.stack(hidden, 2)[:, 1:].flatten(0, 1).flatten(1)  # [B * positions, layers * width]
        return nn.functional.mse_loss(autoencoder(traj).float(), traj.float())

    loader = DataLoader(RandomImages(images), batch_size=batch_size)
    precision = "bf16" if device.startswith("cuda") else None
    stats = stream_train(
        loss_fn, loader, opt, device=device, accumulate=accumulate, precision=precision, track_memory=True
    )
    grew = max(stats.memory[2:]) - stats.memory[2]
    print(
        f"{stats.samples} images, {stats.steps} optimizer steps, loss {stats.losses[0]:.4f} -> {stats.losses[-1]:.4f}"
    )
    print(f"memory after batch 3: {stats.memory[2] / 2**20:.0f} MiB, grew by {grew / 2**20:.1f} MiB over the stream")
    return stats


if __name__ == "__main__":
    from command_line import run  # examples/command_line.py: --help and the sizes as options

    run(main, __doc__)
