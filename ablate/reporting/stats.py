"""Statistics that respect how a sweep's replicates were made: intervals, paired tests, multiple-comparison
corrections and standardised effects, one row per comparison.

Every function takes a matrix with one row per comparison (a variant against its baseline, an effect)
and one column per replicate (seed, or seed x fold), NaN where a replicate is missing, so a table of
hundreds of variants is one vectorised call. Paired differences are what the tests see: replicate r of a
variant is compared with replicate r of its baseline (same seed, same fold), which removes the variance the
two share (data order, initialisation stream, fold difficulty). Which test, if any, follows the small-sample
policy (`ablate.evidence`: by the number of pairs, one rule for every table) and the `Replicates`:

- independent replicates (seeds): the paired t-test over the differences from SMALL_N pairs, the exact
  sign-flip test with its inverted interval from EXACT_N, none below;
- folds of (repeated) k-fold cross-validation: folds of one repeat share most of their training data, so
  their differences are correlated and the plain t's variance s^2/n is far too small. The corrected
  resampled t-test (Nadeau & Bengio 2003, "Inference for the generalization error"; its repeated k-fold
  form in Bouckaert & Frank 2004) uses (1/n + n_test/n_train) s^2 over all n fold differences, df n - 1,
  from SMALL_N fold differences (their signs are not exchangeable: no exact test below).

A table that makes k comparisons adjusts their p-values together (`adjust`: Holm by default, which
controls the family-wise error; Benjamini-Hochberg, which controls the false discovery rate, on request;
checked against statsmodels' multipletests in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from ablate import evidence
from ablate.evidence import ALPHA as ALPHA
from ablate.evidence import EXACT_N as EXACT_N
from ablate.evidence import LEVEL as LEVEL
from ablate.evidence import SMALL_N as SMALL_N
from ablate.evidence import bootstrap, lenth, pure_error, verdict
from ablate.evidence import zero_spread as zero_spread
from ablate.evidence.pure_error import PureError

T_TEST = "paired t"
LENTH = "Lenth"
LENTH_WORDS = ("; with one value per cell, from Lenth's test instead (n = 1 or 0): the noise is read off the smaller "
               "terms (their pseudo standard error), which assumes most terms are null")  # fmt: skip
PURE = "t (pure error)"
PURE_WORDS = ("; with one value per cell but the reference's, from a t-test against pure error instead: the spread "
              "of the reference cell's runs over seeds (n = 1)")  # fmt: skip
SIGN_FLIP = "sign-flip"
CORRECTED = "corrected resampled t"
#: Corrections `adjust` offers: name -> the words a caption uses.
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
#: Intervals a report may give beside each test: name -> what it adds to the policy's.
INTERVALS = {"policy": "the policy's alone (t or exact sign-flip, by the number of pairs)",
             "bca": "also the paired bootstrap's BCa interval (scipy), from SMALL_N independent pairs"}  # fmt: skip
BISECTIONS = 40
"""Halvings of the standardised effect's search interval (width < 30 + 6|t|): below 1e-10."""
SECANTS = 8
"""Secant steps that estimate the bisection's root before it runs (they converge in 3 to 5)."""
MARGIN = 1e-13
"""How far from the target a cdf value must be to tell on which side of the root its point lies: scipy's
noncentral t cdf is monotone to well within this where measured, and typically moves 5e-13 or more over the
bisection's last interval."""


@dataclass(frozen=True)
class Replicates:
    """How a sweep's replicates relate: independent seeds (folds None), or the folds of k-fold
    cross-validation, repeated over seeds and split seeds."""

    folds: int | None = None

    @property
    def ratio(self) -> float:
        """n_test / n_train of one resample (k-fold: 1 / (k - 1)); 0 for independent replicates."""
        return 0.0 if self.folds is None else 1 / (self.folds - 1)

    @property
    def exchangeable(self) -> bool:
        """Whether the replicates' paired differences are independent, so their signs may be flipped (seeds),
        or correlated (folds of one repeat share training data)."""
        return self.folds is None

    @property
    def unit(self) -> str:
        """What a paired difference is taken over: a seed, or under cross-validation a fold."""
        return "seed" if self.folds is None else "fold"

    @property
    def words(self) -> str:
        if self.folds is None:
            return "independent replicates (seeds)"
        return f"{self.folds}-fold cross-validation (folds within a repeat are not independent)"


