"""Aggregates over datasets (`ablate.evidence.aggregates`) against independent implementations on fixed data: the
IQM against scipy's trimmed mean, the bootstrap of one stratum against scipy's percentile bootstrap, the profile
against rliable's definition worked out by hand; and that the stratified bootstrap resamples within datasets."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from ablate.evidence import EXACT_N, aggregates

FIXED = np.array([0.91, 0.12, 0.55, 0.38, 0.77, 0.05, 0.64, 0.29, 0.83, 0.47, 0.99, 0.21, 0.6])


@pytest.mark.parametrize("n", range(1, len(FIXED) + 1))
def test_iqm_is_scipys_trimmed_mean_at_a_quarter(n: int) -> None:
    x = FIXED[:n]
    assert float(aggregates.iqm(x)) == pytest.approx(sps.trim_mean(x, 0.25), abs=1e-12)


def test_iqm_of_each_row_of_a_resample_matrix() -> None:
    rows = np.stack([FIXED, FIXED[::-1] ** 2, np.sqrt(FIXED)])
    assert aggregates.iqm(rows) == pytest.approx(sps.trim_mean(rows, 0.25, axis=1), abs=1e-12)


def test_the_stratified_bootstrap_resamples_each_dataset_within_itself() -> None:
    # three datasets whose runs take values no other dataset has: 10 + run, 20 + run, 30 + run
    strata = [np.array([10.0, 11.0]), np.array([20.0, 21.0, 22.0]), np.array([30.0, 31.0, 32.0, 33.0])]
    drawn = aggregates.resample(strata, 500, np.random.default_rng(1))
    assert drawn.shape == (500, 9)
    start = 0
    for s in strata:
        block = drawn[:, start : start + len(s)]
        assert np.isin(block, s).all(), "a resample drew a run of another dataset into this one's place"
        assert set(np.unique(block)) == set(s), "every run of a dataset is drawn in some resample"
        start += len(s)
    assert len({tuple(r) for r in drawn}) > 100, "runs are drawn with replacement, not kept as they are"


def test_one_stratum_is_the_ordinary_bootstrap_scipy_gives() -> None:
    # with a single dataset the stratified bootstrap is the iid one: its percentile interval of the IQM is scipy's
    # to the Monte Carlo error of two independent streams of 20,000 resamples
    ours = aggregates.aggregate([FIXED], reps=20_000)
    theirs = sps.bootstrap((FIXED,), lambda x, axis: sps.trim_mean(x, 0.25, axis=axis), n_resamples=20_000,
                           method="percentile", random_state=np.random.default_rng(7)).confidence_interval  # fmt: skip
    assert ours.value == pytest.approx(sps.trim_mean(FIXED, 0.25))
    assert ours.lo == pytest.approx(theirs.low, abs=0.01)
    assert ours.hi == pytest.approx(theirs.high, abs=0.01)


def test_datasets_are_not_pooled_before_resampling() -> None:
    # two datasets far apart, each with a small spread: resampled within each, every resample keeps 6 runs of
    # each, and the mean moves only by their spreads; pooled, some resamples draw mostly one dataset's runs
    low, high = np.linspace(0.0, 0.05, 6), np.linspace(0.95, 1.0, 6)
    drawn = aggregates.resample([low, high], 2_000, np.random.default_rng(0))
    means = drawn.mean(axis=1)
    assert np.ptp(means) < 0.05
    assert aggregates.aggregate([low, high]).hi - aggregates.aggregate([low, high]).lo < 0.05


def test_the_profile_is_the_fraction_of_runs_strictly_above_tau() -> None:
    strata = [np.array([0.0, 0.25, 0.25]), np.array([0.5, 0.75, 1.0])]
    taus = np.array([-0.1, 0.0, 0.25, 0.3, 0.5, 0.99, 1.0])
    p = aggregates.profile(strata, taus, reps=200)
    assert p.fraction == pytest.approx(np.array([6, 5, 3, 3, 2, 1, 0]) / 6)
    pooled = np.concatenate(strata)
    assert p.fraction == pytest.approx([np.mean(pooled > t) for t in taus])  # rliable's run_score_deviation
    assert (p.lo <= p.fraction + 1e-12).all() and (p.fraction <= p.hi + 1e-12).all()
    assert (p.lo >= 0).all() and (p.hi <= 1).all()


def test_the_profiles_band_is_the_stratified_bootstraps_percentiles() -> None:
    # dataset A's runs are all below 0.5 and B's all above: any stratified resample has exactly half its runs
    # above 0.5, so the band at 0.5 has no width; a pooled resample would give it one
    strata = [np.array([0.1, 0.2, 0.3]), np.array([0.7, 0.8, 0.9])]
    p = aggregates.profile(strata, np.array([0.5, 0.75]))
    assert (p.lo[0], p.hi[0]) == (0.5, 0.5)
    assert p.lo[1] < p.fraction[1] < p.hi[1]


@pytest.mark.parametrize(
    ("strata", "why"),
    [
        ([np.array([0.2]), np.array([0.4, 0.6])], "1 run on a dataset"),
        ([np.array([0.2, 0.3]), np.array([0.4, 0.6])], f"4 runs; an interval needs {EXACT_N}"),
        ([np.array([0.2] * 3), np.array([0.4] * 3)], "zero spread"),
    ],
)
def test_no_interval_the_small_sample_policy_would_refuse(strata: list[np.ndarray], why: str) -> None:
    e = aggregates.aggregate(strata)
    assert e.why == why and np.isnan(e.lo) and np.isnan(e.hi)
    assert e.value == pytest.approx(sps.trim_mean(np.concatenate(strata), 0.25))
    assert np.isnan(aggregates.profile(strata, np.array([0.3])).lo).all()
