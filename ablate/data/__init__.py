"""Datasets of a trial, all offline: `build_data(cfg)` returns fixed, seeded train / val / test splits.

Image datasets (`ablate.data.images`) yield (float image (C, H, W) at cfg.model.img_size, normalised, int
label); MIL datasets (`ablate.data.mil`) yield (instances float32 (n_i, F), float 0/1 label) and ship a
padding collate. Every problem with the data (missing path, unreadable or malformed file, class count that
does not match the model) is a `DataError` raised here, before any training starts.

Splits are stratified and depend only on the labels and `split_seed` (numpy's seeded generator, our own
few lines rather than scikit-learn's, so tiny datasets never hit "too few members" errors).
"""

from __future__ import annotations

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

__all__ = ["DataError", "Splits", "build_data", "holdout", "kfold"]


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
    `cfg.model.num_classes`."""
    from ablate.registry import DATASETS

    splits = DATASETS.get(cfg.data.name).build(cfg)
    wanted = cfg.model.num_classes
    if wanted is not None and wanted != splits.num_classes:
        kind = "binary MIL (num_classes 2, one logit)" if cfg.task == "mil" else f"{splits.num_classes} classes"
        raise DataError(cfg.data.name, cfg.data.path, f"model.num_classes is {wanted} but the data is {kind}")
    return splits
