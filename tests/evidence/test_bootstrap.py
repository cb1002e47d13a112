"""The paired bootstrap and the probability of improvement (`ablate.evidence.bootstrap`): the BCa interval against
scipy's `bootstrap` called directly on fixed data, its rule against the small-sample policy's, and the probability
of improvement against a count by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from ablate import evidence
from ablate.evidence import bootstrap
from ablate.reporting import stats

#: Fixed data: 12 seeds of a baseline and of a variant that gains about one point, with seed effects they share.
BASE = np.array([70.1, 71.9, 69.4, 72.6, 70.8, 68.9, 71.2, 73.0, 70.0, 69.7, 72.2, 71.5])
GAIN = np.array([1.3, 0.2, 2.1, 0.9, -0.4, 1.8, 1.1, 0.6, 2.6, 0.1, 1.5, -0.2])


def scipys(v: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """scipy's paired BCa interval of the mean of v - b, both samples given (`paired=True`), as its documentation
    writes it."""
    found = sps.bootstrap((v, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis), paired=True, method="BCa",
                          confidence_level=level, rng=np.random.default_rng(0))  # fmt: skip
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_bca_is_scipys_paired_bootstrap_on_fixed_data(level: float) -> None:
    v = BASE + GAIN
    lo, hi = bootstrap.bca(v - BASE, level)
    assert (lo[0], hi[0]) == pytest.approx(scipys(v, BASE, level), abs=1e-12)
    assert lo[0] < GAIN.mean() < hi[0]
    # rows sent together (more than one call of ROWS) get the interval scipy gives each alone
    rows = np.array([BASE + np.roll(GAIN, k) * (1 + k / 10) for k in range(bootstrap.ROWS + 3)])
    lo, hi = bootstrap.bca(rows - BASE, level)
    for k in (0, 1, bootstrap.ROWS, bootstrap.ROWS + 2):
        assert (lo[k], hi[k]) == pytest.approx(scipys(rows[k], BASE, level), abs=1e-12)


def test_bca_is_given_only_where_the_policy_gives_a_t_test_over_independent_pairs() -> None:
    assert bootstrap.allowed(evidence.SMALL_N, evidence.SMALL_N - 1, True, True)
    assert not bootstrap.allowed(evidence.SMALL_N - 1, evidence.SMALL_N - 2, True, True)  # sign-flip's range
    assert not bootstrap.allowed(evidence.SMALL_N, evidence.SMALL_N - 1, False, True)  # zero spread
    assert not bootstrap.allowed(20, 19, True, False)  # folds of one repeat
    rng = np.random.default_rng(7)
    base = np.resize(BASE, 14)
    for n in range(1, 15):
        v = np.full((3, 14), np.nan)
        v[0, :n] = base[:n] + rng.normal(1, 1, n)
        v[1, :n] = base[:n] + 0.5  # zero spread
        v[2, :n] = base[:n] + (rng.normal(1, 1, n) if n < 10 else 0.0)
        found = stats.paired(v - base, resampled=True)
        given = found["b_lo"].notna().to_numpy()
        # never an interval the policy refuses, and only beside its t-test
        assert not (given & found["lo"].isna().to_numpy()).any()
        assert (given == (found["test"] == stats.T_TEST).to_numpy()).all() and given[0] == (n >= evidence.SMALL_N)
        if given[0]:
            assert (found.loc[0, "b_lo"], found.loc[0, "b_hi"]) == pytest.approx(scipys(v[0, :n], base[:n]), abs=1e-12)
        assert found.loc[1, "b_why"] == "" and found.loc[1, "why"]  # no test: the policy's own words say why
    few = stats.paired(GAIN[None, :7], resampled=True).iloc[0]
    assert few["test"] == stats.SIGN_FLIP and few["b_why"] == "7 seeds; a bootstrap needs 10"
    folds = stats.paired(GAIN[None, :], replicates=stats.Replicates(folds=3), resampled=True).iloc[0]
    assert folds["test"] == stats.CORRECTED and np.isnan(folds["b_lo"]) and folds["b_why"] == "folds not independent"
    assert "b_lo" not in stats.paired(GAIN[None, :])  # without the option, the frame of before


def test_probability_of_improvement_counts_the_pairs_won_ties_half() -> None:
    d = np.array([[1.0, -1.0, 0.0, 2.0, np.nan], [np.nan] * 5, [72.1 - 70.3, -(74.1 - 72.3) + 1.8, 1, 1, 1]])
    magnitude = np.array([3.0, np.nan, 74.1])
    up = bootstrap.improvement(d, magnitude)
    assert up[0] == pytest.approx((1 + 0 + 0.5 + 1) / 4) and np.isnan(up[1])
    assert up[2] == pytest.approx((1 + 0.5 + 1 + 1 + 1) / 5)  # 74.1 - 72.3 - 1.8 is rounding: a tie
    down = bootstrap.improvement(d, magnitude, higher=False)
    assert down[0] == pytest.approx((0 + 1 + 0.5 + 0) / 4) and down[2] == pytest.approx(0.5 / 5)
    # against numpy's count on the fixed data
    assert bootstrap.improvement(GAIN, np.array([80.0]))[0] == pytest.approx(np.mean(GAIN > 0))
