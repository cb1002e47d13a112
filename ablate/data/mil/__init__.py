"""Multiple-instance learning bags (the Syn paper's benchmarks), offline.

The declarations (names and feature widths: torch-free, what validation and planning import) are here; the
readers and splits are in `loaders`, imported when a trial builds its data.

Sources:
- CSV in the `mil` package's layout, one row per instance: label, bag_id, features... Headerless (as the
  package ships them) or with a header naming `label` and `bag_id`. The package's own loaders are broken,
  so the files are read with pandas. Labels: already 0/1, or any two values (the larger is positive, e.g.
  -1/1); a bag is positive when any of its instances is (the MIL assumption; in the shipped files every
  instance carries its bag's label).
- MIDatasets .jld (HDF5): `X` holds one object reference per bag to a (features, instances) matrix, `y` is
  a Julia BitVector (`chunks_` uint64 words, `len_` bits). The files' own fold sets are not used: folds
  come from split_seed like every other dataset, so `fold` and `split_seed` mean the same everywhere.
- Packed .npz (`pack`): all instances stacked (`x`, float32), instances per bag (`sizes`), bag `labels`.

Where a named dataset comes from: data.path (a file, or a directory holding `<name>.jld|.h5|.hdf5|.csv|.npz`,
case-insensitive) when given; else the bags shipped with ablate (fox, tiger, elephant, musk1: MIDatasets,
MIT, see `bags/README.md`); else the CSV shipped in the `mil` package (musk2, ucsb_breast_cancer,
web_recommendation_1). `python -m ablate.data.mil SRC DST.npz` packs any readable bag file.

Splits: stratified k-fold over bags (fold `fold` is the test set); by default every other bag trains
(`val_fraction` 0, as the papers); a validation split, when asked for, is carved stratified from the training
folds; features standardised with statistics of the training bags only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate import components
from ablate.registry import register_dataset

if TYPE_CHECKING:
    from ablate.config import TrialConfig
    from ablate.data import Splits


class Benchmark(components.Dataset):
    """A MIL benchmark of this package (binary bags; `features` per instance, None: read from the file)."""

    task = "mil"
    val_fraction = 0.0  # the papers train on every bag outside the test fold

    def __init__(self, name: str, features: int | None) -> None:
        self.name, self.features, self.needs_path = name, features, features is None

    def dims(self, cfg: TrialConfig) -> tuple[int, int]:
        if self.features is not None:
            return self.features, 2
        with open(Path(str(cfg.data.path)).expanduser()) as f:  # a CSV in the `mil` layout
            return len(f.readline().split(",")) - 2, 2

    def build(self, cfg: TrialConfig) -> Splits:
        from ablate.data.mil.loaders import build

        return build(cfg)

    def describe(self, d: dict[str, Any]) -> str:
        return str(d.get("id") or self.name) if self.features is None else self.name


for _name, _features in [("musk1", 166), ("musk2", 166), ("elephant", 230), ("fox", 230), ("tiger", 230),
                         ("ucsb_breast_cancer", 708), ("web_recommendation_1", 5863), ("mil_csv", None)]:  # fmt: skip
    register_dataset(Benchmark(_name, _features))
