"""Regular two-level fractions: the best design for a number of switches and a budget of cells.

A 2^(k-p) fraction runs 2^(k-p) cells: a full factorial over k-p base switches (A, B, C, ...), each other switch
set to a product of base switches (its generator, `E = ABCD`). Designs of one size differ in what they confound:
the best is the one of minimum aberration (Fries & Hunter 1980), whose word-length pattern (how many words of the
defining relation have 3, 4, 5, ... letters) is smallest in dictionary order; its shortest word gives the
highest resolution of that size. `CATALOGUE` holds, for every k up to 11 and every size up to 128 cells, the
generators of Montgomery's *Design and Analysis of Experiments*, Table 8.14 (after Box, Hunter & Hunter, and
minimum aberration as Chen, Sun & Wu 1993 tabulate it), but for 2^(6-2): there E = ABC, F = ABD (Box, Hunter &
Hunter's I = ABCE = ABDF = CDEF, the same word-length pattern as Montgomery's F = BCD, so as good), which keeps the
cells the shipped sweeps ran before the catalogue (tests/golden_keys.json). tests/planning/test_fractions.py
checks each design against the published word-length pattern and against an exhaustive search over all
generators of its size. pyDOE's
`fracfact_by_res` does neither (for 5 switches in 16 cells it returned a resolution IV half where the textbook's
I = ABCDE is resolution V): it serves only beyond the catalogue.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

BASE = "ABCDEFG"
"""Base switches' letters (up to 2^7 = 128 cells)."""
CATALOGUE: dict[tuple[int, int], tuple[str, ...]] = {
    (3, 1): ("AB",),
    (4, 1): ("ABC",),
    (5, 1): ("ABCD",),
    (5, 2): ("AB", "AC"),
    (6, 1): ("ABCDE",),
    (6, 2): ("ABC", "ABD"),
    (6, 3): ("AB", "AC", "BC"),
    (7, 1): ("ABCDEF",),
    (7, 2): ("ABCD", "ABDE"),
    (7, 3): ("ABC", "BCD", "ACD"),
    (7, 4): ("AB", "AC", "BC", "ABC"),
    (8, 1): ("ABCDEFG",),
    (8, 2): ("ABCD", "ABEF"),
    (8, 3): ("ABC", "ABD", "BCDE"),
    (8, 4): ("BCD", "ACD", "ABC", "ABD"),
    (9, 2): ("ACDFG", "BCEFG"),
    (9, 3): ("ABCD", "ACEF", "CDEF"),
    (9, 4): ("BCDE", "ACDE", "ABDE", "ABCE"),
    (9, 5): ("ABC", "BCD", "ACD", "ABD", "ABCD"),
    (10, 3): ("ABCG", "BCDE", "ACDF"),
    (10, 4): ("BCDF", "ACDF", "ABDE", "ABCE"),
    (10, 5): ("ABCD", "ABCE", "ABDE", "ACDE", "BCDE"),
    (10, 6): ("ABC", "BCD", "ACD", "ABD", "ABCD", "AB"),
    (11, 4): ("ABCG", "BCDE", "ACDF", "ABCDEFG"),
    (11, 5): ("CDE", "ABCD", "ABF", "BDEF", "ADEF"),
    (11, 6): ("ABC", "BCD", "CDE", "ACD", "ADE", "BDE"),
    (11, 7): ("ABC", "BCD", "ACD", "ABD", "ABCD", "AB", "AC"),
}
"""(switches k, generated switches p) -> the generators of the switches after the k-p base ones."""
ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX", 10: "X", 11: "XI"}
BUYS = {
    3: "main effects clear of each other, each confounded with two-factor interactions",
    4: "main effects clear of two-factor interactions, which are confounded with each other",
    5: "main effects and two-factor interactions clear of each other",
}
"""What a resolution lets the least-squares fit tell apart (interactions of three switches or more assumed
negligible); 5 stands for every resolution above it."""


@dataclass
class Fraction:
    """A two-level fraction: its cells coded -1/+1 (cells x switches, a catalogued design's base switches first)."""

    coded: np.ndarray

    @property
    def cells(self) -> int:
        return len(self.coded)

    @property
    def resolution(self) -> int:
        return next(n for n, count in enumerate(self.word_lengths()) if count)

    def word_lengths(self) -> list[int]:
        """How many words of the defining relation have each length (index: the length; 0 and 1: none)."""
        k = self.coded.shape[1]
        out = [0] * (k + 1)
        for size in range(1, k + 1):
            for word in itertools.combinations(range(k), size):
                product = np.prod(self.coded[:, list(word)], axis=1)
                out[size] += bool(np.all(product == product[0]))
        return out


