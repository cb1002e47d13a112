"""Designs: which cells of a sweep's grid run (`design:`, `ablate.spec.design`), and what they can tell.

The grid's axis groups (a grid axis, or a linked group whose rows move together) are the design's factors;
axes listed under `crossed` stay whole, and the design is repeated at each of their values. A fractional design
takes its cells from the minimum-aberration catalogue (`ablate.planning.fractions`: the best design for the budget),
a screening design from pyDOE's `pbdesign`, each with its factors' columns
signed so that its first cell is the reference (the baseline's level of every factor, else the first listed
level): the baseline is always one of the cells. A screen keeps the Plackett-Burman columns its switches leave
unused (`ablate.planning.screens`): the dummy contrasts its analysis reads the error from. A one-at-a-time
design takes a reference cell and moves each factor alone to each of its other values. The cells are cells of
the full grid, so their trial keys are the full grid's: completing a design later (a fold-over, a higher
resolution, `full`) trains only what it lacks.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ablate.evidence.aliasing import Structure, Term, structure
from ablate.evidence.lenth import MIN_TERMS
from ablate.planning import followup, fractions, screens
from ablate.planning.fractions import ROMAN
from ablate.spec.design import Design, FollowUp, Fractional, OneAtATime, Screening
from ablate.spec.paths import get_path, matches
from ablate.spec.problems import SweepError, SweepProblem
from ablate.spec.sweeps import Sweep
from ablate.spec.yaml_doc import Loc

Cell = tuple[tuple[str, Any, Loc], ...]
"""A grid cell, or one row of an axis group: (dotted path, value, where in the sweep's YAML) per axis."""


@dataclass
class Factor:
    """One axis group the design varies: its name (the path, or a linked group's paths joined by +) and its
    levels in words, the reference first."""

    name: str
    levels: list[str]


@dataclass
class DesignPlan:
    """A sweep's design as planned: what `ablate plan` prints, the store keeps and the report analyses."""

    kind: str
    """fractional, one-at-a-time or screening."""
    title: str
    factors: list[Factor]
    crossed: list[str]
    full: int
    """Cells of the full grid."""
    runs: dict[str, list[int]] = field(default_factory=dict)
    """Variant -> each factor's level (an index into its `levels`; 0 is the reference)."""
    strata: dict[str, str] = field(default_factory=dict)
    """Variant -> the crossed axes' values in words ('' without crossed axes): each stratum is analysed alone."""
    asked: int | None = None
    """The resolution a fractional design was asked for (`resolution:`, at least that), where it chose the size
    (not beside `cells:`, nor folded over: the fold doubles the cells and raises III to IV)."""
    screen: list[list[int]] = field(default_factory=list)
    """A screen's rows over all its Plackett-Burman columns (`ablate.planning.screens`): the factors' levels, then
    the unused columns' (the dummy contrasts); empty for other designs."""
    followed: int = 0
    """Follow-ups the design has (`design.follow-up`): where there are some, the next is added to their list."""
    replicated: list[int] = field(default_factory=list)
    """The seeds only the reference cell runs at (`reference_seeds`), beyond the sweep's: the pure error's."""

    @property
    def two_level(self) -> bool:
        return self.kind != "one-at-a-time"

    def around(self, variant: str | None) -> DesignPlan:
        """The design coded with `variant`'s cell as its reference (`report --baseline`): each factor at its other
        level there has its two levels swapped, so every effect reads from the new reference, as the variant table
        does. A one-at-a-time design, or a variant that is not a cell, keeps the planned coding."""
        if variant is None or variant not in self.runs or not self.two_level or not any(self.runs[variant]):
            return self
        flip = self.runs[variant]
        factors = [Factor(f.name, f.levels[::-1]) if swap else f for f, swap in zip(self.factors, flip)]
        runs = {v: [level ^ swap for level, swap in zip(levels, flip)] for v, levels in self.runs.items()}
        screen = [[level ^ swap for level, swap in zip(row, flip)] + row[len(flip) :] for row in self.screen]
        return replace(self, factors=factors, runs=runs, screen=screen)

    def coded(self, variants: list[str]) -> np.ndarray:
        """The variants' cells coded -1 (reference) / +1, as `ablate.evidence.aliasing` reads them."""
        return np.array([[2 * level - 1 for level in self.runs[v]] for v in variants], dtype=float)

    def structure(self, variants: list[str] | None = None) -> Structure:
        """What the cells of `variants` (default: one stratum's) can tell apart."""
        if variants is None:
            first = next(iter(self.strata.values()), "")
            variants = [v for v, s in self.strata.items() if s == first]
        return structure(self.coded(variants), short([f.name for f in self.factors]), self.kind != "screening")

    def dummies(self, variants: list[str]) -> np.ndarray | None:
        """A screen's dummy contrasts over the cells of `variants` (cells x unused columns, -1/+1); None unless the
        variants are the whole screen (one stratum's every cell), as orthogonal contrasts need."""
        k = len(self.factors)
        rows = {tuple(row[:k]): row[k:] for row in self.screen}
        found = [rows.get(tuple(self.runs[v])) for v in variants]
        if not self.screen or len(variants) != len(self.screen) or any(r is None for r in found):
            return None
        return np.array([[2 * level - 1 for level in r] for r in found if r is not None], dtype=float)

    def lines(self, seeds: int) -> list[str]:
        """What `ablate plan` prints of the design: its size against the full grid's, and what it can tell."""
        cells = len(self.runs)
        s = self.structure() if self.two_level else None
        resolution = f", resolution {ROMAN.get(s.resolution, s.resolution)}" if s and s.resolution else ""
        out = [f"design: {self.title}{resolution}; {cells} of the full grid's {self.full} cells ({self.trials(seeds)} "
               f"of {self.full * seeds} trials)"]  # fmt: skip
        if self.crossed:
            out.append(f"  run at each value of {', '.join(self.crossed)} (crossed), analysed there")
        if not self.two_level:
            ref = ", ".join(f"{f.name}={f.levels[0]}" for f in self.factors)
            out.append(f"  reference: {ref}; each other cell moves one axis from it (its effect is the difference; "
                       "no interaction is estimable)")  # fmt: skip
            return out
        assert s is not None
        if s.resolution:
            out.append(f"  {self.buys(s.resolution)}")
        out += self.noise(seeds)
        if s.words:
            out.append(f"  defining relation: {s.words_text()}")
        out.append(f"  estimable: {', '.join(s.name(t) for t in s.model)}")
        if self.kind == "screening":
            return out + self._screen_lines(s)
        if s.confounded:
            out.append(f"  confounded (up to two-factor interactions): {'; '.join(s.confounded)}")
        return out

    def buys(self, resolution: int) -> str:
        """What the resolution reached lets the fit tell apart, and, where it is above the resolution asked for,
        that the fewest cells reaching that gave more: `resolution V at 16 cells; you asked for IV`."""
        reached = f"resolution {ROMAN.get(resolution, resolution)} at {len(self.runs)} cells"
        if self.asked is not None and resolution > self.asked:
            reached += f"; you asked for {ROMAN[self.asked]}, the fewest cells that reach it reach {ROMAN[resolution]}"
        return f"{reached}: {fractions.buys(resolution)}"

    def _screen_lines(self, s: Structure) -> list[str]:
        """A screen's model, error and aliasing in words (`ablate.planning.screens`)."""
        spare = len(self.screen[0]) - len(self.factors) if self.screen else 0
        size, k = len(self.screen) or len(self.runs), len(self.factors)
        unused = (f"{spare} unused columns of the {size}-cell Plackett-Burman design are dummy contrasts that "
                  "estimate" if spare > 1 else f"the {size}-cell Plackett-Burman design's unused column is a dummy "
                  "contrast that estimates")  # fmt: skip
        if self.replicated:
            out = ["  a screen fits main effects only; the reference cell's seeds measure the error (pure error), not "
                   "its unused columns"]  # fmt: skip
        elif size - 1 < MIN_TERMS:
            out = [f"  a screen fits main effects only; with one seed its {size - 1} contrasts are too few for Lenth's "
                   f"test (it needs {MIN_TERMS}): no test"]  # fmt: skip
        else:
            out = [f"  a screen fits main effects only; {unused} the error (with one seed, in Lenth's pseudo "
                   f"standard error over {k + spare} contrasts)" if spare else f"  a screen fits main effects only; "
                   f"the {size}-cell Plackett-Burman design has no unused column (with one seed, Lenth's pseudo "
                   f"standard error reads the noise off the {k} main effects)"]  # fmt: skip
        if s.regular:
            return out + ([f"  confounded (up to two-factor interactions): {'; '.join(s.confounded)}"]
                          if s.confounded else [])  # fmt: skip
        return out + [f"  partly confounded: each two-factor interaction loads {screens.loadings_text(s)} on main "
                      "effects of the switches outside it (partial aliasing, taken as negligible)"]  # fmt: skip

    def trials(self, seeds: int) -> int:
        """Trials of the design: each cell at `seeds` seeds, each stratum's reference at the replicated ones too."""
        return len(self.runs) * seeds + len(self.replicated) * len(set(self.strata.values()))

    def noise(self, seeds: int) -> list[str]:
        """What measures a two-level design's seed noise, in `ablate plan`'s words: replicates of every cell, the
        reference's replicated runs (pure error), or nothing (one seed: Lenth's effect sparsity stands in)."""
        if self.replicated:
            return [f"  the reference cell also runs at seed{'s' * (len(self.replicated) > 1)} "
                    f"{', '.join(map(str, self.replicated))} (reference_seeds: {seeds + len(self.replicated)}): "
                    f"their spread is the pure error each effect is tested against"]  # fmt: skip
        if seeds == 1:
            return ["  one seed: no seed variation measured, so the report's p assumes effect sparsity (Lenth's "
                    f"test); `reference_seeds: 4` in design.{self.kind} runs the reference cell at 3 more seeds "
                    "to measure it"]  # fmt: skip
        return []

    def record(self, seeds: int) -> dict[str, Any]:
        """What `lines` says, as data (`ablate plan --format json`), from the same `Structure`: a term is the list
        of its factors' short names (`factors[].short`; [] is the mean). A one-at-a-time design has no resolution,
        defining relation, estimable terms or aliases (null); `reference` is every design's first cell."""
        cells, names = len(self.runs), short([f.name for f in self.factors])
        s = self.structure() if self.two_level else None

        def term(t: Term) -> list[str]:
            return [names[i] for i in t]

        def aliases(s: Structure) -> list[dict[str, Any]]:  # the chains of `Structure.confounded`
            return [{"term": term(t), "text": s.chain(t),
                     "with": [{"term": term(o), "loading": round(w, 6)} for o, w in chain]}
                    for t in [(), *s.model] if (chain := s.aliases.get(t))]  # fmt: skip

        return {"kind": self.kind, "title": self.title,
                "factors": [{"name": f.name, "short": n, "levels": f.levels} for f, n in zip(self.factors, names)],
                "reference": {f.name: f.levels[0] for f in self.factors}, "crossed": self.crossed,
                "cells": cells, "full_cells": self.full, "trials": self.trials(seeds), "full_trials": self.full * seeds,
                "reference_seeds": self.replicated,
                "resolution": s.resolution if s else None, "resolution_asked": self.asked,
                "defining_relation": ([term(w) for w in s.words] if s.regular else []) if s else None,
                "defining_relation_signs": (s.signs if s.regular else []) if s else None,
                "estimable": [term(t) for t in s.model] if s else None,
                "dummy_contrasts": len(self.screen[0]) - len(self.factors) if self.screen else 0,
                "aliases": aliases(s) if s else None}  # fmt: skip

    def add(self, variant: str, levels: list[int], stratum: str, resolved: dict[str, Any]) -> None:
        """Record a planned cell; an axis's level is named by its validated value (`off`, which YAML reads as
        false, is the mechanism's `off`)."""
        self.runs[variant], self.strata[variant] = levels, stratum
        for f, level in zip(self.factors, levels):
            if "+" not in f.name:
                f.levels[level] = _text(get_path(resolved, f.name))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DesignPlan:
        factors = [Factor(**f) for f in data["factors"]]
        return cls(**{**data, "factors": factors})


@dataclass
class Chosen:
    """The cells a design runs, each with its factors' levels and its stratum, and the design's plan."""

    cells: list[Cell]
    levels: list[list[int]]
    strata: list[str]
    plan: DesignPlan


def choose(sweep: Sweep, groups: list[list[Cell]], design: Design) -> Chosen:
    """The cells of `groups`' product that `design` runs, from the sweep's data alone; SweepError naming each
    problem by its key path."""
    spec, kind, how = sweep.spec, design.kind, design.chosen
    at: Loc = ("design", kind)
    problems = []
    if spec.when:
        problems.append(SweepProblem(("design",), "a design chooses among the cells of the grid, and `when:` "
                                      "blocks add axes to some cells only: move their axes into the grid, or use "
                                      "`design: full`"))  # fmt: skip
    if kind != "one-at-a-time" and not isinstance(spec.seeds, list):
        problems.append(SweepProblem(("seeds",), f"adaptive seeds decide each cell against the baseline; a {kind} "
                                      "design is read through its effects: give a fixed number of seeds"))  # fmt: skip
    if spec.tune is not None:
        problems.append(SweepProblem(("tune",), "a design's report reads its cells by their keys, and a tuned arm's "
                                      "trials move to its best recipe: tune with `design: full`, or set the tuned "
                                      "recipe in the base"))  # fmt: skip
    names = [_name(g) for g in groups]
    crossed: list[int] = []
    for i, axis in enumerate(how.crossed):
        hit = next((g for g, group in enumerate(groups) if axis in _paths(group)), None)
        if hit is None:
            problems.append(SweepProblem((*at, "crossed", i), f"{axis} is no axis of the grid (its axes: "
                                          f"{', '.join(names) or 'none'})"))  # fmt: skip
        else:
            crossed.append(hit)
    varied = [g for g, group in enumerate(groups) if len(group) > 1 and g not in crossed]
    if kind != "one-at-a-time":
        problems += [SweepProblem(at, f"{names[g]} has {len(groups[g])} values: a {kind} design varies two-level "
                                   f"axes; list it under design.{kind}.crossed to run the design at each of its "
                                   "values") for g in varied if len(groups[g]) > 2]  # fmt: skip
    if problems:
        raise SweepError(problems)
    lay = (
        _one_at_a_time(sweep, groups, varied, how)
        if isinstance(how, OneAtATime)
        else _fraction(sweep, groups, varied, how, design.follow_up)
    )
    fixed = {g: lay.ref.get(g, 0) for g in range(len(groups)) if g not in varied and g not in crossed}
    cells, chosen_levels, strata = [], [], []
    for combo in itertools.product(*(range(len(groups[g])) for g in crossed)):
        stratum = ", ".join(f"{names[g]}={_words(groups[g][r])}" for g, r in zip(crossed, combo))
        for row, lv in zip(lay.rows, lay.levels):
            pick = {**fixed, **dict(zip(crossed, combo)), **dict(zip(varied, row))}
            cells.append(tuple(a for g in range(len(groups)) for a in groups[g][pick[g]]))
            chosen_levels.append(lv)
            strata.append(stratum)
    factors = [Factor(names[g], [_words(groups[g][r]) for r in lay.order[i]]) for i, g in enumerate(varied)]
    full = math.prod(len(g) for g in groups)
    chose = isinstance(how, Fractional) and how.cells is None and not how.foldover and not design.follow_up
    asked = how.resolution if chose and isinstance(how, Fractional) else None  # resolution alone chose the size
    plan = DesignPlan(
        kind,
        lay.title,
        factors,
        [names[g] for g in crossed],
        full,
        asked=asked,
        screen=lay.screen,
        followed=len(design.follow_up),
        replicated=_replicated(sweep, how),
    )
    return Chosen(cells, chosen_levels, strata, plan)


@dataclass
class Layout:
    """A design over the varied groups: each group's reference row; per cell, each varied group's row and its
    level (0: the reference); per varied group, its rows in level order; the design in words."""

    ref: dict[int, int]
    rows: list[list[int]]
    levels: list[list[int]]
    order: list[list[int]]
    title: str
    screen: list[list[int]] = field(default_factory=list)
    """A screen's rows over all its columns, 0/1 (`DesignPlan.screen`)."""


def _one_at_a_time(sweep: Sweep, groups: list[list[Cell]], varied: list[int], how: OneAtATime) -> Layout:
    """The reference cell, then each varied group moved alone to each of its other rows."""
    ref = _reference(sweep, groups, varied, how)
    moved = [(h, r) for h in varied for r in range(len(groups[h])) if r != ref[h]]
    rows = [[ref[g] for g in varied], *([r if g == h else ref[g] for g in varied] for h, r in moved)]
    order = [[ref[g], *(r for r in range(len(groups[g])) if r != ref[g])] for g in varied]
    levels = [[order[i].index(r) for i, r in enumerate(row)] for row in rows]
    title = f"one at a time from {how.reference if isinstance(how.reference, str) else 'the given cell'}"
    return Layout(ref, rows, levels, order, title)


def _fraction(
    sweep: Sweep,
    groups: list[list[Cell]],
    varied: list[int],
    how: Fractional | Screening,
    follows: list[FollowUp],
) -> Layout:
    """pyDOE's two-level design over the varied groups, signed so that its first cell is the reference, with the
    cells of its follow-ups (`ablate.planning.followup`)."""
    ref = _reference(sweep, groups, varied, None)

    def signed(how: Fractional | Screening) -> np.ndarray:
        """The first cell is the reference: every factor at its reference level."""
        coded = _two_level(len(varied), how)
        return np.asarray(coded * -coded[0], dtype=float)

    k = len(varied)
    coded = signed(how)
    title = _title(how, k, len(coded))
    if follows:  # a screen's dummy contrasts are read on its own cells only
        coded = coded[:, :k]
    for i, follow in enumerate(follows):
        coded, more = followup.extend(coded, follow, i, [_name(groups[g]) for g in varied], signed)
        title += more
    every = [[int(x > 0) for x in row] for row in sorted(coded.tolist())]
    levels = [row[:k] for row in every]
    order = [[ref.get(g, 0), 1 - ref.get(g, 0)] for g in varied]
    rows = [[order[i][lv] for i, lv in enumerate(row)] for row in levels]
    screen = every if isinstance(how, Screening) and not follows else []
    return Layout(ref, rows, levels, order, title, screen)


def candidates(k: int) -> dict[int, np.ndarray]:
    """The best fractions of resolution IV and V of k two-level factors smaller than the full grid (the catalogue's,
    `ablate.planning.fractions`), each signed so that the reference (all -1) is a cell, and each design once, at the
    lowest resolution that gets it (for 5 switches IV and V are one 16-cell design): the Findings weigh adding their
    cells (`ablate.planning.followup.options`)."""
    out: dict[int, np.ndarray] = {}
    for r in (4, 5):
        try:
            rows = fractions.best(k, r).coded
        except ValueError:  # only the full grid reaches it
            continue
        rows = np.asarray(rows * -rows[0], dtype=float)
        if len(rows) < 2**k and not any(np.array_equal(rows, o) for o in out.values()):
            out[r] = rows
    return out


def _two_level(k: int, how: Fractional | Screening) -> np.ndarray:
    """The design for k two-level factors (cells x k, -1/+1): the best fraction for the budget
    (`ablate.planning.fractions`), or pyDOE's Plackett-Burman with its dummy columns after the factors'
    (`ablate.planning.screens`); a SweepError where it would be the full grid."""
    at: Loc = ("design", "fractional" if isinstance(how, Fractional) else "screening")
    if isinstance(how, Fractional):
        try:
            coded = fractions.best(k, how.resolution, how.cells).coded
        except ValueError as e:
            raise SweepError([SweepProblem((*at, "cells" if how.cells else "resolution"), str(e))]) from None
    else:
        try:
            coded = screens.plackett_burman(k)
        except ValueError as e:
            raise SweepError([SweepProblem(at, f"no design for {k} two-level axes: {e}")]) from None
    if k < 2 or len(np.unique(coded[:, :k], axis=0)) >= 2**k:
        raise SweepError([SweepProblem(at, f"screening with {k} two-level ax{'is' if k == 1 else 'es'} is reached only "
                                       f"by the full grid ({2**k} cells): use `design: full`")])  # fmt: skip
    if isinstance(how, Fractional) and how.foldover:
        coded = np.vstack([coded, -coded])  # the mirror image
    return np.asarray(coded, dtype=float)


def _title(how: Fractional | Screening, k: int, cells: int) -> str:
    if isinstance(how, Fractional):
        base = round(math.log2(cells)) - how.foldover
        best = ", minimum aberration" if fractions.catalogued(k, base) else ""
        fold = ", folded over" if how.foldover else ""
        return f"fractional factorial 2^({k}-{k - base}){best}{fold}"
    return f"Plackett-Burman screening, {k} axes in {cells} cells"


def _replicated(sweep: Sweep, how: Fractional | OneAtATime | Screening) -> list[int]:
    """The seeds the reference cell runs at beyond the sweep's (`reference_seeds`): the first unused ones."""
    wanted = getattr(how, "reference_seeds", None)
    seeds = sweep.spec.seeds
    if wanted is None or not isinstance(seeds, list):
        return []
    if len(seeds) > 1:
        at: Loc = ("design", "fractional" if isinstance(how, Fractional) else "screening", "reference_seeds")
        raise SweepError([SweepProblem(at, f"replicates the reference cell of a one-seed design; this sweep runs every "
                                       f"cell at {len(seeds)} seeds ({seeds}), and the report compares each effect "
                                       "over them: drop reference_seeds, or give one seed")])  # fmt: skip
    free = (s for s in itertools.count() if s not in seeds)
    return [next(free) for _ in range(wanted - len(seeds))]


def _full(group: list[Cell]) -> int:
    """The full model's row of an axis group: a boolean switch's `true` wherever it is listed (`[true, false]`
    made the all-off cell "full"), else the last listed row."""
    if all(len(row) == 1 and isinstance(row[0][1], bool) for row in group):
        on = [r for r, row in enumerate(group) if row[0][1] is True]
        if on:
            return on[0]
    return len(group) - 1


def _reference(sweep: Sweep, groups: list[list[Cell]], varied: list[int], how: OneAtATime | None) -> dict[int, int]:
    """Each group's reference row: the baseline's (or, one at a time, the `from` cell's). For a two-level design,
    a group the baseline leaves open takes its first row; one at a time, the reference must be one cell."""
    source = how.reference if how is not None else "baseline"
    at: Loc = ("design", "one-at-a-time", "from") if how is not None else ("baseline",)
    if source == "full":
        return {g: _full(group) for g, group in enumerate(groups)}
    rule = sweep.spec.baseline if source == "baseline" else source
    if rule is None:
        if how is not None:
            raise SweepError([SweepProblem(at, "from: baseline needs the sweep's `baseline:`")])
        return {}
    ref: dict[int, int] = {}
    problems = []
    for g, group in enumerate(groups):
        said = {p: v for p, v in rule.items() if p in _paths(group)}
        hits = [r for r, row in enumerate(group) if said and matches(said, {p: v for p, v, _ in row}, flat=True)]
        if said and not hits:
            problems.append(f"{rule} is not a cell of the grid: {_name(group)} takes "
                            f"{', '.join(_words(row) for row in group)}")  # fmt: skip
        elif how is not None and g in varied and len(hits) != 1:
            problems.append(f"{rule} leaves {_name(group)} open: a one-at-a-time reference is one cell")
        ref[g] = hits[0] if hits else 0
    grid = {p for group in groups for p in _paths(group)}
    problems += [f"{p} is not an axis of the grid, and the base has {get_path(sweep.base, p)!r}, not {v!r}"
                 for p, v in rule.items() if p not in grid and not matches({p: v}, sweep.base)]  # fmt: skip
    if problems and how is not None:
        raise SweepError([SweepProblem(at, m) for m in problems])
    return ref


def short(names: list[str]) -> list[str]:
    """Factor names as tables show them: the last part of each path (attention.tau -> tau), whole where two
    would read alike."""
    last = ["+".join(part.rsplit(".", 1)[-1] for part in n.split("+")) for n in names]
    return [s if last.count(s) == 1 else n for s, n in zip(last, names)]


def _paths(group: list[Cell]) -> list[str]:
    return list(dict.fromkeys(p for row in group for p, _, _ in row))


def _name(group: list[Cell]) -> str:
    return "+".join(_paths(group))


def _words(row: Cell) -> str:
    """A group's row in words: its value (one axis) or path=value pairs (a linked row)."""
    if len(row) == 1:
        return _text(row[0][1])
    return ", ".join(f"{p}={_text(v)}" for p, v, _ in row)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
