"""A two-level design's follow-up (`design.follow-up`, `ablate.spec.design.FollowUp`), and which one to name.

The textbook's ways to separate what a fraction confounded (Montgomery, Design and Analysis of Experiments, 8.6;
Box, Hunter & Hunter ch. 6): the fold-over (every switch reversed: main effects clear of two-factor
interactions), the fold-over on one switch (it is then clear of every interaction: the words of the defining
relation that hold it drop out), or another fraction (a higher resolution). Every added cell is a cell of the
full grid with its trial key, so the launch trains only those the design lacks, and the plan is the union:
the report fits one model to every cell, both parts read as one design. No block term separates the parts: a
trial's result does not depend on when it ran (its config and seed fix it).

The Findings name a follow-up where an effect the report decided (an active one) is confounded, with up to
three-factor interactions (the assumption a resolution IV main effect rests on): the fewest added cells that
leave every such effect clear of two-factor interactions where one is confounded with one (a resolution III
fraction's fold-over), else of three-factor ones too, written as the edit to make: one step of sequential
experimentation at a time, each read with every cell before it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ablate.evidence.aliasing import Structure, Term, columns, structure
from ablate.spec.design import FollowUp, Fractional
from ablate.spec.problems import SweepError, SweepProblem
from ablate.spec.yaml_doc import Loc

FULL = "full"
"""The edit that runs the full grid (every follow-up's limit)."""
FULL_MAX = 12
"""Two-level axes up to which the full grid is weighed as a follow-up."""


def extend(
    coded: np.ndarray,
    follow: FollowUp,
    index: int,
    names: list[str],
    fraction: Callable[[Fractional], np.ndarray],
) -> tuple[np.ndarray, str]:
    """The design's cells (`coded`: cells x factors, -1 the reference) and its follow-up's, each cell once, with
    the follow-up in words for the design's title; `index` is its place in the list of follow-ups, `names` the
    factors' axis paths (a linked group's joined by +), `fraction` another fraction's coded cells (signed so that
    the reference is a cell); SweepError naming a fold-over axis the design does not vary."""
    if follow.fractional is not None:
        return union(
            coded, fraction(follow.fractional)
        ), f" and the resolution {follow.fractional.resolution} fraction's cells"
    if follow.foldover == "all":
        return union(coded, -coded), " and its fold-over"
    assert follow.foldover is not None
    at: Loc = ("design", "follow-up", index, "foldover")
    hits = {i: next((j for j, n in enumerate(names) if axis in (n, *n.split("+"))), None)
            for i, axis in enumerate(follow.foldover)}  # fmt: skip
    if missing := [i for i, hit in hits.items() if hit is None]:
        raise SweepError([SweepProblem((*at, i), f"{follow.foldover[i]} is no axis the design varies (those: "
                                       f"{', '.join(names)})") for i in missing])  # fmt: skip
    flipped = fold(coded, [h for h in hits.values() if h is not None])
    return union(coded, flipped), f" and its fold-over on {', '.join(follow.foldover)}"


def fold(coded: np.ndarray, factors: list[int]) -> np.ndarray:
    """The cells with `factors`' levels reversed."""
    flip = np.ones(coded.shape[1])
    flip[factors] = -1
    return np.asarray(coded * flip, dtype=float)


def union(first: np.ndarray, more: np.ndarray) -> np.ndarray:
    """The cells of `first`, then those of `more` it lacks."""
    seen = {tuple(row) for row in first.tolist()}
    added = [row for row in dict.fromkeys(tuple(r) for r in more.tolist()) if row not in seen]
    return np.vstack([first, np.array(added, dtype=float).reshape(-1, first.shape[1])])


def confounded(coded: np.ndarray, term: Term, names: list[str], order: int = 3) -> list[str]:
    """What `term` is confounded with in `coded`'s least-squares fit (`aliasing.structure`'s model), up to
    interactions of `order` (2 or 3) switches, in words with their loadings (`-stack x lr x mlp_ratio`,
    `0.33 a x b`); [] where it is clear of them all, and the term alone where the cells cannot estimate it."""
    s = structure(coded, names)
    if term not in s.model:
        return [s.name(term)]
    said = [_loaded(w, s.name(t)) for t, w in s.aliases.get(term, [])]
    if order < 3:
        return said
    cells = np.unique(np.asarray(coded, dtype=float), axis=0)
    x = np.column_stack([columns(cells, t) for t in [(), *s.model]])
    at = s.model.index(term) + 1
    for t in itertools.combinations(range(cells.shape[1]), 3):
        w = np.linalg.lstsq(x, columns(cells, t), rcond=None)[0][at]
        if abs(w) > 1e-6:
            said.append(_loaded(w, s.name(t)))
    return said


def _loaded(w: float, name: str) -> str:
    """A term confounded with loading w: `-a x b` fully, `0.33 a x b` partly (a Plackett-Burman design's)."""
    return ("-" if w < 0 else "") + name if abs(abs(w) - 1) < 1e-6 else f"{w:.2g} {name}"


@dataclass
class Option:
    """A follow-up the Findings may name: the edit, the cells it adds, what the union can tell."""

    edit: str
    """The follow-up in YAML (`{foldover: [attention.kind]}`), or FULL: `design: full` in place of the design."""
    added: int
    coded: np.ndarray
    """The union's cells (the design's and the follow-up's)."""
    structure: Structure


def options(coded: np.ndarray, names: list[str], short: list[str], fractions: dict[int, np.ndarray]) -> list[Option]:
    """Every follow-up of the cells `coded`, fewest added cells first: the fold-over, the fold-over on each
    factor, each other fraction of `fractions` (resolution -> its coded cells), the full grid (up to FULL_MAX
    factors); one adding no cell is left out. `names` are the factors' axis paths (what the edit names), `short`
    as tables show them."""
    k = coded.shape[1]
    found: list[tuple[str, np.ndarray]] = [("{foldover: all}", -coded)]
    found += [(f"{{foldover: [{names[j].split('+')[0]}]}}", fold(coded, [j])) for j in range(k)]
    found += [(f"{{fractional: {{resolution: {r}}}}}", rows) for r, rows in fractions.items()]
    if k <= FULL_MAX:
        found.append((FULL, np.array(list(itertools.product((-1.0, 1.0), repeat=k)))))
    out = []
    for edit, more in found:
        rows = union(coded, more)
        if len(rows) > len(coded):
            out.append(Option(edit, len(rows) - len(coded), rows, structure(rows, short)))
    return sorted(out, key=lambda o: o.added)


def clearing(found: list[Option], coded: np.ndarray, terms: list[Term], short: list[str]) -> tuple[Option, bool] | None:
    """The option of `found` adding the fewest cells that leaves each of `terms` clear: of two-factor
    interactions where one is confounded with one in `coded`, else of three-factor ones too; of as many cells,
    the one that clears three-factor ones too. With whether it does; None where no option clears them."""
    order = 2 if any(confounded(coded, t, short, 2) for t in terms) else 3
    clears = [o for o in found if not any(confounded(o.coded, t, short, order) for t in terms)]
    if not clears:
        return None
    wider = {id(o): any(confounded(o.coded, t, short) for t in terms) for o in clears}
    best = min(clears, key=lambda o: (o.added, wider[id(o)]))
    return best, not wider[id(best)]


def lessening(found: list[Option], s: Structure) -> Option | None:
    """The option of `found` adding the fewest cells that confounds less than `s` (fewer main effects confounded,
    then fewer chains), the least confounding of as many cells; None where none does."""
    better = [o for o in found if _confounds(o.structure) < _confounds(s)]
    return min(better, key=lambda o: (o.added, *_confounds(o.structure))) if better else None


def _confounds(s: Structure) -> tuple[int, int]:
    """How much `s` confounds: main effects confounded, then chains."""
    return sum(len(t) == 1 for t in s.aliases if t), len(s.confounded)
