"""Lenth's test for an unreplicated two-level design: one value per cell, so no replicate spread to test against.

Effect sparsity stands in for replication (Lenth 1989, "Quick and easy analysis of unreplicated factorials"): most
of a screening design's terms are null, so the small ones measure the noise. With the m term estimates c_j on a
common scale (each divided by its standard error up to the shared sigma, `unit`):

    s0  = 1.5 median |c_j|
    PSE = 1.5 median { |c_j| : |c_j| < 2.5 s0 }     (pseudo standard error: the trimmed median drops real effects)
    t_j = c_j / PSE

Under no effect and normal noise the t_j's distribution depends on m alone. Lenth approximated it by a t with m/3
degrees of freedom, which is conservative; here it is simulated once per m from a fixed seed (as Ye & Hamada 2000
tabled it, and Lenth's own unrepx does), so p and the interval come from the same exact null: p < alpha exactly
when the interval `c_j +- q PSE` leaves out 0, q the null's `level` quantile of |t|. The p of each term is its
individual error rate; the table's Holm (or BH) adjustment over the terms takes care of the family.

Fewer than MIN_TERMS terms leave the medians too few values to tell the noise's scale from an effect's: no test.
The terms must be orthogonal contrasts (independent estimates), which the callers check.

A half-normal (Daniel) plot reads the same t against two margins (Lenth's): the margin of error ME, the null's
`level` quantile of one |t| (a term beyond it is active at the per-term rate), and the simultaneous margin SME, the
null's `level` quantile of the largest of the m |t| (beyond it, active at the family's rate: under no effect at all,
no term of m crosses it in 95% of designs). Both are simulated, as p is. Dong's pseudo standard error (Dong
1993, "On the identification of active contrasts in unreplicated fractional factorials") is the root mean square
of the |c_j| up to 2.5 s0 instead of Lenth's median of those below: it uses the inert terms' sizes, not their
middle one, so it varies less from design to design where the active terms stand clear of the trim (4 active of
15 at 10 sigma: root mean square error 0.23 sigma against Lenth's 0.35), and is pulled up more by active terms
near it. Its null is simulated the same way (`DONG`); read beside Lenth's, a disagreement says the verdict leans on
which terms the trim kept.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ablate.evidence import LEVEL, zero_spread

MIN_TERMS = 7
"""The fewest terms Lenth's test is run on: a saturated 8-run design (7 terms) is the smallest Lenth studied."""
DRAWS = 100_000
"""Simulated designs per m: the null's 95% quantile of |t| to about 0.01."""
SEED = 1989


LENTH = "Lenth"
DONG = "Dong"
METHODS = (LENTH, DONG)
"""The pseudo standard errors offered: Lenth's trimmed median, Dong's trimmed root mean square."""


@dataclass(frozen=True)
class Lenth:
    """Per term: p, the interval's ends (on the terms' own scale), and the pseudo standard error they share."""

    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pse: float


@dataclass(frozen=True)
class Margins:
    """A family's pseudo standard error and its margins, on the scale of the terms it was computed from: a term
    whose |estimate| passes `me` is active at the per-term rate, one that passes `sme` at the family's."""

    method: str
    pse: float
    me: float
    sme: float


def _scales(a: np.ndarray, method: str) -> np.ndarray:
    """The pseudo standard error of each row of the absolute estimates `a` (rows x m), by `method`."""
    s0 = 1.5 * np.median(a, axis=1, keepdims=True)
    if method == LENTH:
        return np.asarray(1.5 * np.nanmedian(np.where(a < 2.5 * s0, a, np.nan), axis=1, keepdims=True))
    if method == DONG:
        return np.asarray(np.sqrt(np.nanmean(np.where(a <= 2.5 * s0, a**2, np.nan), axis=1, keepdims=True)))
    raise ValueError(f"unknown pseudo standard error {method!r}: one of {', '.join(METHODS)}")


def pse(c: np.ndarray, method: str = LENTH) -> float:
    """The pseudo standard error of the estimates `c` (already on a common scale), Lenth's or Dong's."""
    a = np.abs(np.asarray(c, dtype=float))[None]
    return float(_scales(a, method)[0, 0]) if np.median(a) > 0 else 0.0


@functools.lru_cache(maxsize=64)
def _simulated(m: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """DRAWS simulated null designs of m terms (normal noise, no effect): every term's |t| and each design's
    largest, both sorted."""
    c = np.random.default_rng(SEED + m).standard_normal((DRAWS, m))
    t = np.abs(c) / _scales(np.abs(c), method)
    return np.sort(t.ravel()), np.sort(t.max(axis=1))


def null(m: int, method: str = LENTH) -> np.ndarray:
    """The sorted |t| of every term of DRAWS simulated null designs of m terms (normal noise, no effect)."""
    return _simulated(m, method)[0]


def _at(ref: np.ndarray, level: float) -> float:
    return float(ref[int(np.floor(level * (len(ref) + 1)))])


def quantile(m: int, level: float = LEVEL, method: str = LENTH) -> float:
    """The critical |t| of m terms at `level`: `test`'s p is below 1 - level exactly for a |t| above it."""
    return _at(null(m, method), level)


def margins(c: np.ndarray, method: str = LENTH, level: float = LEVEL) -> Margins:
    """The pseudo standard error of the m estimates `c` (on a common scale) by `method`, and its ME and SME: the
    simulated null's `level` quantiles of one |t| and of the largest of m, times it."""
    s = pse(c, method)
    every, largest = _simulated(len(c), method)
    return Margins(method, s, _at(every, level) * s, _at(largest, level) * s)


def pvalues(t: np.ndarray, m: int, method: str = LENTH) -> np.ndarray:
    """The p of each |t| against the simulated null of m terms by `method`."""
    ref = null(m, method)
    return np.asarray(np.minimum((len(ref) - np.searchsorted(ref, np.abs(t), side="left") + 1) / (len(ref) + 1), 1.0))


def test(estimates: np.ndarray, unit: np.ndarray, level: float = LEVEL) -> Lenth | None:
    """Lenth's test of m estimates whose standard errors are `unit` times one unknown sigma; None where it does not
    apply (fewer than MIN_TERMS terms, or no spread: more than half the estimates are zero)."""
    est, unit = np.asarray(estimates, dtype=float), np.asarray(unit, dtype=float)
    c = est / unit
    s = pse(c)
    if len(c) < MIN_TERMS or zero_spread(s, np.max(np.abs(c))):
        return None
    half = quantile(len(c), level) * s * unit
    return Lenth(pvalues(c / s, len(c)), est - half, est + half, s)
