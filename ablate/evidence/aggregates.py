"""Aggregates over several datasets, as Agarwal et al. (2021, "Deep reinforcement learning at the edge of the
statistical precipice", their library rliable) define them; our code from their formulas, checked against scipy.

An arm's scores are normalised runs (its independent replicates) on each of several datasets, one array per dataset:
the strata. Over them:

- the interquartile mean (IQM): the mean of the middle half of every run on every dataset, pooled (rliable's
  `aggregate_iqm`, scipy's `trim_mean(scores, 0.25)`: int(n / 4) scores cut from each end). Robust to a dataset
  whose scores are outliers, unlike the mean, and less noisy than the median with few runs.
- its stratified bootstrap interval: each resample draws, within each dataset, as many runs as it has, with
  replacement (rliable's `StratifiedBootstrap`: runs resampled, datasets kept), and the interval is the resamples'
  percentiles (rliable's default `percentile` method). It says how the aggregate would move with other seeds on
  the same datasets.
- the performance profile (rliable's score distribution, `create_performance_profile`): at each threshold tau,
  the fraction of all runs whose score is above tau (strictly), with a band from the same stratified bootstrap.

The small-sample policy's rule holds here too (`ablate.evidence`): no interval where resampling cannot vary (a
dataset with a single run, so its score is resampled as itself, or runs all equal) nor from fewer runs than the
exact test needs (`EXACT_N`): such an interval would claim a certainty so few runs cannot give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ablate.evidence import EXACT_N, LEVEL, zero_spread

REPS = 10_000
"""Bootstrap resamples of an aggregate's interval (rliable's default is 50,000; at 10,000 the 2.5% percentile of a
[0, 1] score moves by about 0.002 between seeds of the bootstrap, below the digits a table shows)."""
PROFILE_REPS = 2_000
"""Resamples of a profile's band (rliable's default)."""
SEED = 0
"""The bootstrap's random seed: a report re-written from the same store draws the same resamples."""
CUT = 0.25
"""The fraction trimmed from each end for the interquartile mean."""


@dataclass(frozen=True)
class Estimate:
    """An aggregate with its interval; lo and hi NaN with `why` where the policy gives none."""

    value: float
    lo: float
    hi: float
    why: str = ""


@dataclass(frozen=True)
class Profile:
    """A performance profile: at each threshold of `taus`, the fraction of runs above it and its band (NaN where the
    policy gives none)."""

    taus: np.ndarray
    fraction: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def iqm(scores: np.ndarray) -> np.ndarray:
    """The interquartile mean along the last axis: the mean of the scores left after cutting int(n * CUT) of the
    lowest and as many of the highest (scipy's `trim_mean`), one per row of a resample matrix."""
    s = np.sort(np.asarray(scores, dtype=float), axis=-1)
    cut = int(s.shape[-1] * CUT)
    out: np.ndarray = s[..., cut : s.shape[-1] - cut].mean(axis=-1)
    return out


def resample(strata: Sequence[np.ndarray], reps: int, rng: np.random.Generator) -> np.ndarray:
    """`reps` stratified resamples (rows) of the runs of every stratum: stratum i's n_i runs drawn n_i times with
    replacement from its own runs only, strata side by side in the columns, in order."""
    parts = [s[rng.integers(0, len(s), size=(reps, len(s)))] for s in strata]
    return np.concatenate(parts, axis=1)


def above(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The fraction of scores (the last axis) strictly above each tau: rliable's run-score distribution."""
    fraction: np.ndarray = np.mean(np.asarray(scores)[..., None, :] > taus[:, None], axis=-1)
    return fraction


def why_none(strata: Sequence[np.ndarray]) -> str:
    """Why the strata get no interval, in a table cell's words ("" where they get one)."""
    runs = sum(len(s) for s in strata)
    if min(len(s) for s in strata) < 2:
        return "1 run on a dataset"
    if runs < EXACT_N:
        return f"{runs} runs; an interval needs {EXACT_N}"
    pooled = np.concatenate(strata)
    if all(bool(zero_spread(np.std(s), np.max(np.abs(pooled)))) for s in strata):
        return "zero spread"
    return ""


def _interval(
    strata: Sequence[np.ndarray], statistic: Callable[[np.ndarray], np.ndarray], reps: int, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of `statistic` (of a resample matrix, per row) over stratified resamples."""
    drawn = statistic(resample(strata, reps, np.random.default_rng(SEED)))
    lo, hi = np.quantile(drawn, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return lo, hi


def aggregate(strata: Sequence[np.ndarray], reps: int = REPS, level: float = LEVEL) -> Estimate:
    """The IQM of every run of every stratum and its stratified bootstrap percentile interval."""
    value = float(iqm(np.concatenate(strata)))
    if why := why_none(strata):
        return Estimate(value, np.nan, np.nan, why)
    lo, hi = _interval(strata, iqm, reps, level)
    return Estimate(value, float(lo), float(hi))


def profile(strata: Sequence[np.ndarray], taus: np.ndarray, reps: int = PROFILE_REPS, level: float = LEVEL) -> Profile:
    """The performance profile of the strata's runs at `taus`, with its stratified bootstrap band."""
    fraction = above(np.concatenate(strata), taus)
    if why_none(strata):
        return Profile(taus, fraction, np.full(len(taus), np.nan), np.full(len(taus), np.nan))
    lo, hi = _interval(strata, lambda drawn: above(drawn, taus), reps, level)
    return Profile(taus, fraction, lo, hi)
