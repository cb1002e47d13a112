"""Synthetic sweeps with no true effect, for measuring how often a test claims one (its false-positive rate).

Repeated k-fold cross-validation of two equally good learners: every simulated dataset has a label y
(balanced) and two features x1, x2 = signal * y + N(0, 1), drawn independently, so neither feature is
better than the other in the population. Learner j thresholds feature j at the midpoint of the training
folds' class means; the difference in test-fold accuracy (learner 1 - learner 2) per repeat and fold is
what a sweep's table would compare. Folds of one repeat share most of their training data, repeats share
the whole dataset: the differences are correlated, as in a real CV sweep.
"""

from __future__ import annotations

import numpy as np


def cv_differences(rng: np.random.Generator, sweeps: int, n: int = 100, repeats: int = 5, folds: int = 10,
                   signal: float = 1.0) -> np.ndarray:  # fmt: skip
    """(sweeps, repeats * folds): accuracy of learner 1 minus learner 2 per repeat and test fold."""
    y = (np.arange(n) % 2)[None].repeat(sweeps, 0)
    x = signal * y[..., None] + rng.normal(size=(sweeps, n, 2))
    out = []
    for _ in range(repeats):
        fold = rng.permuted(np.arange(n)[None].repeat(sweeps, 0) % folds, axis=1)
        for f in range(folds):
            train = (fold != f)[..., None]
            ones, zeros = train & (y[..., None] == 1), train & (y[..., None] == 0)
            cut = ((x * ones).sum(1) / ones.sum(1) + (x * zeros).sum(1) / zeros.sum(1)) / 2
            right = (x > cut[:, None, :]) == (y[..., None] == 1)
            test = ~train
            accuracy = (right & test).sum(1) / test.sum(1)
            out.append(accuracy[:, 0] - accuracy[:, 1])
    return np.stack(out, axis=1)


def null_tables(rng: np.random.Generator, tables: int, variants: int, seeds: int) -> np.ndarray:
    """(tables, variants, seeds): paired differences against a baseline with no true effect, each seed an
    independent replicate (a seed effect shared by a variant and its baseline cancels in the difference)."""
    return rng.normal(size=(tables, variants, seeds))
