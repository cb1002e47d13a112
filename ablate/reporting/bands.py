"""Confidence bands for tuning curves (Lourie, He & Cho, "Show Your Work with Confidence", NAACL 2024): the expected
best of n configurations and the median best of n, simultaneous over every n, distribution-free, and exact, where a
point estimate (Dodge et al., `ablate.reporting.expected_best`) says nothing of how far the curve could be from the
truth. Bootstrap bands under-cover at the budgets sweeps spend; these do not.

An arm's N results are a sample of what one configuration gives. The Kolmogorov-Smirnov band around their
empirical CDF, ± the exact critical value of the two-sided KS statistic (scipy's `kstwo`), holds at every score
at once with the stated confidence whatever the distribution (exactly for a continuous one, conservatively with
ties). The expected best of n grows as the distribution moves up, for every n, so the band's two edges bound
every point of the curve at once: the edge that moves mass to the bottom of the metric's range gives the lower
curve, the one that moves it to the top the upper curve. So a band needs the metric's range (0-100 for
accuracies in percent, 0-1 for AUC); where the range is open on a side (a loss has no top), that side is
infinite. opda (Lourie's library) computes the curves of those distributions; its own `confidence_bands(...,
method="ks")` gives the same bands (tests/reporting/test_bands.py).

The median best of n (`MEDIAN`, opda's `quantile_tuning_curve`: the score half of all searches of n configurations
reach) is what Lourie et al. recommend comparing: the same CDF band bounds it through quantiles, which move only where
the band moves the mass near them, so its band is narrow at the budgets sweeps spend where the expected best's, which
must allow a share of mass at the metric's ends, is wide. It needs the metric's range only at the budgets where the
band reaches an end (infinite there for an open end). Both curves' bands come from one CDF band per arm, so they hold
together.

Each of m arms gets confidence 1 - α/m (Bonferroni, valid however the arms' searches depend on each other), so
every band holds at once with 1 - α: two arms whose bands are apart at n differ in that curve at n, and every
such statement of a report holds together.

opda and scipy.stats are imported where a band is computed: a report with no tuned arms (every section but Tuning)
does without them (`python -c "import scipy.stats"` took 0.60 s, `scipy.special` 0.24 s; bench/README.md, 2026-12-03
night).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ablate import evidence
from ablate.spec.tuning import MAX_BUDGET

Curve = Literal["expected", "median"]
EXPECTED: Curve = "expected"
MEDIAN: Curve = "median"
"""The tuning curves a band is on: the expected best of n configurations (Dodge et al.), the median best of n."""

PERCENT, UNIT, LOSS = ("top1", "top5", "acc"), ("auc",), ("loss", "nll")
"""Metric names (their last part) by range: percent (0-100), a fraction (0-1), non-negative without a top."""


def bounds(metric: str) -> tuple[float, float]:
    """The range a metric's scores lie in, read from its name (infinite where the name bounds nothing)."""
    name = metric.rsplit(".", 1)[-1]
    if name in PERCENT:
        return 0.0, 100.0
    if name in UNIT:
        return 0.0, 1.0
    return (0.0, math.inf) if name in LOSS else (-math.inf, math.inf)


@functools.cache
def half_width(n: int, confidence: float) -> float:
    """The KS band's half-width for n results: the `confidence` quantile of the two-sided KS statistic."""
    from scipy import stats

    return float(stats.kstwo.ppf(confidence, n))


def stephens(n: int, confidence: float) -> float:
    """Stephens' approximation to `half_width` from n = 8 (within 0.3% at 95-97.5%, 0.8% at 1 - 0.05/8: eight
    arms), the exact width below."""
    return _limit(confidence) / (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) if n >= 8 else half_width(n, confidence)


@functools.cache
def _limit(confidence: float) -> float:
    """The `confidence` quantile of Kolmogorov's limiting distribution."""
    from scipy import stats

    return float(stats.kstwobign.ppf(confidence))


@dataclass(frozen=True)
class Band:
    """An arm's band on its expected or median best of n configurations, n = 1..N (index n - 1)."""

    lo: np.ndarray
    hi: np.ndarray
    confidence: float
    """The band's own confidence (1 - α/m over m arms)."""
    curve: Curve = EXPECTED


def median_best(values: Sequence[float], direction: Literal["max", "min"]) -> np.ndarray:
    """The median best of n of an arm's finite `values`, n = 1..len(values): the point curve its median band holds
    (opda's `quantile_tuning_curve` of their empirical distribution)."""
    from opda.nonparametric import EmpiricalDistribution

    dist = EmpiricalDistribution(np.asarray(values, dtype=float))
    return np.asarray(dist.quantile_tuning_curve(np.arange(1, len(values) + 1), minimize=direction == "min"))


