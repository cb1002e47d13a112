"""False-positive rate of the report's comparisons on simulated sweeps with no true effect (tests/nulls.py).

    .venv/bin/python bench/stats_fpr.py [--sweeps 4000]

Repeated k-fold CV of two equally good learners, per design (samples, repeats, folds): how often p < 0.05
with the folds treated as independent replicates (the report before issue 16: paired t over every fold)
and with the corrected resampled t-test (after). Then tables of 8 null variants over 10 seeds: how often
a table claims at least one difference, unadjusted and with Holm.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nulls import cv_differences, null_tables

from ablate.reporting import stats

DESIGNS = ((100, 5, 10), (100, 10, 10), (200, 5, 10), (60, 5, 5), (100, 1, 10))


def rate(p: np.ndarray) -> float:
    return float((p < stats.ALPHA).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweeps", type=int, default=4000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{args.sweeps} null sweeps per design; nominal level {stats.ALPHA:.2f}")
    print("samples repeats folds   before (folds as replicates)   after (corrected resampled t)")
    for n, repeats, folds in DESIGNS:
        d = cv_differences(rng, args.sweeps, n=n, repeats=repeats, folds=folds)
        before = rate(stats.paired(d, effect=False)["p"].to_numpy())
        after = rate(stats.paired(d, replicates=stats.Replicates(folds), effect=False)["p"].to_numpy())
        print(f"{n:7d} {repeats:7d} {folds:5d}   {before:28.3f}   {after:29.3f}")
    p = stats.paired(null_tables(rng, args.sweeps, 8, 10).reshape(-1, 10), effect=False)["p"].to_numpy()
    p = p.reshape(args.sweeps, 8)
    holm = np.array([(stats.adjust(row) < stats.ALPHA).any() for row in p])
    print(f"tables of 8 null variants x 10 seeds claiming a difference: unadjusted {rate(p.min(axis=1)):.3f}, "
          f"Holm {holm.mean():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
