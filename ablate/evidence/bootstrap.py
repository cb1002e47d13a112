"""What paired differences show beside the policy's test: the paired bootstrap's BCa interval of their mean, and the
probability that a replicate of the variant beats the same replicate of its baseline.

The BCa interval (bias-corrected and accelerated, Efron 1987; scipy's `bootstrap`) resamples the differences
(variant - baseline per replicate), which is the paired bootstrap: replicate r of both arms moves together. It is
a second interval beside the policy's (t or sign-flip), never one the policy would refuse, and stricter (`allowed`):
only where the policy gives a t-test over independent pairs (SMALL_N or more). A bootstrap takes the sample's
spread at face value, so on few values it is too narrow: a 95% BCa interval holds the true mean about 90% of the
time at 10 normal pairs and 86% at 6, 87% at 10 skewed ones, where the t interval holds it 95% and 89%
(bench/bootstrap_coverage.py). Folds of one cross-validation repeat share training data, so resampling them as if
independent would understate the spread further. The test and its decision stay the policy's. The resamples come
from a fixed seed, so a report is the same on every run.

The probability of improvement (Agarwal et al. 2021, rliable's P(X > Y), here over pairs) is descriptive: the
share of pairs the variant wins, ties counting half.
"""

from __future__ import annotations

import numpy as np

from ablate.evidence import LEVEL, RESOLUTION, SMALL_N, T, family

RESAMPLES = 9999
"""scipy's default number of resamples: the interval's ends move by well under its width's 1% between seeds."""
SEED = 0
"""The resamples' seed: a report rewrites identical files."""
ROWS = 64
"""Rows per call to scipy: a call holds ROWS x RESAMPLES x n resampled values (50 MB at 10 pairs)."""


def allowed(n: int, df: int, spread: bool, exchangeable: bool) -> bool:
    """Whether n differences get a BCa interval: where the policy gives them a t-test (`family`) and the
    replicates are independent (seeds, not folds of one repeat)."""
    return exchangeable and family(n, df, spread, exchangeable) == T


def why(n: int, exchangeable: bool, unit: str) -> str:
    """Why a row with a test of the policy's has no BCa interval, in a table cell's words."""
    if not exchangeable:
        return f"{unit}s not independent"
    return f"{n} {unit}s; a bootstrap needs {SMALL_N}"


def bca(d: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per row of `d` (rows of differences of one length, no NaN): the paired bootstrap's BCa interval of
    the row's mean at `level`, scipy's `bootstrap` with RESAMPLES resamples from SEED. Rows go to scipy ROWS at a
    time, vectorised: its resamples of a row are the same whatever rows it shares a call with, so each row's
    interval is the one scipy gives that row alone."""
    from scipy import stats  # only for --interval bca: 0.4 s to import, which a report otherwise does without

    x = np.atleast_2d(np.asarray(d, dtype=float))
    lo, hi = np.empty(len(x)), np.empty(len(x))
    for start in range(0, len(x), ROWS):
        found = stats.bootstrap(
            (x[start : start + ROWS],),
            np.mean,
            n_resamples=RESAMPLES,
            vectorized=True,
            axis=-1,
            confidence_level=level,
            method="BCa",
            rng=np.random.default_rng(SEED),
        )
        lo[start : start + ROWS], hi[start : start + ROWS] = found.confidence_interval
    return lo, hi


def improvement(d: np.ndarray, magnitude: np.ndarray, higher: bool = True) -> np.ndarray:
    """Per row of differences `d` (variant - baseline per replicate, NaN = unpaired): the share of pairs in which
    the variant is better (larger where `higher`), a tie counting half. A difference within RESOLUTION of the row's
    `magnitude` (the largest value of either arm) is a tie: 72.1 - 70.3 and 74.1 - 72.3 differ in their last bits.
    NaN for a row without pairs."""
    x = np.atleast_2d(np.asarray(d, dtype=float))
    n = np.sum(~np.isnan(x), axis=1)
    tie = np.abs(x) <= RESOLUTION * np.asarray(magnitude, dtype=float)[:, None]
    win = np.where(tie, 0.5, (x > 0) == higher)
    won = np.where(np.isnan(x), 0.0, win).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share: np.ndarray = np.where(n > 0, won / np.maximum(n, 1), np.nan)
    return share
