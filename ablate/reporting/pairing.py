"""The pairing the variant table's tests use, to look at: per variant, each replicate's difference from the same
replicate of its reference (the values its test is computed on), with the test's interval, so a reader sees at once
whether the seeds agree. Where they disagree (some seeds better, some worse), the worst seed and the worse quartile
stand beside the mean: a mean gain that one seed in four loses is not the gain a reader would expect from one run.

The figure itself is `ablate.reporting.plots.pairing_plot`; this module holds what it shows, which the tests check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.evidence import RESOLUTION
from ablate.reporting import frames
from ablate.reporting.frames import SweepData


@dataclass(frozen=True)
class Pairs:
    """One variant's paired differences (variant - reference per replicate, only the replicates both have)."""

    variant: str
    label: str
    differences: pd.Series
    """Per replicate label (seed, or seed x fold), in replicate order."""
    mean: float
    lo: float
    hi: float
    """The variant table's interval of the mean difference (NaN where the policy gives none)."""
    higher: bool
    """Whether a larger metric is better: which end of the differences is the worst."""
    unit: str
    """What a replicate is: a seed, or under cross-validation a fold."""

    @property
    def worst(self) -> str:
        """The replicate whose difference is least favourable to the variant."""
        return str(self.differences.idxmin() if self.higher else self.differences.idxmax())

    @property
    def quartile(self) -> float:
        """The worse quartile of the differences: the lower quartile where larger is better, else the upper."""
        return float(np.quantile(self.differences.to_numpy(), 0.25 if self.higher else 0.75))

    @property
    def split(self) -> bool:
        """Whether the replicates disagree: at least one better and one worse than its reference's, beyond rounding
        (`ablate.evidence.RESOLUTION` of the largest difference)."""
        d = self.differences.to_numpy()
        zero = RESOLUTION * np.max(np.abs(d), initial=0.0)
        return bool((d > zero).any() and (d < -zero).any())


def pairs(table: pd.DataFrame, data: SweepData) -> list[Pairs]:
    """Every variant with paired replicates, less the references themselves, in table order: the differences
    `frames.variant_table` tested and the interval it gave them."""
    values = frames.replicates(data)
    diffs = values.to_numpy() - values.reindex(index=table["ref"].fillna("")).to_numpy()
    reps = values.columns.astype(str)
    out = []
    rows = zip(table.index, *(table[c] for c in ("ref", "pairs", "label", "delta", "lo", "hi")))  # not a Series a row
    for i, (variant, ref, n, label, delta, lo, hi) in enumerate(rows):
        if pd.isna(ref) or ref == variant or n < 1:
            continue
        paired = ~np.isnan(diffs[i])
        d = pd.Series(diffs[i][paired], index=reps[paired])
        out.append(Pairs(str(variant), str(label), d, float(delta), float(lo), float(hi), data.higher,
                         data.replicates.unit))  # fmt: skip
    return out
