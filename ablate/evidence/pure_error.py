"""The test of a design's effects against pure error: the spread of cells run at more than one seed.

A one-seed design runs every cell at the same seed, so nothing in it varies the seed: inert switches give equal
results, and Lenth's pseudo standard error (`ablate.evidence.lenth`) measures what is left, test-set granularity,
not seed noise. The textbook remedy where a design has no centre point (its factors are categorical) is to
replicate a cell: the reference cell run at several seeds (`reference_seeds`). The pooled within-cell variance

    s^2 = sum_i sum_r (y_ir - mean_i)^2 / df,    df = sum_i (n_i - 1)

is pure error: it does not depend on which effects are active. An effect c_j = w_j . means, each cell's mean over
its n_i runs, has standard error s sqrt(sum_i w_ji^2 / n_i), and t_j = c_j / se_j has a t distribution with df
degrees of freedom under no effect and normal noise (Montgomery, Design and Analysis of Experiments, 6.8): p and
the interval c_j +- t_(df, level) se_j come from it. Each test stands alone, so the effects need not be orthogonal.

The standard error takes the cells' noises as independent. The design's cells share a seed: noise all of them
share cancels in every contrast (the test is conservative there), but noise shared only by the cells at one level
of a switch (one that changes what the seed draws, such as an architecture's shapes) moves that switch's effect
by more than se_j says. The small-sample policy's SMALL_N does not gate this t: like Lenth's test, the design's
test rests on normal noise, and DoE practice reads pure error from 3 or 4 degrees of freedom (Montgomery's centre
points).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.evidence import LEVEL, zero_spread


@dataclass(frozen=True)
class PureError:
    """The pooled within-cell spread: its standard deviation and degrees of freedom (0: no cell was repeated)."""

    sd: float
    df: int


@dataclass(frozen=True)
class Tested:
    """Per effect: p and the interval's ends."""

    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def pooled(values: np.ndarray) -> PureError:
    """The pure error of `values` (cells x runs, NaN where a cell has no such run); sd 0 where the repeated runs are
    equal up to rounding (`zero_spread` of the values' magnitude)."""
    v = np.asarray(values, dtype=float)
    n = np.sum(~np.isnan(v), axis=1)
    repeated = v[n > 1]
    df = int(np.sum(n[n > 1] - 1))
    if df == 0:
        return PureError(float("nan"), 0)
    squares = np.nansum((repeated - np.nanmean(repeated, axis=1, keepdims=True)) ** 2)
    sd = float(np.sqrt(squares / df))
    return PureError(0.0 if zero_spread(sd, np.nanmax(np.abs(repeated))) else sd, df)


def test(estimates: np.ndarray, unit: np.ndarray, error: PureError, level: float = LEVEL) -> Tested | None:
    """The t-test of each estimate whose standard error is `unit` times the noise's sd; None where `error` has no
    degrees of freedom or no spread (every repeated run equal)."""
    from scipy import stats  # a third of a second, paid only by a report with pure error

    est, unit = np.asarray(estimates, dtype=float), np.asarray(unit, dtype=float)
    if error.df == 0 or error.sd == 0:
        return None
    se = error.sd * unit
    t = est / se
    half = float(stats.t.ppf(0.5 + level / 2, error.df)) * se
    return Tested(2 * stats.t.sf(np.abs(t), error.df), est - half, est + half)
