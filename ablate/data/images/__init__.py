"""Image classification data, offline: mnist5k, digits, cifar10/100 (in memory) and imagefolder (timm).

The declarations (names, shapes, paths: torch-free, what validation and planning import) are here; the loaders
are in `loaders`, imported when a trial builds its data.

Splits:
- mnist5k, digits: test (test_fraction) and val (val_fraction, both of the whole set) are carved from
  the one pool, stratified and seeded by split_seed.
- cifar10/100: the official test batch is the test set; val is carved from the training batches.
- imagefolder: `train/` is required. With a `test/` folder, train/val/test are the three folders. Without
  one, `val/` is the held-out test set (the ImageNet convention: published numbers are on val) and the
  selection split is carved from train/ (val_fraction of it); without `val/` too, both are carved.
  test_fraction only applies where a test set is carved.

In-memory sets hold one pre-resized, normalised float tensor (normalisation statistics from the training
split), so an epoch costs only the model. imagefolder goes through timm's dataset and transform factories
with the recipe's RandAugment and random erasing; mixup/cutmix belong to the training loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate import components
from ablate.data import DataError
from ablate.registry import register_dataset

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.data import Splits


class Images(components.Dataset):
    """An image classification dataset of this package: a given path must exist, then its loader builds
    (`loaders.LOADERS[name]`)."""

    def __init__(self, name: str, dims: tuple[int, int] | None, needs_path: bool = False) -> None:
        self.name, self.fixed_dims, self.needs_path = name, dims, needs_path

    def dims(self, cfg: TrialConfig) -> tuple[int, int]:
        """Fixed for the packaged and CIFAR sets; imagefolder counts the class folders under train/ (or
        takes model.num_classes)."""
        if self.fixed_dims is not None:
            return self.fixed_dims
        path = Path(str(cfg.data.path)).expanduser()
        classes = cfg.model.num_classes or sum(p.is_dir() for p in (path / "train").glob("*"))
        if not classes:
            raise ValueError(
                f"imagefolder at {path}: no class folders under train/ to count; set model.num_classes "
                "(e.g. 1000 for ImageNet-1k) so its cost can be computed without the data"
            )
        return 3, classes

    def build(self, cfg: TrialConfig) -> Splits:
        path = cfg.data.path
        if path is not None and not Path(path).expanduser().exists():
            raise DataError(cfg.data.name, path, "path does not exist")
        from ablate.data.images.loaders import LOADERS

        return LOADERS[self.name](cfg)

    def describe(self, d: dict[str, Any]) -> str:
        """A folder of images is named by its contents (`data.id`)."""
        return str(d.get("id") or self.name) if self.fixed_dims is None else self.name


register_dataset(Images("mnist5k", (1, 10)))
register_dataset(Images("digits", (1, 10)))
register_dataset(Images("cifar10", (3, 10), needs_path=True))
register_dataset(Images("cifar100", (3, 100), needs_path=True))
register_dataset(Images("imagefolder", None, needs_path=True))
