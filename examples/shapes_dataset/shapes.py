"""A synthetic shapes dataset as an ablate plugin, in one file: nothing to download, the same images everywhere.

Each example is a filled circle, square, triangle or cross of random size, position and colour on a noisy
background, drawn at `model.img_size` when it is read, from a seed of its index alone: every trial, epoch and
Ray worker sees the same image for the same index. The experiments file lists this file under `plugins:`;
ablate imports it before validating the file and on every Ray worker, and from then on `data.name: shapes` is
a dataset like the built-in ones. Installed (`pip install .`, see pyproject.toml) it is found through its
entry point instead, with no `plugins:` key.
"""

from __future__ import annotations

import numpy as np
import torch

from ablate.components import Dataset
from ablate.config import TrialConfig
from ablate.data import Splits
from ablate.data.images.loaders import carve, normalization
from ablate.registry import register_dataset

CLASSES = ("circle", "square", "triangle", "cross")
POOL = 2400
"""Examples in the pool that test, val and train are carved from (600 per class)."""
LABELS = np.arange(POOL) % len(CLASSES)
"""The label of every example of the pool, known without drawing it (what the stratified splits need)."""
SEED = 20240611
"""With an example's index, the seed of its drawing: part of what the data is."""


def draw(index: int, size: int) -> np.ndarray:
    """Example `index` as a float32 RGB image (3, size, size) in [0, 1]."""
    rng = np.random.default_rng([SEED, index])
    r = rng.uniform(0.25, 0.4) * size
    cy, cx = rng.uniform(r, size - r, 2)
    y, x = np.mgrid[:size, :size] + 0.5
    dy, dx = np.abs((y - cy) / r), np.abs((x - cx) / r)
    near, far = np.minimum(dx, dy), np.maximum(dx, dy)
    shape = CLASSES[LABELS[index]]
    if shape == "circle":
        inside = dx**2 + dy**2 <= 1
    elif shape == "square":
        inside = far <= 0.8
    elif shape == "triangle":  # apex up: half as wide as it is tall below the apex
        down = (y - cy) / r
        inside = (down <= 0.8) & (dx <= (down + 1) / 2)
    else:
        inside = (near <= 0.3) & (far <= 1)
    image = rng.uniform(0.0, 0.3, (3, 1, 1)) + rng.normal(0.0, 0.05, (3, size, size))
    image[:, inside] = rng.uniform(0.5, 1.0, (3, 1))
    return np.clip(image, 0.0, 1.0).astype(np.float32)


class ShapeImages(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Examples `index` of the pool, drawn when read and normalised: (image (3, size, size), label)."""

    def __init__(self, index: np.ndarray, size: int, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.index, self.size, self.mean, self.std = index, size, mean.view(3, 1, 1), std.view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        n = int(self.index[i])
        return (torch.from_numpy(draw(n, self.size)) - self.mean) / self.std, int(LABELS[n])


class Shapes(Dataset):
    """Four shape classes, RGB; test and val carved from one pool as the built-in mnist5k and digits are."""

    name = "shapes"

    def dims(self, cfg: TrialConfig) -> tuple[int, int]:
        return 3, len(CLASSES)

    def build(self, cfg: TrialConfig) -> Splits:
        """data.test_fraction, data.val_fraction and data.split_seed pick the splits (stratified by label);
        data.normalization the mean and std (imagenet, inception or the backbone family's)."""
        train, val, test = carve(cfg, LABELS, carve_test=True)
        mean, std = (torch.tensor(s) for s in normalization(cfg))

        def part(index: np.ndarray) -> ShapeImages:
            return ShapeImages(index, cfg.model.img_size, mean, std)

        return Splits(part(train), part(val) if len(val) else None, part(test), len(CLASSES), in_chans=3)


register_dataset(Shapes())
