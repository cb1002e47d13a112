"""The tuning curves' simultaneous bands (`ablate.reporting.bands`): equal to opda's own Kolmogorov-Smirnov bands
(Lourie, He & Cho's library) on fixed data, around Dodge et al.'s point curve, covering a known curve as often as
they say, and what two arms' bands say of each other, budget by budget."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from opda.nonparametric import EmpiricalDistribution

from ablate.reporting import bands
from ablate.reporting.expected_best import expected_best
from ablate.spec.tuning import MAX_BUDGET

RNG = np.random.default_rng(55)
SKEWED = [float(x) for x in 92 - 30 * RNG.random(20) ** 2]
"""Twenty configurations' validation top1: most near the best, a tail of poor learning rates."""


def opda_band(values, confidence: float, ends=(0.0, 100.0), minimize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """opda's KS bands on the expected best of n, n = 1..N, as its documentation builds them (the upper CDF band
    gives the lower curve)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ties: coverage is conservative, not exact
        low, _, high = EmpiricalDistribution.confidence_bands(values, confidence, *ends, method="ks")
    ns = np.arange(1, len(values) + 1)
    return high.average_tuning_curve(ns, minimize=minimize), low.average_tuning_curve(ns, minimize=minimize)


@pytest.mark.parametrize("values", [SKEWED, SKEWED[:1], SKEWED[:2], [80.0, 80.0, 81.5, 79.0, 80.0]])
@pytest.mark.parametrize("direction", ["max", "min"])
def test_the_band_is_opdas_ks_band_and_holds_dodges_curve(values, direction) -> None:
    b = bands.band(values, direction, (0.0, 100.0), 0.975)
    lo, hi = opda_band(values, 0.975, minimize=direction == "min")
    np.testing.assert_allclose(b.lo, lo, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.hi, hi, rtol=0, atol=1e-9)
    point = expected_best(values, direction).mean
    assert (b.lo <= point + 1e-9).all() and (point <= b.hi + 1e-9).all()
    assert b.lo[0] < b.hi[0] and b.confidence == 0.975


def test_a_metric_without_an_end_has_that_side_of_its_band_infinite() -> None:
    assert bands.bounds("val.top1") == (0.0, 100.0) and bands.bounds("val.auc") == (0.0, 1.0)
    assert bands.bounds("val.loss") == (0.0, math.inf) and bands.bounds("val.f1") == (-math.inf, math.inf)
    loss = [0.9, 0.5, 0.7, 0.45, 0.6]
    b = bands.band(loss, "min", bands.bounds("val.loss"), 0.95)
    assert np.isinf(b.hi).all() and np.isfinite(b.lo).all()
    np.testing.assert_allclose(b.lo, opda_band(loss, 0.95, (0.0, math.inf), minimize=True)[0], atol=1e-12)
    assert np.isneginf(bands.band(loss, "max", (-math.inf, math.inf), 0.95).lo).all()


def test_the_band_covers_a_known_curve_at_every_n_as_often_as_it_says() -> None:
    """Scores uniform on [0, 1]: the expected best of n is n / (n + 1). 1000 seeded searches of 10 configurations:
    the 90% band holds the whole curve in at least 90% of them (a bootstrap band does not: Lourie et al.)."""
    rng, n = np.random.default_rng(0), 10
    truth = np.arange(1, n + 1) / np.arange(2, n + 2)
    held = [((b.lo <= truth) & (truth <= b.hi)).all()
            for b in (bands.band(rng.random(n), "max", (0.0, 1.0), 0.9) for _ in range(1000))]  # fmt: skip
    assert np.mean(held) >= 0.9


def test_every_arms_band_is_at_one_minus_alpha_over_the_arms() -> None:
    found = bands.bands({"a": SKEWED, "b": SKEWED[:10], "c": []}, "max", (0.0, 100.0))
    assert set(found) == {"a", "b"} and {b.confidence for b in found.values()} == {0.975}
    np.testing.assert_allclose(found["b"].lo, opda_band(SKEWED[:10], 0.975)[0], atol=1e-9)


WIN = [90.0 + 0.1 * i for i in range(30)]
LOSE = [60.0 + 0.1 * i for i in range(30)]
"""Thirty configurations each, 30 points apart: distribution-free bands on an expectation must allow a share of
each arm's mass at the metric's ends (0 and 100), so even these are apart only at a few small budgets."""


def test_a_clear_winner_is_better_exactly_where_opdas_bands_are_apart() -> None:
    values = {"a": WIN, "b": LOSE}
    c = bands.compare("a", "b", values, bands.bands(values, "max", (0.0, 100.0)), "max", (0.0, 100.0))
    a_lo, b_hi = opda_band(WIN, 0.975)[0], opda_band(LOSE, 0.975)[1]
    assert c.better == tuple(int(n) for n in np.flatnonzero(a_lo > b_hi) + 1) and c.worse == ()
    assert c.better == (2, 3, 4) and c.budget == 30 and c.projection is None
    flipped = bands.compare("b", "a", values, bands.bands(values, "max", (0.0, 100.0)), "max", (0.0, 100.0))
    assert flipped.worse == c.better and flipped.better == ()


def test_where_lower_is_better_the_lower_band_wins() -> None:
    loss = {"a": [0.2 + 0.001 * i for i in range(20)], "b": [0.8 + 0.001 * i for i in range(20)]}
    c = bands.compare("a", "b", loss, bands.bands(loss, "min", (0.0, 1.0)), "min", (0.0, 1.0))
    assert c.better and not c.worse and (c.mine.hi[np.array(c.better) - 1] < c.theirs.lo[np.array(c.better) - 1]).all()


def test_overlapping_bands_name_the_smallest_search_that_would_separate_them() -> None:
    """Arms 10 points apart on a 10-point spread: apart nowhere at 20 configurations; the projection is the
    fewest configurations per arm whose bands (Stephens' widths, within 0.3% of the exact ones), around the same
    scores, are apart at some n <= 20 (99, at n = 2); 3 points apart, no search up to the largest budget allowed
    separates them."""
    ten = {"a": [80.0 + 0.5 * i for i in range(20)], "b": [70.0 + 0.5 * i for i in range(20)]}
    three = {"a": ten["a"], "b": [77.0 + 0.5 * i for i in range(20)]}

    def apart(values: dict[str, list[float]], size: int) -> tuple[int, ...]:
        a, b = (bands.band(values[k], "max", (0.0, 100.0), 0.975, size, bands.stephens) for k in "ab")
        return bands.apart(a, b, 20, True)[0]

    def compared(values: dict[str, list[float]]) -> bands.Comparison:
        return bands.compare("a", "b", values, bands.bands(values, "max", (0.0, 100.0)), "max", (0.0, 100.0))

    c = compared(ten)
    assert c.better == c.worse == () and c.projection is not None
    p = c.projection
    assert apart(ten, p.size) and not apart(ten, p.size - 1) and min(apart(ten, p.size)) == p.at
    assert (p.size, p.at) == (99, 2)
    assert compared(three).projection is None and not apart(three, MAX_BUDGET)
    assert abs(bands.stephens(99, 0.975) / bands.half_width(99, 0.975) - 1) < 0.003


def opda_median(values, confidence: float, ends=(0.0, 100.0), minimize: bool = False) -> tuple[np.ndarray, ...]:
    """opda's KS bands on the median best of n, n = 1..N, and its point curve, as its documentation builds them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ties: coverage is conservative, not exact
        low, point, high = EmpiricalDistribution.confidence_bands(values, confidence, *ends, method="ks")
    ns = np.arange(1, len(values) + 1)
    return tuple(d.quantile_tuning_curve(ns, minimize=minimize) for d in (high, low, point))


@pytest.mark.parametrize("values", [SKEWED, SKEWED[:1], SKEWED[:2], [80.0, 80.0, 81.5, 79.0, 80.0]])
@pytest.mark.parametrize("direction", ["max", "min"])
@pytest.mark.parametrize("ends", [(0.0, 100.0), (0.0, math.inf), (-math.inf, math.inf)])
def test_the_median_band_is_opdas_and_holds_the_median_curve(values, direction, ends) -> None:
    """The median band needs the metric's range only where it reaches an end: open ends give finite edges
    elsewhere (unlike the expected best's, infinite everywhere on that side)."""
    b = bands.band(values, direction, ends, 0.975, curve=bands.MEDIAN)
    lo, hi, point = opda_median(values, 0.975, ends, minimize=direction == "min")
    np.testing.assert_allclose(b.lo, lo, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.hi, hi, rtol=0, atol=1e-9)
    np.testing.assert_allclose(bands.median_best(values, direction), point, rtol=0, atol=1e-9)
    assert (b.lo <= point).all() and (point <= b.hi).all() and b.curve == bands.MEDIAN
    assert np.isfinite([b.lo[0], b.hi[0]]).all() or len(values) < 8  # 20 results: finite at n = 1 on any range


@pytest.mark.parametrize("direction", ["max", "min"])
def test_the_median_band_covers_a_known_curve_at_every_n_as_often_as_it_says(direction) -> None:
    """Scores uniform on [0, 1]: the median best of n is 0.5^(1/n) (of the least, 1 - 0.5^(1/n)). 1000 seeded
    searches of 10 configurations: the 90% band holds the whole curve in at least 90% of them."""
    rng, ns = np.random.default_rng(1), np.arange(1, 11)
    truth = 0.5 ** (1 / ns) if direction == "max" else 1 - 0.5 ** (1 / ns)
    held = [((b.lo <= truth) & (truth <= b.hi)).all()
            for b in (bands.band(rng.random(10), direction, (0.0, 1.0), 0.9, curve=bands.MEDIAN)
                      for _ in range(1000))]  # fmt: skip
    assert np.mean(held) >= 0.9


def test_the_median_bands_are_narrower_and_compared_on_their_own_curve() -> None:
    """Ten points apart over twenty configurations: the expected-best bands overlap at every n, the median bands
    are apart at n = 1 (opda's edges); a projection stays on the median curve."""
    ten = {"a": [80.0 + 0.5 * i for i in range(20)], "b": [70.0 + 0.5 * i for i in range(20)]}
    found = bands.bands(ten, "max", (0.0, 100.0), bands.MEDIAN)
    assert {b.confidence for b in found.values()} == {0.975}
    c = bands.compare("a", "b", ten, found, "max", (0.0, 100.0))
    a_lo, b_hi = opda_median(ten["a"], 0.975)[0], opda_median(ten["b"], 0.975)[1]
    assert c.better == tuple(int(n) for n in np.flatnonzero(a_lo > b_hi) + 1) == (1,) and c.projection is None
    expected = bands.compare("a", "b", ten, bands.bands(ten, "max", (0.0, 100.0)), "max", (0.0, 100.0))
    assert expected.better == expected.worse == () and expected.mine.curve == bands.EXPECTED
    three = {"a": ten["a"], "b": [77.0 + 0.5 * i for i in range(20)]}
    p = bands.compare("a", "b", three, bands.bands(three, "max", (0.0, 100.0), bands.MEDIAN), "max", (0.0, 100.0))
    assert p.better == () and p.projection is not None
    ahead = bands.band(three["a"], "max", (0.0, 100.0), 0.975, p.projection.size, bands.stephens, bands.MEDIAN)
    behind = bands.band(three["b"], "max", (0.0, 100.0), 0.975, p.projection.size, bands.stephens, bands.MEDIAN)
    assert ahead.lo[p.projection.at - 1] > behind.hi[p.projection.at - 1]
    smaller = p.projection.size - 1
    ahead = bands.band(three["a"], "max", (0.0, 100.0), 0.975, smaller, bands.stephens, bands.MEDIAN)
    behind = bands.band(three["b"], "max", (0.0, 100.0), 0.975, smaller, bands.stephens, bands.MEDIAN)
    assert not bands.apart(ahead, behind, 20, True)[0]
