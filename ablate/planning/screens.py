"""Plackett-Burman screens: k two-level switches in N cells, N the multiple of 4 above k, main effects only.

The design is all N - 1 columns of pyDOE's Plackett-Burman matrix (`pbdesign(N - 1)`, whose first k columns are
`pbdesign(k)`): the switches take the first k, and the N - 1 - k unused columns are dummy contrasts. They are
orthogonal to the mean, to every main effect and to each other, so where two-factor interactions are negligible
(the screen's premise) their estimates are pure noise: with one seed they join the main effects in Lenth's pseudo
standard error (Plackett & Burman 1946; Montgomery, Design and Analysis of Experiments, section 8.6). A screen is
never read as estimating interactions, whatever columns it leaves free.

A two-factor interaction is not a column of the design: it loads on the main effects of the switches outside it.
How much depends on N: 8, 16, 32, 64 are regular fractions (resolution III: loadings +-1, full aliasing); 12 gives
+-1/3; 20 gives +-1/5 or +-3/5; 24 and 48 (12 doubled) +-1/3 or +-1; 40 (20 doubled) +-1/5, +-3/5 or +-1.
`loadings` reads them off the cells, so the plan states the design's own.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ablate.evidence.aliasing import Structure


def cells(k: int) -> int:
    """The cells of a screen of k switches: the multiple of 4 above k (pyDOE's rule)."""
    return 4 * (k // 4 + 1)


def plackett_burman(k: int) -> np.ndarray:
    """The screen of k switches over all its columns (cells x (cells - 1), -1/+1): the switches' first, then the
    dummy contrasts; ValueError where pyDOE has no Plackett-Burman matrix of that size (28, 36, 44 cells)."""
    import pydoe  # scipy.stats with it: a second of import a sweep without a design never needs

    return np.asarray(pydoe.pbdesign(cells(k) - 1), dtype=float)


def loadings(s: Structure) -> list[Fraction]:
    """The distinct sizes of the loadings of the two-factor interactions on the main effects, smallest first."""
    found = {Fraction(abs(w)).limit_denominator(64) for chain in s.aliases.values() for _, w in chain}
    return sorted(found)


def loadings_text(s: Structure) -> str:
    """`+-1/3`, `+-1/5 or +-3/5`: `loadings` in words."""
    return " or ".join(f"±{w}" for w in loadings(s))
