"""What a two-level design can tell apart: its estimable terms, what each is confounded with, its defining relation.

A design is a matrix of cells (rows) by switches (columns) coded -1 (the reference level) and +1. A term is a
main effect (one switch) or a two-factor interaction (the product of two columns). Terms are taken in order,
main effects first: a term whose column adds to the span of those kept (and of the mean) is estimable; one that
does not is confounded, and is named with each kept term it loads on (the alias matrix of the least-squares
fit, Box, Hunter & Hunter ch. 6): +-1 in a regular fraction (`tau x mu = kappa_pub x kappa_priv`), a fraction
in a Plackett-Burman design (partial aliasing). Interactions of three or more switches are assumed negligible,
as every screening analysis does; the defining relation (the words whose product is constant) shows them.

Used by the plan (what `ablate plan` prints of a design) and the report (which terms it fits, what each row
names), so both say the same of the same cells.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

Term = tuple[int, ...]
"""Column indices: (i,) a main effect, (i, j) a two-factor interaction; () the mean."""
TOL = 1e-9
MAX_WORDS = 16
"""Switches up to which the defining relation is enumerated (2^16 products)."""


@dataclass
class Structure:
    """A design's terms: those it estimates, in order, and what each is confounded with."""

    names: list[str]
    model: list[Term]
    """Estimable terms, main effects first (the mean left out)."""
    aliases: dict[Term, list[tuple[Term, float]]] = field(default_factory=dict)
    """Per estimable term (or the mean, ()), the terms confounded with it and their loading (+-1: fully)."""
    words: list[Term] = field(default_factory=list)
    """The defining relation: each set of switches whose product is constant over the cells (regular designs)."""
    signs: list[int] = field(default_factory=list)
    """Each word's constant product (+1 or -1), in the order of `words`: with the reference a cell (every switch
    at -1), a word of odd length is -1."""
    lost: list[Term] = field(default_factory=list)
    """Main effects the cells cannot estimate at all (confounded with the mean or another main effect)."""

    @property
    def regular(self) -> bool:
        """Whether every confounded term is confounded fully (+-1), as in a regular fraction."""
        return all(abs(abs(w) - 1) < 1e-6 for chain in self.aliases.values() for _, w in chain)

    @property
    def resolution(self) -> int | None:
        """The length of the shortest word of a regular design; None without one (a full factorial) or where the
        design is not regular (a Plackett-Burman design of 12 cells: its aliasing is partial)."""
        return min(map(len, self.words)) if self.words and self.regular else None

    def name(self, term: Term) -> str:
        return " x ".join(self.names[i] for i in term) if term else "the mean"

    def chain(self, term: Term) -> str:
        """The term with those confounded with it: `tau x mu = kappa_pub x kappa_priv`; a partial loading is
        shown with its weight (`+ 0.33 kappa_pub x kappa_priv`)."""
        parts = [self.name(term)]
        for other, w in self.aliases.get(term, []):
            parts.append(("= -" if w < 0 else "= ") + self.name(other) if abs(abs(w) - 1) < 1e-6
                         else f"{'-' if w < 0 else '+'} {abs(w):.2g} {self.name(other)}")  # fmt: skip
        return " ".join(parts)

    @property
    def confounded(self) -> list[str]:
        """Every chain of two or more terms, in words."""
        return [self.chain(t) for t in [(), *self.model] if self.aliases.get(t)]

    def words_text(self) -> str:
        """`I = -tau x mu x bounded = +tau x kappa_pub x kappa_priv x bounded` (every word, with the sign of its
        product, as the chains carry theirs), or '' where there is none or the design is not regular."""
        if not self.words or not self.regular:
            return ""
        return "I = " + " = ".join(
            f"{'-' if sign < 0 else '+'}{self.name(w)}" for w, sign in zip(self.words, self.signs)
        )


def columns(coded: np.ndarray, term: Term) -> np.ndarray:
    """The model-matrix column of `term` over the cells (+-1 products; ones for the mean)."""
    return np.prod(coded[:, list(term)], axis=1) if term else np.ones(len(coded))


def candidates(k: int) -> list[Term]:
    """Main effects, then two-factor interactions, in column order."""
    return [(i,) for i in range(k)] + list(itertools.combinations(range(k), 2))


def structure(coded: np.ndarray, names: list[str], interactions: bool = True) -> Structure:
    """The terms `coded` (cells x switches, -1/+1) estimates and confounds (module docstring). Without
    `interactions` (a screen) the model is the main effects alone, and each two-factor interaction is named
    with its loading on every main effect it leans on: a screen never spends its spare columns on interactions
    picked by column order."""
    coded = np.unique(np.asarray(coded, dtype=float), axis=0)
    k = coded.shape[1]
    out = Structure(list(names), [])
    kept: list[Term] = [()]
    basis = columns(coded, ())[:, None]
    for term in candidates(k):
        col = columns(coded, term)
        coef, *_ = np.linalg.lstsq(basis, col, rcond=None)
        if (interactions or len(term) == 1) and np.linalg.norm(col - basis @ coef) > TOL * np.sqrt(len(col)):
            kept.append(term)
            basis = np.column_stack([basis, col])
            continue
        if len(term) == 1:
            out.lost.append(term)
        for owner, w in zip(kept, coef):
            if abs(w) > 1e-6:
                out.aliases.setdefault(owner, []).append((term, float(w)))
    out.model = kept[1:]
    if k <= MAX_WORDS:
        found = _words(coded)
        out.words, out.signs = [w for w, _ in found], [sign for _, sign in found]
    return out


def _words(coded: np.ndarray) -> list[tuple[Term, int]]:
    """Every set of columns whose product is constant over the rows, shortest first, with that constant: as bit
    masks of the rows at -1, a product is the exclusive or of its columns', +1 when it is no row, -1 every row."""
    n, k = coded.shape
    masks = [sum(1 << r for r in np.flatnonzero(coded[:, j] < 0)) for j in range(k)]
    every = (1 << n) - 1
    found = []
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            x = 0
            for j in subset:
                x ^= masks[j]
            if x in (0, every):
                found.append((subset, 1 if x == 0 else -1))
    return found
