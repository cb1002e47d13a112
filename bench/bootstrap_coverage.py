"""How often the paired bootstrap's 95% BCa interval (`ablate.evidence.bootstrap.bca`) holds the true mean
difference, beside the t interval, at the numbers of pairs a report gives it (10 and more) and below.

    .venv/bin/python bench/bootstrap_coverage.py [--sims 2000] [--seed 3]

Per n, --sims rows of n differences drawn with true mean 0, from a normal and from a skewed distribution (a
centred exponential: a few seeds far on one side), and the share of rows whose interval holds 0. The resamples
are the report's (RESAMPLES from SEED, shared by the rows of one call): each row's interval is the one the report
would give it.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from ablate.evidence import bootstrap

SIZES = (6, 8, 10, 15, 25)
DRAWS = {
    "normal": lambda rng, shape: rng.normal(0, 1, shape),
    "skewed": lambda rng, shape: rng.exponential(1, shape) - 1,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    for name, draw in DRAWS.items():
        for n in SIZES:
            d = draw(rng, (args.sims, n))
            lo, hi = bootstrap.bca(d)
            half = stats.t.ppf(0.975, n - 1) * d.std(axis=1, ddof=1) / np.sqrt(n)
            mean = d.mean(axis=1)
            bca, t = np.mean((lo <= 0) & (hi >= 0)), np.mean((mean - half <= 0) & (mean + half >= 0))
            print(f"{name:6} n = {n:2}: 95% BCa holds the mean {bca:.1%}, the t interval {t:.1%} ({args.sims} rows)")


if __name__ == "__main__":
    main()
