"""Box and Meyer's posterior probability that each term of an unreplicated design is active.

Box & Meyer (1986, "An analysis for unreplicated fractional factorials", Technometrics 28) put a prior on effect
sparsity instead of trimming: each of the m estimates c_j (on a common scale) is inert, N(0, sigma^2), with
probability 1 - ALPHA, or active, N(0, K^2 sigma^2), with probability ALPHA, independently; sigma has the
noninformative prior 1/sigma. Given sigma, term j's probability of being active is

    p_j(sigma) = ALPHA/K exp(-c_j^2 / (2 K^2 sigma^2)) / [ALPHA/K exp(...) + (1 - ALPHA) exp(-c_j^2 / (2 sigma^2))]

and the posterior is its average over sigma's posterior, proportional to prod_j f(c_j | sigma) / sigma (f the
two-component density). That one-dimensional integral is summed here on a fine grid of log sigma, where the prior
is flat. The answer does not depend on the estimates' unit. ALPHA = 0.2 and K = 10 are Box and Meyer's values,
fitted to published screening experiments.
"""

from __future__ import annotations

import numpy as np

ALPHA = 0.2
"""Prior probability that a term is active."""
K = 10.0
"""An active term's standard deviation in units of an inert one's."""
POINTS = 4001
"""Grid points of log sigma, over DECADES either side of the estimates' root mean square."""
DECADES = 4.0


def posterior(c: np.ndarray, alpha: float = ALPHA, k: float = K) -> np.ndarray:
    """Each estimate's posterior probability of being active (NaN for all where every estimate is zero)."""
    c = np.asarray(c, dtype=float)
    rms = float(np.sqrt(np.mean(c**2)))
    if rms == 0:
        return np.full(len(c), np.nan)
    z2 = (c / rms) ** 2
    sigma = np.logspace(-DECADES, DECADES, POINTS)[:, None]
    inert = np.log1p(-alpha) - z2 / (2 * sigma**2)
    active = np.log(alpha / k) - z2 / (2 * k**2 * sigma**2)
    both = np.logaddexp(inert, active)
    log_w = (both - np.log(sigma)).sum(axis=1)  # prod_j f(c_j | sigma), each f carrying its 1 / sigma
    w = np.exp(log_w - log_w.max())
    return np.asarray(w @ np.exp(active - both) / w.sum())
