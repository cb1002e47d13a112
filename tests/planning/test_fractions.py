"""The best fraction for the budget (`ablate.planning.fractions`): the catalogue's designs have the published
word-length patterns and none of their size does better; `resolution:` is at least that, `cells:` a size; the
defining relation keeps its signs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, write_sweeps
from synthetic import SWITCHES, switches

from ablate.errors import SpecError
from ablate.evidence.aliasing import structure
from ablate.planning.fractions import CATALOGUE, best, catalogued, least_aberration
from ablate.planning.plan import Plan, plan

PUBLISHED = {
    (3, 1): [1], (4, 1): [0, 1], (5, 1): [0, 0, 1], (5, 2): [2, 1], (6, 1): [0, 0, 0, 1], (6, 2): [0, 3],
    (6, 3): [4, 3], (7, 1): [0, 0, 0, 0, 1], (7, 2): [0, 1, 2], (7, 3): [0, 7], (7, 4): [7, 7, 0, 0, 1],
    (8, 1): [0, 0, 0, 0, 0, 1], (8, 2): [0, 0, 2, 1], (8, 3): [0, 3, 4], (8, 4): [0, 14, 0, 0, 0, 1],
    (9, 2): [0, 0, 0, 3], (9, 3): [0, 1, 4, 2], (9, 4): [0, 6, 8, 0, 0, 1], (9, 5): [4, 14, 8, 0, 4, 1],
    (10, 3): [0, 0, 3, 3, 1], (10, 4): [0, 2, 8, 4, 0, 1], (10, 5): [0, 10, 16, 0, 0, 5],
    (10, 6): [8, 18, 16, 8, 8, 5], (11, 4): [0, 0, 6, 6, 2, 1], (11, 5): [0, 4, 14, 8, 0, 3, 2],
    (11, 6): [0, 25, 0, 27, 0, 10, 0, 1], (11, 7): [12, 26, 28, 24, 20, 13, 4],
}  # fmt: skip
"""(k, p) -> A3, A4, ... of the minimum-aberration 2^(k-p) design (Chen, Sun & Wu 1993, Tables 1-3; Montgomery,
Design and Analysis of Experiments, Table 8.14, whose generators give the same; trailing zeros left off)."""


def pattern(found: np.ndarray) -> list[int]:
    lengths = catalogued_lengths(found)[3:]
    while lengths and not lengths[-1]:
        lengths.pop()
    return lengths


def catalogued_lengths(coded: np.ndarray) -> list[int]:
    k = coded.shape[1]
    out = [0] * (k + 1)
    for size in range(1, k + 1):
        for word in itertools.combinations(range(k), size):
            out[size] += len(set(np.prod(coded[:, list(word)], axis=1))) == 1
    return out


def test_every_catalogued_design_has_the_published_word_length_pattern() -> None:
    assert set(CATALOGUE) == set(PUBLISHED)
    for (k, p), published in PUBLISHED.items():
        found = catalogued(k, k - p)
        assert found is not None and found.cells == 2 ** (k - p)
        assert pattern(found.coded) == published, (k, p)
        assert found.word_lengths() == catalogued_lengths(found.coded)


@pytest.mark.parametrize("cells", [4, 8, 16, 32])  # 64 and 128 cells: a minute; their patterns are above
def test_no_design_of_the_same_size_has_less_aberration(cells: int) -> None:
    base = cells.bit_length() - 1
    for k, p in [key for key in CATALOGUE if key[0] - key[1] == base]:
        found = catalogued(k, base)
        assert found is not None
        assert catalogued_lengths(found.coded)[3:] == least_aberration(k, base), (k, p)


def test_at_least_a_resolution_is_the_fewest_cells_reaching_it_then_the_highest_resolution() -> None:
    for k in range(3, 12):
        sizes = {base: catalogued(k, base) for base in range(k.bit_length(), k)}
        for wanted in (3, 4, 5):
            reaching = [f for f in sizes.values() if f is not None and f.resolution >= wanted]
            if not reaching:
                with pytest.raises(ValueError, match="only by the full grid"):
                    best(k, wanted)
                continue
            got = best(k, wanted)
            assert got.cells == min(f.cells for f in reaching), (k, wanted)
            assert got.resolution == max(f.resolution for f in reaching if f.cells == got.cells), (k, wanted)
    assert best(5, 4).cells == 16 and best(5, 4).resolution == 5  # the five switches: I = ABCDE
    assert best(5, cells=8).resolution == 3 and best(8, 3).resolution == 4


def test_the_defining_relation_keeps_its_signs_with_the_baseline_a_cell() -> None:
    """The reference cell (every switch at -1) is a cell, so a word's product is (-1)^length: odd words negative."""
    for k, p in CATALOGUE:
        found = catalogued(k, k - p)
        assert found is not None
        s = structure(found.coded * -found.coded[0], list("abcdefghjkl"[:k]))
        assert s.signs == [(-1) ** len(w) for w in s.words], (k, p)
    three = catalogued(5, 3)
    assert three is not None
    words = structure(three.coded * -three.coded[0], list("abcde")).words_text()
    assert words == "I = -a x b x d = -a x c x e = +b x c x d x e"