def t_test(mean: ArrayLike, se: ArrayLike, df: ArrayLike, level: float = LEVEL) -> tuple[np.ndarray, ...]:
    """(lo, hi, p): the t interval mean +- t(df) se and the two-sided p of mean == 0 (all three NaN where se
    is 0 or undefined: no spread, no interval)."""
    mean, se, df = (np.asarray(a, dtype=float) for a in (mean, se, df))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = np.where(se > 0, special.stdtrit(np.maximum(df, 1), 0.5 + level / 2) * se, np.nan)
        p = np.where(se > 0, 2 * special.stdtr(np.maximum(df, 1), -np.abs(mean / se)), np.nan)
    return mean - half, mean + half, p


def interval(values: np.ndarray, level: float = LEVEL, ratio: float = 0.0) -> pd.DataFrame:
    """Per row of `values` (NaN = missing): n, mean, std (ddof 1), the t interval of the mean (lo, hi),
    and the two-sided one-sample t-test p-value of mean == 0. `ratio` > 0 is the resampling correction
    (see the module docstring): the mean's variance is (1/n + ratio) std^2. Rows with n < 2 get NaN spread
    and p; rows whose spread is zero up to rounding (`zero_spread`) std 0 and no interval or p."""
    x = np.atleast_2d(np.asarray(values, dtype=float))
    n = np.sum(~np.isnan(x), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(x, axis=1) / np.maximum(n, 1), np.nan)
        dev = np.where(np.isnan(x), 0.0, x - mean[:, None])
        std = np.where(n > 1, np.sqrt((dev**2).sum(axis=1) / np.maximum(n - 1, 1)), np.nan)
        std = np.where(zero_spread(std, np.nanmax(np.abs(x), axis=1, initial=0.0)), 0.0, std)
        lo, hi, p = t_test(mean, std * np.sqrt(1 / n + ratio), n - 1, level)
    return pd.DataFrame({"n": n, "mean": mean, "std": std, "lo": lo, "hi": hi, "p_t": p})


def standardised(t: ArrayLike, df: ArrayLike, scale: ArrayLike, level: float = LEVEL) -> tuple[np.ndarray, ...]:
    """The confidence interval of a standardised effect d = t * scale from its t statistic: the noncentral t
    is inverted for its noncentrality (the values at which the observed t sits at the upper and lower
    (1 - level)/2 tails, `noncentrality`), times `scale` (sqrt(1/n + ratio)). NaN where t is not finite."""
    shaped = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (t, df, scale)))
    t, df, scale = (a.ravel() for a in shaped)
    ok = np.isfinite(t) & (df >= 1)
    bounds = []
    for target in (0.5 + level / 2, 0.5 - level / 2):  # cdf falls as ncp rises: the lower bound comes first
        bound = np.full(t.shape, np.nan)
        bound[ok] = noncentrality(t[ok], df[ok], target) * scale[ok]
        bounds.append(bound.reshape(shaped[0].shape))
    return bounds[0], bounds[1]


