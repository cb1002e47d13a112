"""Seed statistics: t intervals and paired tests over replicates, one row per comparison.

Every function takes a matrix with one row per comparison (a variant against its baseline, an effect)
and one column per replicate (seed, or seed x fold), NaN where a replicate is missing, so a table of
hundreds of variants is one vectorised call. Paired differences are what the tests see: replicate r of a
variant is compared with replicate r of its baseline (same seed, same fold), which removes the variance the
two share (data order, initialisation stream, fold difficulty).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

LEVEL = 0.95
#: Below this many pairs the p-value comes from the exact Wilcoxon signed-rank test: the t-test's
#: normality assumption cannot be checked on so few differences. (Its p cannot go below 2 / 2**n:
#: 0.5 at n = 2, 0.0625 at n = 5; the t interval is still shown.)
SMALL_N = 10
T_TEST = "paired t"
WILCOXON = "Wilcoxon"


def t_test(mean: ArrayLike, se: ArrayLike, df: ArrayLike, level: float = LEVEL) -> tuple[np.ndarray, ...]:
    """(lo, hi, p): the t interval mean +- t(df) se and the two-sided p of mean == 0 (NaN where se is
    0 or undefined)."""
    mean, se, df = (np.asarray(a, dtype=float) for a in (mean, se, df))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stats.t.ppf(0.5 + level / 2, np.maximum(df, 1)) * se
        p = np.where(se > 0, 2 * stats.t.sf(np.abs(mean / se), np.maximum(df, 1)), np.nan)
    return mean - half, mean + half, p


def interval(values: np.ndarray, level: float = LEVEL) -> pd.DataFrame:
    """Per row of `values` (NaN = missing): n, mean, std (ddof 1), the t interval of the mean (lo, hi),
    and the two-sided one-sample t-test p-value of mean == 0. Rows with n < 2 get NaN spread and p."""
    x = np.atleast_2d(np.asarray(values, dtype=float))
    n = np.sum(~np.isnan(x), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(x, axis=1) / np.maximum(n, 1), np.nan)
        dev = np.where(np.isnan(x), 0.0, x - mean[:, None])
        std = np.where(n > 1, np.sqrt((dev**2).sum(axis=1) / np.maximum(n - 1, 1)), np.nan)
        lo, hi, p = t_test(mean, std / np.sqrt(n), n - 1, level)
    return pd.DataFrame({"n": n, "mean": mean, "std": std, "lo": lo, "hi": hi, "p_t": p})


def wilcoxon(diffs: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p of one row of paired differences (NaN ignored); exact for small n
    without ties (scipy's choice). All differences zero: no evidence of a difference, p = 1."""
    d = np.asarray(diffs, dtype=float)
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return float("nan")
    if not np.any(d):
        return 1.0
    return float(stats.wilcoxon(d).pvalue)


def paired(diffs: np.ndarray, level: float = LEVEL) -> pd.DataFrame:
    """Paired comparison per row of differences (variant - baseline per replicate): `interval`'s columns,
    the Wilcoxon p (`p_w`, rows with 2 <= n < SMALL_N only), the test used (`test`; none below 2 pairs)
    and its p-value (`p`)."""
    d = np.atleast_2d(np.asarray(diffs, dtype=float))
    out = interval(d, level)
    small = (out["n"] < SMALL_N).to_numpy()
    out["p_w"] = [wilcoxon(row) if s and n > 1 else np.nan for row, s, n in zip(d, small, out["n"])]
    out["test"] = np.where(out["n"] < 2, "", np.where(small, WILCOXON, T_TEST))
    out["p"] = np.where(small, out["p_w"], out["p_t"])
    return out
