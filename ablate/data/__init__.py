"""Datasets of a trial, all offline: `build_data(cfg)` returns fixed, seeded train / val / test splits.

Image datasets (`ablate.data.images`) yield (float image (C, H, W) at cfg.model.img_size, normalised, int
label); MIL datasets (`ablate.data.mil`) yield (instances float32 (n_i, F), float 0/1 label) and ship a
padding collate. Every problem with the data (missing path, unreadable or malformed file, class count that
does not match the model or the dataset's own declaration) is a `DataError` raised here, before any training
starts; a label that is not a class index is one too, raised by the splits' collate (`Labels`) on the first
batch that holds it (`ablate check` collates a sample of every split).

Splits are stratified and depend only on the labels and `split_seed` (numpy's seeded generator, our own
few lines rather than scikit-learn's, so tiny datasets never hit "too few members" errors).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor
    from torch.utils.data import Dataset

    from ablate.config import TrialConfig

__all__ = ["DataError", "Labels", "Splits", "build_data", "holdout", "kfold"]


class DataError(ValueError):
    """A dataset that cannot be built. Carries the dataset name and path so the launcher can record them;
    the three fields are the exception's args, so it survives pickling across Ray processes."""

    def __init__(self, dataset: str, path: str | os.PathLike[str] | None, problem: str) -> None:
        super().__init__(dataset, None if path is None else str(path), problem)
        self.dataset, self.path, self.problem = self.args

    def __str__(self) -> str:
        return f"dataset {self.dataset!r} at {self.path or '<no path>'}: {self.problem}"


@dataclass
class Splits:
    """What a trial trains and evaluates on; `test` is held out and never used for selection."""

    train: Dataset[tuple[Tensor, Any]]
    val: Dataset[tuple[Tensor, Any]] | None
    """None when val_fraction is 0."""
    test: Dataset[tuple[Tensor, Any]]
    num_classes: int
    """Image classes; MIL: 2 (binary, the model outputs one logit)."""
    in_chans: int
    """Image channels; MIL: instance feature width F."""
    collate: Callable[[list[tuple[Tensor, Any]]], Any] | None = None
    """None: torch's default collate. MIL: pads bags to (x (B, Nmax, F), mask (B, Nmax) True=valid, y (B,))."""


def holdout(
    labels: np.ndarray, index: np.ndarray, n_held: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split `index` into sorted (kept, held) with exactly `n_held` held out, stratified by `labels`.

    Each class gives floor(its share) and the remainder goes to the classes with the largest fractional
    shares (seeded ties), so every class is represented as evenly as the counts allow.
    """
    index = np.asarray(index)
    classes = np.unique(labels[index])
    groups = [rng.permutation(index[labels[index] == c]) for c in classes]
    share = n_held / max(len(index), 1) * np.array([len(g) for g in groups], dtype=float)
    take = np.floor(share).astype(int)
    by_remainder = np.lexsort((rng.random(len(groups)), -(share - take)))
    take[by_remainder[: n_held - take.sum()]] += 1
    held = np.concatenate([g[:t] for g, t in zip(groups, take)] + [index[:0]])
    return np.setdiff1d(index, held), np.sort(held)


def kfold(labels: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Fold id (0..folds-1) of every item: stratified, fold sizes within one of each other."""
    order = np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)])
    fold = np.empty(len(labels), dtype=np.int64)
    fold[order] = rng.permutation(folds)[np.arange(len(order)) % folds]
    return fold


def stamp(*paths: Path) -> tuple[tuple[int, int], ...]:
    """(mtime_ns, size) of files: part of a per-process cache key, so an edited file is read again."""
    return tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in paths)


def build_data(cfg: TrialConfig) -> Splits:
    """The train / val / test splits of `cfg.data` (built by its registered dataset), checked against
    `cfg.model.num_classes` and against the widths the dataset declares (`dims`, what plans and checks build
    models with), their collate checking labels (`Labels`)."""
    from ablate.registry import DATASETS

    dataset = DATASETS.get(cfg.data.name)
    splits = dataset.build(cfg)
    wanted = cfg.model.num_classes
    if wanted is not None and wanted != splits.num_classes:
        kind = "binary MIL (num_classes 2, one logit)" if cfg.task == "mil" else f"{splits.num_classes} classes"
        raise DataError(cfg.data.name, cfg.data.path, f"model.num_classes is {wanted} but the data is {kind}")
    declared = dataset.dims(cfg)
    if declared != (splits.in_chans, splits.num_classes):
        raise DataError(cfg.data.name, cfg.data.path,
                        f"its dims() declare in_chans {declared[0]} and num_classes {declared[1]}, but the splits "
                        f"it built have in_chans {splits.in_chans} and num_classes {splits.num_classes}")  # fmt: skip
    checked = Labels(cfg.data.name, cfg.data.path, splits.num_classes, splits.collate)
    return dataclasses.replace(splits, collate=checked)


@dataclass(frozen=True)
class Labels:
    """A split's collate that first checks every item's label (its last element) is a class index 0 ..
    num_classes - 1, MIL's 0/1 included: a DataError naming the dataset, where the loss would fail with torch's
    "Target 11 is out of bounds", naming nothing."""

    dataset: str
    path: str | os.PathLike[str] | None
    num_classes: int
    inner: Callable[[list[tuple[Tensor, Any]]], Any] | None
    """The dataset's own collate (None: torch's default)."""

    def __call__(self, items: list[tuple[Tensor, Any]]) -> Any:
        for item in items:
            self.check(item[-1])
        if self.inner is not None:
            return self.inner(items)
        from torch.utils.data import default_collate

        return default_collate(items)

    def check(self, label: Any) -> None:
        try:
            value = float(label)  # an int, a float, a numpy or one-element torch number
        except (TypeError, ValueError, RuntimeError):
            value = math.nan
        if not (value.is_integer() and 0 <= value < self.num_classes):
            shown = f"{value:g}" if math.isfinite(value) else repr(label)
            raise DataError(self.dataset, self.path,
                            f"an item's label {shown} is not a class index 0..{self.num_classes - 1} (its splits "
                            f"have num_classes {self.num_classes})")  # fmt: skip