FIVE = {**switches(4), "model.stack": SWITCHES["model.stack"]}


def planned(tmp_path: Path, fractional: dict) -> Plan:
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": FIVE, "seeds": 1,
            "design": {"fractional": fractional}, "baseline": {a: v[0] for a, v in FIVE.items()}}  # fmt: skip
    return plan(write_sweeps(tmp_path / "e.yaml", {"s": body}), "s")


def test_five_switches_at_resolution_iv_get_the_resolution_v_half_and_the_plan_says_so(tmp_path: Path) -> None:
    p = planned(tmp_path, {"resolution": 4})
    assert p.design is not None and len(p.variants) == 16 and p.design.structure().resolution == 5
    lines = p.design.lines(1)
    assert lines[1] == ("  resolution V at 16 cells; you asked for IV, the fewest cells that reach it reach V: main "
                        "effects and two-factor interactions clear of each other")  # fmt: skip
    assert "defining relation: I = -tau x mu x kappa_priv x bounded x stack" in lines[3]  # after the seed-noise line
    record = p.design.record(1)
    assert (record["resolution"], record["resolution_asked"], record["defining_relation_signs"]) == (5, 4, [-1])
    assert not p.design.structure().confounded[1:]  # only the mean's chain (the five-letter word): no pair aliased


def test_cells_gives_the_best_design_of_that_size_or_says_why_not(tmp_path: Path) -> None:
    p = planned(tmp_path, {"cells": 8})
    assert p.design is not None and len(p.variants) == 8 and p.design.structure().resolution == 3
    assert "resolution III at 8 cells: main effects clear of each other" in p.design.lines(1)[1]
    sized = planned(tmp_path, {"cells": 16, "resolution": 4})  # the size was given: no "the fewest cells" claim
    assert sized.design is not None and sized.design.lines(1)[1].startswith("  resolution V at 16 cells: main")
    folded = planned(tmp_path, {"resolution": 3, "foldover": True})  # the fold, not the fewest cells, gave IV
    assert folded.design is not None and folded.design.lines(1)[1].startswith("  resolution IV at 16 cells: main")
    for fractional, said in (({"cells": 8, "resolution": 4}, "resolution III, not IV: resolution IV takes 16 cells"),
                             ({"cells": 12}, "a power of two of cells, at least 8 and under the full grid's 32"),
                             ({"cells": 32}, "under the full grid's 32")):  # fmt: skip
        with pytest.raises(SpecError) as e:
            planned(tmp_path, fractional)
        assert "design.fractional.cells" in str(e.value) and said in str(e.value), fractional
