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


@dataclass(frozen=True)
class Lenth:
    """Per term: p, the interval's ends (on the terms' own scale), and the pseudo standard error they share."""

    p: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pse: float


def pse(c: np.ndarray) -> float:
    """Lenth's pseudo standard error of the estimates `c` (already on a common scale)."""
    a = np.abs(np.asarray(c, dtype=float))
    s0 = 1.5 * float(np.median(a))
    return 1.5 * float(np.median(a[a < 2.5 * s0])) if s0 > 0 else 0.0


@functools.lru_cache(maxsize=64)
def null(m: int) -> np.ndarray:
    """The sorted |t| of every term of DRAWS simulated null designs of m terms (normal noise, no effect)."""
    c = np.random.default_rng(SEED + m).standard_normal((DRAWS, m))
    a = np.abs(c)
    s0 = 1.5 * np.median(a, axis=1, keepdims=True)
    trimmed = np.where(a < 2.5 * s0, a, np.nan)
    scale = 1.5 * np.nanmedian(trimmed, axis=1, keepdims=True)
    return np.sort((a / scale).ravel())


def quantile(m: int, level: float = LEVEL) -> float:
    """The critical |t| of m terms at `level`: `test`'s p is below 1 - level exactly for a |t| above it."""
    ref = null(m)
    return float(ref[int(np.floor(level * (len(ref) + 1)))])


def test(estimates: np.ndarray, unit: np.ndarray, level: float = LEVEL) -> Lenth | None:
    """Lenth's test of m estimates whose standard errors are `unit` times one unknown sigma; None where it does not
    apply (fewer than MIN_TERMS terms, or no spread: more than half the estimates are zero)."""
    est, unit = np.asarray(estimates, dtype=float), np.asarray(unit, dtype=float)
    c = est / unit
    s = pse(c)
    if len(c) < MIN_TERMS or zero_spread(s, np.max(np.abs(c))):
        return None
    ref = null(len(c))
    t = np.abs(c) / s
    p = (len(ref) - np.searchsorted(ref, t, side="left") + 1) / (len(ref) + 1)
    half = quantile(len(c), level) * s * unit
    return Lenth(np.minimum(p, 1.0), est - half, est + half, s)
