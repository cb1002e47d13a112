"""Best or tied: whether one variant of a set is significantly better than every other, the one rule every place
that names a winner follows (the report's bold cell and Findings, summary.json with the index page and MLflow's
`report.best`, the launch summary). Torch- and pandas-free, so the launcher decides it without loading either.

The variant with the best mean is compared with each other one on the replicates both have (paired
differences, the test `ablate.evidence` gives their number); the k p-values are adjusted together (Holm, or
Benjamini-Hochberg). It is the best only when every adjusted p is below alpha; otherwise it is tied with each
variant it is not significantly better than. A comparison without a test (too few replicates) is never
significant, so a launch of one or two seeds per variant reports a tie, never a winner chosen by noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ablate import evidence

CORRECTIONS = ("holm", "bh")


@dataclass(frozen=True)
class Verdict:
    """The best-or-tied decision over one set of variants (keys as the caller names them)."""

    best: str
    """The variant with the best mean."""
    means: dict[str, float]
    """Each variant's mean over its replicates."""
    p_adj: dict[str, float]
    """Per other variant: the adjusted p of the best against it (NaN where the pair has no test)."""
    tied: tuple[str, ...]
    """The best and every variant it is not significantly better than, by mean (empty when it wins)."""

    @property
    def significant(self) -> bool:
        """Whether the best beats every other variant after correction (a lone variant beats nothing)."""
        return bool(self.p_adj) and not self.tied

    @property
    def largest(self) -> float:
        """The largest adjusted p of the best against the others (NaN when some pair has no test)."""
        return max(self.p_adj.values(), default=math.nan, key=lambda p: math.inf if math.isnan(p) else p)

    def words(self, labels: Mapping[str, str] | None = None) -> str:
        """ "best: X", "tied: X / Y" (best mean first) or "only: X", in `labels`' words."""
        name = (labels or {}).get
        if not self.p_adj:
            return f"only: {name(self.best, self.best)}"
        if self.significant:
            return f"best: {name(self.best, self.best)}"
        return "tied: " + " / ".join(name(v, v) for v in self.tied)


def p_value(d: Sequence[float], ratio: float = 0.0) -> float:
    """The two-sided p of mean(d) == 0 by the small-sample policy's test for these paired differences: the
    (corrected resampled, `ratio` = n_test / n_train) t-test, the exact sign-flip test, or NaN where the policy
    has none. The variant table's `stats.paired` gives the same p (tests/reporting/test_findings.py checks it)."""
    x = np.asarray(d, dtype=float)
    n = len(x)
    kind = evidence.family(n, n - 1, evidence.estimable(x), exchangeable=ratio == 0)
    if kind == evidence.EXACT:
        return evidence.sign_flip(x)[0]
    if kind != evidence.T:
        return math.nan
    from scipy import special  # a third of a second: paid by a launch summary only once a pair has SMALL_N seeds

    t = float(np.mean(x)) / (float(np.std(x, ddof=1)) * math.sqrt(1 / n + ratio))
    return float(2 * special.stdtr(n - 1, -abs(t)))


def adjust(p: Sequence[float], correction: str = "holm") -> list[float]:
    """p-values of one family adjusted together (Holm step-down, or Benjamini-Hochberg step-up), capped at 1;
    NaN (no test) stays NaN and is not a member. The same numbers as `stats.adjust` (checked in the tests)."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    order = sorted((i for i, x in enumerate(p) if not math.isnan(x)), key=lambda i: p[i])
    m, out = len(order), [math.nan] * len(p)
    if correction == "holm":
        running = 0.0
        for rank, i in enumerate(order, 1):
            running = max(running, (m - rank + 1) * p[i])
            out[i] = min(running, 1.0)
    else:
        running = 1.0
        for rank, i in reversed(list(enumerate(order, 1))):
            running = min(running, m / rank * p[i])
            out[i] = min(running, 1.0)
    return out


def decide(
    values: Mapping[str, Mapping[Hashable, float]], higher: bool, correction: str = "holm", ratio: float = 0.0
) -> Verdict | None:
    """Best or tied among `values` (per variant, its metric per replicate; NaN = missing), by the module
    docstring's rule; `higher`: whether a larger metric is better; `ratio`: the resampling correction of a
    cross-validation design (0 for seeds). None when no variant has a value."""
    clean = {v: {r: x for r, x in reps.items() if not math.isnan(x)} for v, reps in values.items()}
    means = {v: statistics.fmean(reps.values()) for v, reps in clean.items() if reps}
    if not means:
        return None
    ranked = sorted(means, key=means.__getitem__, reverse=higher)
    best, others = ranked[0], ranked[1:]
    sign = 1.0 if higher else -1.0  # a pair counts for the best only where its differences favour it
    diffs = [[sign * (clean[best][r] - clean[o][r]) for r in clean[best] if r in clean[o]] for o in others]
    adjusted = dict(zip(others, adjust([p_value(d, ratio) for d in diffs], correction)))
    lost = {o for o, d in zip(others, diffs) if adjusted[o] < evidence.ALPHA and statistics.fmean(d) > 0}
    tied = () if len(lost) == len(others) else tuple(v for v in ranked if v not in lost)
    return Verdict(best, means, adjusted, tied)
