"""The minimum-aberration catalogue checked by exhaustive search, and what pyDOE's `fracfact_by_res` gave instead.

For every catalogued design (k switches up to 11, up to 128 cells: `ablate.planning.fractions.CATALOGUE`) prints
its cells, generators, resolution and word-length pattern (A3, A4, ...) beside the smallest pattern any design of
its size has (`least_aberration`, exhaustive); then, per k and resolution asked, the cells and resolution of the
design `fractional: {resolution: R}` now runs against pyDOE's. About a minute on a busy core (11 switches in 128
cells is 8 million designs).

    .venv/bin/python bench/fraction_catalogue.py
"""

from __future__ import annotations

import time

import numpy as np
import pydoe

from ablate.planning.fractions import CATALOGUE, ROMAN, Fraction, best, catalogued, least_aberration


def trimmed(pattern: list[int]) -> list[int]:
    while pattern and not pattern[-1]:
        pattern = pattern[:-1]
    return pattern


def main() -> None:
    head = (
        f"{'k':>2} {'p':>2} {'cells':>5}  {'generators':<34} {'res':<4} {'catalogue A3..':<30} {'least (search)':<30}"
    )
    print(f"{head} same  s")
    wrong = 0
    for k, p in sorted(CATALOGUE, key=lambda kp: (kp[0] - kp[1], kp[0])):
        found = catalogued(k, k - p)
        assert found is not None
        start = time.perf_counter()
        least = trimmed(least_aberration(k, k - p))
        seconds = time.perf_counter() - start
        mine = trimmed(found.word_lengths()[3:])
        wrong += mine != least
        gens = " ".join(f"{'ABCDEFGHJKL'[k - p + i]}={g}" for i, g in enumerate(CATALOGUE[(k, p)]))
        print(f"{k:>2} {p:>2} {found.cells:>5}  {gens:<34} {ROMAN[found.resolution]:<4} {mine!s:<30} {least!s:<30} "
              f"{'yes' if mine == least else 'NO':<4} {seconds:.1f}")  # fmt: skip
    print(f"{len(CATALOGUE) - wrong} of {len(CATALOGUE)} catalogued designs have the least aberration of their size\n")
    print("resolution asked -> cells (resolution reached): ablate now | pyDOE fracfact_by_res")
    for k in range(3, 12):
        row = []
        for r in (3, 4, 5):
            try:
                ours = best(k, r)
                now = f"{ours.cells} ({ROMAN[ours.resolution]})"
            except ValueError:
                now = "full"
            row.append(f"{ROMAN[r]}: {now} | {_pydoe(k, r)}")
        print(f"  k={k:<2} " + "; ".join(row))


def _pydoe(k: int, r: int) -> str:
    try:
        theirs = Fraction(np.asarray(pydoe.fracfact_by_res(k, r), dtype=float))
    except ValueError:
        return "none"
    if not any(theirs.word_lengths()):
        return "full"
    return f"{theirs.cells} ({ROMAN[theirs.resolution]})"


if __name__ == "__main__":
    main()