def noncentrality(t: np.ndarray, df: np.ndarray, target: float) -> np.ndarray:
    """Per element, the noncentrality at which the noncentral t cdf at `t` is `target`: a bisection of
    [t - reach, t + reach] (reach = 10 + 3|t|) in BISECTIONS halvings, its midpoint.

    Each cdf evaluation costs time in proportion to the noncentrality (0.1 ms at 1000), and a bisection
    spends most of its evaluations far from the root. So a few secant steps on the probit of the cdf (close
    to linear in the noncentrality) first estimate the root, the ends of the bisection's last interval
    around that estimate are looked at, and the bisection evaluates only the midpoints that fall between
    what is known: every other midpoint is on a known side (the cdf falls as the noncentrality rises;
    `MARGIN`). The same midpoints and the same answer as evaluating every one, in a fifth of the evaluations."""
    reach = 10 + 3 * np.abs(t)
    above = np.full(t.shape, -np.inf)  # the largest noncentrality seen whose cdf is above target
    below = np.full(t.shape, np.inf)  # the smallest seen whose cdf is not
    every = np.arange(len(t))

    def look(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        c = nct_cdf(t[rows], df[rows], x)
        sure = np.abs(c - target) > MARGIN  # a value within rounding of target (or NaN) places nothing
        above[rows] = np.where(sure & (c > target), np.maximum(above[rows], x), above[rows])
        below[rows] = np.where(sure & (c < target), np.minimum(below[rows], x), below[rows])
        return c

    # start: the normal approximation, T ~ N(ncp, 1 + ncp^2 / 2df), whose cdf's probit is (t - ncp) / spread
    z = special.ndtri(target)
    spread = np.sqrt(1 + t * t / (2 * df))
    x0, x1 = t - z * spread, t - z * spread - 0.1 * spread
    f0, f1 = (special.ndtri(look(x, every)) - z for x in (x0, x1))
    estimate, rows = x1.copy(), every
    cell = 2 * reach * 0.5**BISECTIONS  # the width of the bisection's last interval
    for _ in range(SECANTS):
        with np.errstate(invalid="ignore", divide="ignore"):
            step = f1 * (x1 - x0) / (f1 - f0)
        go = np.isfinite(step) & (np.abs(step) > cell[rows] / 4)
        if not go.any():
            break
        rows, x0, f0 = rows[go], x1[go], f1[go]
        x1 = np.clip(x0 - step[go], t[rows] - reach[rows], t[rows] + reach[rows])
        f1 = special.ndtri(look(x1, rows)) - z
        estimate[rows] = x1
    lo, hi = _bisect(t - reach, t + reach, lambda mid: mid <= estimate)  # where the bisection would end
    look(lo, every)
    look(hi, every)
    for end, open_ in ((lo - cell, above < lo), (hi + cell, below > hi)):  # an end within rounding: one further
        look(end[open_], np.flatnonzero(open_))

    def side(mid: np.ndarray) -> np.ndarray:
        hit = mid <= above
        rows = np.flatnonzero((mid > above) & (mid < below))
        if len(rows):
            hit[rows] = look(mid[rows], rows) > target
        return hit

    lo, hi = _bisect(t - reach, t + reach, side)
    root: np.ndarray = (lo + hi) / 2
    return root


def _bisect(lo: np.ndarray, hi: np.ndarray, above: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The last interval of BISECTIONS halvings of [lo, hi], keeping the upper half where `above(mid)`."""
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        hit = above(mid)
        lo, hi = np.where(hit, mid, lo), np.where(hit, hi, mid)
    return lo, hi


def nct_cdf(t: np.ndarray, df: np.ndarray, ncp: np.ndarray) -> np.ndarray:
    """The noncentral t cdf (scipy's `nct.cdf`, without its argument checks: df >= 1 and everything is finite
    here). scipy's is NaN at points of a band around ncp = -t (t = 11.73, 22 df: ncp -15 to -9), where its
    complement at (-t, -ncp), the same number, is not."""
    c = np.asarray(special.nctdtr(df, ncp, t), dtype=float)
    bad = np.isnan(c)
    if bad.any():  # scipy.stats (0.4 s to import, which a report otherwise does without) only for the band
        from scipy import stats

        c[bad] = stats.nct.sf(-t[bad], df[bad], -ncp[bad])
    return c


def paired(
    diffs: np.ndarray,
    level: float = LEVEL,
    replicates: Replicates = Replicates(),
    effect: bool = True,
    resampled: bool = False,
) -> pd.DataFrame:
    """Paired comparison per row of differences (variant - baseline per replicate): n, mean and std
    (`interval`'s), the test the small-sample policy gives the row's pairs (`test`: T_TEST or CORRECTED,
    SIGN_FLIP, or "" with `why` in words: `ablate.evidence`), its p-value (`p`) and the interval that agrees
    with it (`lo`, `hi`: the t interval, corrected for resampling under a cross-validation design, or the
    sign-flip test's inversion; NaN without a test), and the standardised effect d = mean / std of the
    differences (Cohen's d_z; under resampling the same ratio over the fold differences; NaN without a test)
    with its noncentral t interval (`d_lo`, `d_hi`: beside a t-test only, and unless `effect` is False: the
    interval is the costly part, which simulations of thousands of comparisons leave out). With `resampled`, also
    the paired bootstrap's BCa interval (`b_lo`, `b_hi`; `ablate.evidence.bootstrap`) where its rule allows one,
    and `b_why` where the row has a test but no such interval."""
    d = np.atleast_2d(np.asarray(diffs, dtype=float))
    out = interval(d, level, replicates.ratio)
    n, std = out["n"].to_numpy(), out["std"].to_numpy()
    rows = [(int(k), int(k) - 1, bool(s > 0), replicates.exchangeable) for k, s in zip(n, std)]
    kind = np.array([evidence.family(*r) for r in rows])
    out["why"] = [evidence.why(*r, replicates.unit) for r in rows]
    t = kind == evidence.T
    out["p"] = np.where(t, out["p_t"], np.nan)
    out["lo"], out["hi"] = np.where(t, out["lo"], np.nan), np.where(t, out["hi"], np.nan)
    for i in np.flatnonzero(kind == evidence.EXACT):
        out.loc[i, ["p", "lo", "hi"]] = evidence.sign_flip(d[i][~np.isnan(d[i])], level)
    t_name = T_TEST if replicates.exchangeable else CORRECTED
    out["test"] = np.select([t, kind == evidence.EXACT], [t_name, SIGN_FLIP], "")
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.sqrt(1 / np.maximum(n, 1) + replicates.ratio)
        d_z = np.where(out["test"] != "", out["mean"].to_numpy() / std, np.nan)
        out["d"] = d_z
        out["d_lo"] = out["d_hi"] = np.nan
        if effect and t.any():
            lo, hi = standardised(d_z[t] / scale[t], n[t] - 1, scale[t], level)
            out.loc[t, "d_lo"], out.loc[t, "d_hi"] = lo, hi
    if resampled:
        ok = np.array([bootstrap.allowed(*r) for r in rows], dtype=bool)
        out["b_lo"] = out["b_hi"] = np.nan
        for k in np.unique(n[ok]):  # rows of one length together: scipy resamples them in one call
            at = np.flatnonzero(ok & (n == k))
            out.loc[at, "b_lo"], out.loc[at, "b_hi"] = bootstrap.bca(np.array([x[~np.isnan(x)] for x in d[at]]), level)
        out["b_why"] = ["" if o or k == evidence.NONE else bootstrap.why(r[0], r[3], replicates.unit)
                        for r, k, o in zip(rows, kind, ok)]  # fmt: skip
    return out.drop(columns="p_t")


def pairing(values: np.ndarray, refs: np.ndarray, higher: bool = True) -> pd.DataFrame:
    """What pairing bought, per row of `values` (a variant's replicates) and `refs` (the same replicates of its
    reference; NaN = missing), over the replicates both have: the correlation `rho` of the two arms across
    replicates; `removed`, the share of the unpaired difference's variance that pairing removes, 1 - var(v - r) /
    (var(v) + var(r)) = 2 cov / (var(v) + var(r)) (rho itself where both arms spread alike; negative where pairing
    adds variance); and `better`, the probability that a replicate of the variant beats the same replicate of the
    reference (`ablate.evidence.bootstrap.improvement`). rho and removed are NaN below 2 pairs or where an arm (for
    removed: both) has no spread."""
    v, r = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (values, refs))
    both = ~np.isnan(v) & ~np.isnan(r)
    v, r = np.where(both, v, np.nan), np.where(both, r, np.nan)
    n = both.sum(axis=1)
    magnitude = np.fmax(np.nanmax(np.abs(v), axis=1, initial=0.0), np.nanmax(np.abs(r), axis=1, initial=0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        dv, dr = (np.where(both, a - np.nansum(a, axis=1, keepdims=True) / np.maximum(n, 1)[:, None], 0.0)
                  for a in (v, r))  # fmt: skip
        var_v, var_r, cov = ((a * b).sum(axis=1) / (n - 1) for a, b in ((dv, dv), (dr, dr), (dv, dr)))
        flat_v, flat_r = zero_spread(np.sqrt(var_v), magnitude), zero_spread(np.sqrt(var_r), magnitude)
        rho = np.where((n > 1) & ~flat_v & ~flat_r, cov / np.sqrt(var_v * var_r), np.nan)
        removed = np.where((n > 1) & ~(flat_v & flat_r), 2 * cov / (var_v + var_r), np.nan)
    better = bootstrap.improvement(v - r, magnitude, higher)
    return pd.DataFrame({"rho": rho, "removed": removed, "better": better})


def unreplicated(
    effects: ArrayLike,
    weights: np.ndarray,
    count: np.ndarray,
    unit: str,
    screen: str = "",
    error: PureError | None = None,
) -> pd.DataFrame:
    """The test of effects estimated from cell means where replicates give no paired test: effect j = weights[j] @
    means and cell i's mean is over count[i] values, so the effects' covariance is weights diag(1 / count)
    weights^T times the noise variance. Against `error` (`ablate.evidence.pure_error`: cells run at several seeds)
    where it has a spread, else Lenth's test (`ablate.evidence.lenth`). Columns lo, hi, p, test (PURE, LENTH or
    "") and why there is none (`_no_lenth`); where Lenth's test read it, t (the effect over its pseudo standard
    error, the half-normal plot's ordinate), screen (`screen`, the name of the family of terms one Lenth's test read
    together) and terms (how many it read: a caller may show fewer rows, as a screen's dummy contrasts only measure
    the noise)."""
    est = np.asarray(effects, dtype=float)
    empty = {"lo": np.nan, "hi": np.nan, "p": np.nan, "test": "", "why": "", "t": np.nan, "screen": "", "terms": 0}
    out = pd.DataFrame(empty, index=range(len(est)))
    cov = (weights / count) @ weights.T
    se = np.sqrt(np.diag(cov))
    against = pure_error.test(est, se, error) if error is not None and not np.isnan(est).any() else None
    if against is not None:
        out["lo"], out["hi"], out["p"], out["test"] = against.lo, against.hi, against.p, PURE
        return out
    orthogonal = bool(np.abs(cov - np.diag(se**2)).max(initial=0.0) <= 1e-9 * se.max(initial=0.0) ** 2)
    found = lenth.test(est, se) if orthogonal and not np.isnan(est).any() else None
    if found is None:
        out["why"] = _no_lenth(est, orthogonal, unit)
    else:
        out["lo"], out["hi"], out["p"], out["test"] = found.lo, found.hi, found.p, LENTH
        out["t"], out["screen"], out["terms"] = est / se / found.pse, screen, len(est)
    return out


def _no_lenth(est: np.ndarray, orthogonal: bool, unit: str) -> str:
    """Why Lenth's test does not apply, in a table cell's words: a missing cell, fewer terms than it needs, terms
    that are not orthogonal contrasts (correlated estimates: levels of a factor of three or more, each against one
    reference), or most terms zero."""
    if np.isnan(est).any():
        return f"1 {unit} per cell, a cell missing"
    if len(est) < lenth.MIN_TERMS:
        return f"1 {unit} per cell, {len(est)} terms; Lenth's test needs {lenth.MIN_TERMS}"
    if not orthogonal:
        return f"1 {unit} per cell; terms not orthogonal: no Lenth's test"
    return f"1 {unit} per cell; most terms zero"


def adjust(p: ArrayLike, method: str = "holm") -> np.ndarray:
    """The p-values of one family adjusted together (`ablate.evidence.verdict.adjust`, the one implementation: Holm's
    step-down controls the family-wise error, Benjamini-Hochberg's step-up the false discovery rate; NaN entries
    are not members), as an array of `p`'s shape. (statsmodels' multipletests gives the same numbers, which the
    tests check, but collects garbage on every Holm call: 0.1 s each.)"""
    p = np.asarray(p, dtype=float)
    return np.asarray(verdict.adjust(p.ravel().tolist(), method), dtype=float).reshape(p.shape)


def family(k: int, method: str, what: str) -> str:
    """The caption's words for a corrected family: which correction, over which k comparisons."""
    return f"p adj.: {CORRECTIONS[method]}-adjusted over the family of the {k} {what}"


def starred(k: int, method: str, what: str) -> str:
    """`family`'s words and what a table's star means, for tables that mark significant rows."""
    return f"{family(k, method, what)}; * = significant after adjustment (α = {ALPHA:.2f})."