def band(
    values: Sequence[float],
    direction: Literal["max", "min"],
    ends: tuple[float, float],
    confidence: float,
    size: int | None = None,
    width: Callable[[int, float], float] = half_width,
    curve: Curve = EXPECTED,
) -> Band:
    """The band of an arm's finite `values` on the metric's range `ends`, for n = 1..len(values), on the `curve`
    named; its width is that of `size` results (default: as many as there are), which projects a larger search
    with the same distribution of scores."""
    ys = np.sort(np.asarray(values, dtype=float))
    n = len(ys)
    if n == 0 or not np.isfinite(ys).all():
        raise ValueError(f"expected a non-empty list of finite results, got {list(values)}")
    eps = width(size or n, confidence)
    cdf = np.arange(n + 1) / n
    ns = np.arange(1, n + 1)

    def edge(cum: np.ndarray, bottom: float, top: float) -> np.ndarray:
        """The curve under the distribution with CDF `cum` at [bottom, ys...], the rest at top."""
        minimize = direction == "min"
        if curve == EXPECTED and not (math.isfinite(bottom) and math.isfinite(top)):
            return np.full(n, bottom if math.isinf(bottom) else top)
        from opda.nonparametric import EmpiricalDistribution

        ws = np.diff(np.clip(cum, 0.0, 1.0), prepend=0.0, append=1.0)
        dist = EmpiricalDistribution(np.concatenate([[bottom], ys, [top]]), ws=ws, a=bottom, b=top)
        if curve == MEDIAN:
            return np.asarray(dist.quantile_tuning_curve(ns, minimize=minimize), dtype=float)
        return np.asarray(dist.average_tuning_curve(ns, minimize=minimize), dtype=float)

    low, high = min(ends[0], ys[0]), max(ends[1], ys[-1])
    return Band(edge(cdf + eps, low, ys[-1]), edge(cdf - eps, ys[0], high), confidence, curve)


def bands(
    values: Mapping[str, Sequence[float]],
    direction: Literal["max", "min"],
    ends: tuple[float, float],
    curve: Curve = EXPECTED,
) -> dict[str, Band]:
    """Each arm's band on `curve` (arms without results have none), all of them holding at once with 1 - α."""
    measured = {arm: v for arm, v in values.items() if len(v)}
    confidence = 1 - evidence.ALPHA / max(len(measured), 1)
    return {arm: band(v, direction, ends, confidence, curve=curve) for arm, v in measured.items()}


@dataclass(frozen=True)
class Projection:
    """The smallest search whose bands would separate two arms, at the scores seen so far (an estimate: the
    widths are Stephens' approximation, `stephens`)."""

    size: int
    """Configurations per arm."""
    at: int
    """The smallest budget n (up to the most both tried) at which they would be apart."""


@dataclass(frozen=True)
class Comparison:
    """Two tuned arms' bands, budget by budget, up to the most configurations both have results for."""

    arm: str
    other: str
    budget: int
    better: tuple[int, ...]
    """The budgets n at which `arm`'s band is wholly better than `other`'s (higher, or lower where lower is)."""
    worse: tuple[int, ...]
    mine: Band
    theirs: Band
    projection: Projection | None
    """Where the bands overlap at every budget: the search that would separate them (None where none up to the
    largest budget allowed would, or where they are apart somewhere already)."""


def apart(mine: Band, theirs: Band, budget: int, higher: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The budgets n <= `budget` at which `mine` is wholly better than `theirs`, and those at which it is wholly
    worse."""
    above = mine.lo[:budget] > theirs.hi[:budget]
    below = mine.hi[:budget] < theirs.lo[:budget]
    better, worse = (above, below) if higher else (below, above)
    return tuple(int(n) for n in np.flatnonzero(better) + 1), tuple(int(n) for n in np.flatnonzero(worse) + 1)


def compare(
    arm: str,
    other: str,
    values: Mapping[str, Sequence[float]],
    found: Mapping[str, Band],
    direction: Literal["max", "min"],
    ends: tuple[float, float],
) -> Comparison:
    """`arm` against `other`, both with bands in `found` (from `bands(values, ...)`)."""
    mine, theirs = found[arm], found[other]
    budget = min(len(mine.lo), len(theirs.lo))
    better, worse = apart(mine, theirs, budget, direction == "max")
    projected = None if better or worse else _projection(values[arm], values[other], mine, direction, ends)
    return Comparison(arm, other, budget, better, worse, mine, theirs, projected)


def _projection(
    mine: Sequence[float],
    theirs: Sequence[float],
    like: Band,
    direction: Literal["max", "min"],
    ends: tuple[float, float],
) -> Projection | None:
    """The fewest configurations per arm, more than either tried and up to the largest budget allowed, whose
    bands around the two empirical distributions seen so far are apart at some budget up to the most both tried,
    by bisection (bands narrow as the size grows), on the curve of `like` at its confidence. The widths are
    Stephens': an estimate of a search not run needs no exact quantile, which costs milliseconds to tens of them
    per size."""
    budget = min(len(mine), len(theirs))

    def at(size: int) -> int | None:
        a, b = (band(v, direction, ends, like.confidence, size, stephens, like.curve) for v in (mine, theirs))
        better, worse = apart(a, b, budget, direction == "max")
        return min(better + worse, default=None)

    lo, hi = max(len(mine), len(theirs)), MAX_BUDGET
    first = at(hi) if hi > lo else None
    if first is None:
        return None
    while hi - lo > 1:  # apart at hi (at budget `first`); lo is what the sweep ran, or a size found too small
        mid = (lo + hi) // 2
        n = at(mid)
        lo, hi, first = (lo, mid, n) if n is not None else (mid, hi, first)
    return Projection(hi, first)
