"""What more replicates could decide: the minimum detectable difference (MDD) of a comparison and the
replicates that would decide it, both at the level the report's decision uses.

"Decided" means p adjusted over the comparison's family below alpha. Holm and Benjamini-Hochberg both adjust a
p at most k-fold in a family of k, so a p below alpha / k is decided whatever the other comparisons' p: that is
the level (`level`) at which every figure here is computed. It also decides which test can reach it: the exact
sign-flip test's smallest p is 2 / 2^n, so at alpha / k it needs the n of `evidence.exact_n(alpha / k)` pairs
(7 in a family of 3, where 6 pairs' 0.031 is adjusted to 0.094), the t-test any n from SMALL_N.

The MDD of n paired differences at two-sided level a and power 1 - beta is

    MDD(n) = (t_{1 - a/2, n - 1} + t_{1 - beta, n - 1}) * SD * sqrt(1/n + ratio)

with SD the standard deviation of the paired differences the sweep measured and `ratio` the resampling
correction of cross-validation (0 for seeds). It is the t-test's (Cohen 1988, normal-theory); where the policy's
test is the sign-flip test its power on normal differences is close to it and the same formula is used; where no
test of the policy can reach a at n pairs, the MDD is infinite. Under cross-validation more repeats add fold
differences but the MDD cannot fall below its floor (z_{1 - a/2} + z_{1 - beta}) * SD * sqrt(ratio) (`floor`):
only a smaller SD (less noisy folds: more data per fold) lowers it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from ablate import evidence
from ablate.reporting.stats import Replicates
from ablate.spec.schema import MAX_SEEDS

POWER = 0.8
"""1 - beta of the minimum detectable difference: the conventional 80%."""


def level(k: int) -> float:
    """The unadjusted level that decides a comparison in a family of k whatever the others' p (module docstring)."""
    return evidence.ALPHA / max(k, 1)


def fewest(a: float, replicates: Replicates) -> int:
    """The fewest paired differences at which the policy's test can reach p < a: the sign-flip test's n where
    the replicates are exchangeable and that is under SMALL_N, else the t's SMALL_N."""
    return min(evidence.exact_n(a), evidence.SMALL_N) if replicates.exchangeable else evidence.SMALL_N


def mdds(sd: float | np.ndarray, n: np.ndarray, a: float, replicates: Replicates) -> np.ndarray:
    """The MDD (module docstring) at level `a` of n paired differences with SD `sd` (one, or one per n), for each n
    of `n`; infinite where the policy's test cannot reach `a` at n."""
    n = np.asarray(n, dtype=float)
    ok = n >= max(fewest(a, replicates), 2)
    m = np.where(ok, n, 2.0)
    out: np.ndarray = np.where(ok, _quantiles(a, tuple(m.tolist())) * sd * np.sqrt(1 / m + replicates.ratio), np.inf)
    return out


@functools.lru_cache(maxsize=64)
def _quantiles(a: float, n: tuple[float, ...]) -> np.ndarray:
    """t_{1 - a/2, n - 1} + t_{power, n - 1} for each n: the same per level and counts whatever the SD, and the
    Findings ask `needed` for every count up to MAX_SEEDS once per comparison they list (read-only: shared)."""
    m = np.array(n)
    q = np.asarray(special.stdtrit(m - 1, 1 - a / 2) + special.stdtrit(m - 1, POWER))
    q.flags.writeable = False
    return q


def mdd(sd: float, n: int, a: float, replicates: Replicates) -> float:
    """`mdds` of one n."""
    return float(mdds(sd, np.array([n]), a, replicates)[0])


def floor(sd: float, a: float, replicates: Replicates) -> float:
    """What the MDD tends to as the replicates grow: 0 for seeds, (z_{1-a/2} + z_{power}) SD sqrt(ratio) under
    cross-validation."""
    return float((special.ndtri(1 - a / 2) + special.ndtri(POWER)) * sd * np.sqrt(replicates.ratio))


@dataclass(frozen=True)
class Need:
    """The replicates that would decide a difference: `runs` seeds (or repeats of the k-fold split), giving `n`
    paired differences; None where no feasible count does."""

    runs: int
    n: int


def needed(sd: float, target: float, k: int, have: int, replicates: Replicates) -> Need | None:
    """The fewest seeds (repeats under cross-validation, each `replicates.folds` differences) above `have` paired
    differences whose MDD at `level(k)` reaches `target`; None beyond MAX_SEEDS or under the cross-validation
    floor."""
    step = replicates.folds or 1
    runs = np.arange(1, MAX_SEEDS + 1)
    n = runs * step
    reach = np.flatnonzero((n > have) & (mdds(sd, n, level(k), replicates) <= target))
    return Need(int(runs[reach[0]]), int(n[reach[0]])) if len(reach) else None


__all__ = ["POWER", "Need", "fewest", "floor", "level", "mdd", "mdds", "needed"]