def catalogued(k: int, base: int) -> Fraction | None:
    """The catalogue's minimum-aberration design of k switches in 2^base cells; None beyond the catalogue."""
    generators = CATALOGUE.get((k, k - base))
    if generators is None:
        return None
    full = np.array(list(itertools.product((-1.0, 1.0), repeat=base)))[:, ::-1]
    added = [np.prod(full[:, [BASE.index(c) for c in g]], axis=1) for g in generators]
    return Fraction(np.column_stack([full, *added]))


def smallest(k: int) -> int:
    """Base switches of the smallest fraction for k switches: a resolution III design needs k + 1 cells."""
    return k.bit_length()


def best(k: int, resolution: int | None = None, cells: int | None = None) -> Fraction:
    """The design a budget gets: with `cells`, the best of that many cells (which must reach `resolution` where
    given); else, among the fewest cells that reach at least `resolution`, the highest resolution and minimum
    aberration. ValueError saying why there is none short of the full grid."""
    if cells is not None:
        return _of_size(k, cells, resolution)
    wanted = resolution or 4
    if k > max(k for k, _ in CATALOGUE):
        return _beyond(k, wanted)
    for base in range(smallest(k), k):
        found = catalogued(k, base)
        if found is not None and found.resolution >= wanted:
            return found
    raise ValueError(f"resolution {ROMAN[wanted]} with {k} two-level axes is reached only by the full grid "
                     f"({2**k} cells): use `design: full`")  # fmt: skip


def _of_size(k: int, cells: int, resolution: int | None) -> Fraction:
    base = cells.bit_length() - 1
    if cells != 2**base or cells < k + 1 or cells >= 2**k:
        raise ValueError(f"{cells} cells: a two-level fraction of {k} axes has a power of two of cells, at least "
                         f"{2 ** smallest(k)} and under the full grid's {2**k} (`design: full`)")  # fmt: skip
    found = catalogued(k, base)
    if found is None:
        raise ValueError(f"{cells} cells for {k} axes is beyond the minimum-aberration catalogue (up to 11 axes and "
                         "128 cells): give `resolution:` instead")  # fmt: skip
    if resolution is not None and found.resolution < resolution:
        raise ValueError(f"the best {cells}-cell design for {k} axes has resolution {ROMAN[found.resolution]}, not "
                         f"{ROMAN[resolution]}: {_reaching(k, resolution)}")  # fmt: skip
    return found


def _reaching(k: int, resolution: int) -> str:
    try:
        return f"resolution {ROMAN[resolution]} takes {best(k, resolution).cells} cells"
    except ValueError as e:
        return str(e)


def _beyond(k: int, resolution: int) -> Fraction:
    """pyDOE's fraction where the catalogue ends (more than 11 switches): of the resolution asked, not checked for
    minimum aberration, never the full grid (that many switches have a fraction of every resolution offered)."""
    import pydoe  # scipy.stats with it: about a second of import that a catalogued design never needs

    return Fraction(np.asarray(pydoe.fracfact_by_res(k, resolution), dtype=float))


def least_aberration(k: int, base: int) -> list[int]:
    """The smallest word-length pattern (A3, A4, ..., Ak) of any 2^(k-p) design in 2^base cells, by exhaustive
    search: the catalogue's check. The base switches are the unit columns (every design of full rank is one such,
    its switches relabelled), the other p any distinct products of two or more of them; a word is a nonempty set of
    generated switches with the base switches of the exclusive or of their columns. Searched one first generated
    column at a time, so that 128 cells and 11 switches (8 million designs) fit in memory."""
    p = k - base
    products = np.array([c for c in range(1, 1 << base) if c & (c - 1)])
    weight = np.array([bin(c).count("1") for c in range(1 << base)])
    smallest: tuple[int, ...] | None = None
    for first in range(len(products) - p + 1):
        rest = list(itertools.combinations(range(first + 1, len(products)), p - 1))
        combos = products[
            np.column_stack([np.full(len(rest), first), np.array(rest, dtype=int).reshape(len(rest), p - 1)])
        ]
        lengths = []
        for subset in range(1, 1 << p):
            chosen = [i for i in range(p) if subset >> i & 1]
            lengths.append(weight[np.bitwise_xor.reduce(combos[:, chosen], axis=1)] + len(chosen))
        words = np.stack(lengths, axis=1)
        patterns = np.stack([(words == n).sum(axis=1) for n in range(3, k + 1)], axis=1)
        found = min(map(tuple, patterns.tolist()))
        smallest = found if smallest is None else min(smallest, found)
    assert smallest is not None
    return list(smallest)


def buys(resolution: int) -> str:
    """What `resolution` lets the fit tell apart, in words."""
    return BUYS[min(resolution, 5)]
