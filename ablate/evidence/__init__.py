"""The small-sample policy: what n paired differences (variant - baseline, one per replicate) can show. Written
once, here, for every table of a report (variants, effects, tuning, cross-sweep, mechanisms' sections) and for
adaptive seeding; docs/concepts/statistics.md states it in words.

By n and the design (`family`):

- fewer than 2 differences, or all equal (zero spread up to rounding, `zero_spread`): nothing. No interval
  and no test: a zero-width interval would claim a certainty so few replicates cannot give.
- from SMALL_N differences (df >= SMALL_N - 1): a t-test (paired t over seeds, the corrected resampled t over
  cross-validation folds, the pooled t of cell means) with its own t interval. Below that, the normality a t
  rests on cannot be checked.
- independent replicates (seeds) from EXACT_N to SMALL_N - 1 pairs: the exact sign-flip test of the mean
  difference (Fisher's randomisation test: under no effect each difference's sign is a coin flip), with the
  interval that inverts it (`sign_flip`): p < alpha exactly when the interval leaves out 0.
- fewer independent pairs than EXACT_N, or fewer than SMALL_N differences where the replicates are not
  exchangeable (folds of one repeat share training data; pooled cell means are unpaired): too few. No test
  and no interval: the exact test's smallest p, 2 / 2^n, is 0.5 at 2 pairs and 0.0625 at 5, so it could never
  call a difference significant, and no interval beside such a p is evidence.

The standardised effect (Cohen's d_z) is shown where there is a test, and its interval (noncentral t) only
beside a t-test, whose inversion it is; so is the paired bootstrap's BCa interval (`bootstrap`, `report --interval
bca`), and only over independent pairs. Adaptive seeding (`ablate.planning.adaptive`) judges a cell only where the
spread can be estimated (`estimable`): it never decides from a zero-width interval.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike

LEVEL = 0.95
ALPHA = 1 - LEVEL
SMALL_N = 10
"""Differences from which a t-test is used (df >= SMALL_N - 1)."""
RESOLUTION = 1e-9
"""A standard deviation at most this times the largest magnitude of the values it comes from is zero: equal
differences computed from different operands (72.1 - 70.3, 74.1 - 72.3) differ in their last bits, and a test
on that rounding noise would find a huge effect."""

NONE, TOO_FEW, EXACT, T = "", "too few", "exact", "t"
"""The families `family` chooses from: no spread, too few pairs, exact sign-flip, t-test."""


def exact_n(alpha: float = ALPHA) -> int:
    """The fewest pairs at which the exact sign-flip test can reach p < alpha: its smallest p is 2 / 2^n."""
    return next(n for n in itertools.count(1) if 2 / 2**n < alpha)


EXACT_N = exact_n()
"""6 at alpha 0.05 (2 / 64 = 0.031; at 5 pairs the smallest p is 0.0625)."""


def zero_spread(std: ArrayLike, magnitude: ArrayLike) -> np.ndarray:
    """Where a standard deviation is zero up to rounding (`RESOLUTION` of the values' magnitude)."""
    std, magnitude = np.asarray(std, dtype=float), np.asarray(magnitude, dtype=float)
    out: np.ndarray = std <= RESOLUTION * magnitude
    return out


def family(n: int, df: int, spread: bool, exchangeable: bool) -> str:
    """The test n differences with df degrees of freedom get (module docstring): NONE without a spread, T from
    SMALL_N - 1 df, EXACT for 2^n sign flips that can reach alpha (`exchangeable`: independent pairs), else
    TOO_FEW."""
    if not spread or df < 1:
        return NONE
    if df >= SMALL_N - 1:
        return T
    return EXACT if exchangeable and n >= EXACT_N else TOO_FEW


def why(n: int, df: int, spread: bool, exchangeable: bool, unit: str) -> str:
    """Why a row has no test, in a table cell's words ("" where it has one): one `unit` (seed, fold, trial), one
    per cell (df 0), zero spread over n of them, or too few for any test of the policy."""
    if df < 1:
        return f"1 {unit}" if n <= 1 else f"1 {unit} per cell"
    if not spread:
        return f"zero spread, {n} {unit}s"
    if family(n, df, spread, exchangeable) != TOO_FEW:
        return ""
    if exchangeable:
        return f"{n} {unit}s; a test needs {EXACT_N}"
    return f"{n} {unit}s, df {df}; a t-test needs df {SMALL_N - 1}"


def estimable(d: np.ndarray) -> bool:
    """Whether differences `d` (no NaN) have a spread to build an interval from: two or more, not all equal."""
    return len(d) > 1 and not bool(zero_spread(np.std(d, ddof=1), np.max(np.abs(d))))


def sign_flip(d: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(p, lo, hi): the exact two-sided sign-flip test of mean(d) == 0 over all 2^n sign vectors and the interval
    that inverts it (NaN where no interval at `level` is attainable).

    Flipping the signs of a subset A of the differences moves the sum below the observed one exactly when
    mean over A of (d - mu) <= 0, so each one-sided p at mu counts the 2^n - 1 subset means on one side of mu
    (Hartigan 1969): p(mu) = 2 (1 + min(#means <= mu, #means >= mu)) / 2^n, capped at 1, the doubling scipy's
    `permutation_test` uses. The interval [M_(r), M_(m+1-r)] of the sorted subset means M keeps every mu with
    p(mu) >= 1 - level; its coverage is 1 - 2r / 2^n, at least `level`. Subset means within rounding of 0
    count as 0, so p and the interval agree to the last bit."""
    n = len(d)
    masks = np.array(list(itertools.product((0.0, 1.0), repeat=n)))[1:]  # every non-empty subset
    means = np.sort(masks @ d / masks.sum(axis=1))
    means[zero_spread(np.abs(means), np.max(np.abs(d)))] = 0.0
    below, above = int(np.sum(means <= 0)), int(np.sum(means >= 0))
    p = min(1.0, 2 * (1 + min(below, above)) / 2**n)
    r = int(np.sum(2 * (1 + np.arange(2**n)) < (1 - level) * 2**n))  # mu with fewer than r means below: p < alpha
    if r == 0:
        return p, np.nan, np.nan
    return p, float(means[r - 1]), float(means[len(means) - r])
