"""How good each arm gets with how much tuning: Dodge et al.'s expected best validation score as a function
of the configurations tried ("Show Your Work", EMNLP 2019), and the budget past which the arms' ranking holds.

An arm's N tuning results are a sample of what one configuration of its search gives. The best of n
configurations drawn from them (with replacement) is v_(i), the i-th smallest, with probability
(i/N)^n - ((i-1)/N)^n, so its expectation and variance are weighted sums over the sorted results. At n = 1 it
is the mean of the results; as n grows it approaches their best. Comparing arms along these curves says
whether a conclusion holds at every budget or only at the one the sweep happened to spend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class ExpectedBest:
    """The expected best of n configurations and its variance, for n = 1..N (index n - 1)."""

    mean: np.ndarray
    var: np.ndarray

    @property
    def n(self) -> np.ndarray:
        """The budgets: 1..N."""
        return np.arange(1, len(self.mean) + 1)

    @property
    def std(self) -> np.ndarray:
        """The spread of the best of n (the band a plot draws around the mean)."""
        return np.asarray(np.sqrt(self.var))


def expected_best(values: ArrayLike, direction: Literal["max", "min"] = "max") -> ExpectedBest:
    """Dodge et al.'s expected maximum (minimum when lower is better) of n of `values`, n = 1..len(values).
    `values` are the arm's finite tuning results (a failed configuration has none: leave it out and say so)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) == 0 or not np.isfinite(v).all():
        raise ValueError(f"expected a non-empty list of finite results, got {v.tolist()}")
    sign = 1.0 if direction == "max" else -1.0
    ordered = np.sort(sign * v)  # the minimum of n is minus the maximum of the negated results
    big_n = len(ordered)
    n = np.arange(1, big_n + 1)[:, None]
    i = np.arange(1, big_n + 1)[None, :]
    weights = (i / big_n) ** n - ((i - 1) / big_n) ** n  # [n, i]: P(the best of n is the i-th smallest)
    mean = weights @ ordered
    var = np.einsum("ni,ni->n", weights, (ordered[None, :] - mean[:, None]) ** 2)
    return ExpectedBest(sign * mean, np.maximum(var, 0.0))


def stable_budget(curves: Mapping[str, ExpectedBest]) -> int:
    """The smallest budget n from which the arms' order by expected best stays the same up to the largest budget
    all arms reached (their fewest configurations). Equal to that budget when the order still changed at its
    last step, so a reader can tell a settled ranking from one that was still moving. The order is the same
    whichever direction is better, so no direction is needed."""
    if not curves:
        raise ValueError("no arms to rank")
    names = sorted(curves)
    common = min(len(curves[a].mean) for a in names)
    means = np.array([curves[a].mean[:common] for a in names])  # [arm, n]
    orders = [tuple(np.lexsort((np.arange(len(names)), means[:, k]))) for k in range(common)]
    n = common
    while n > 1 and orders[n - 2] == orders[-1]:
        n -= 1
    return n
