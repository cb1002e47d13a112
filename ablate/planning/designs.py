"""Designs: which cells of a sweep's grid run (`design:`, `ablate.spec.design`), and what they can tell.

The grid's axis groups (a grid axis, or a linked group whose rows move together) are the design's factors;
axes listed under `crossed` stay whole, and the design is repeated at each of their values. A fractional or
screening design takes its cells from pyDOE (`fracfact_by_res`, `pbdesign`), with each factor's columns
signed so that its first cell is the reference (the baseline's level of every factor, else the first listed
level): the baseline is always one of the cells. A one-at-a-time design takes a reference cell and moves each
factor alone to each of its other values. The cells are cells of the full grid, so their trial keys are the
full grid's: completing a design later (a fold-over, a higher resolution, `full`) trains only what it lacks.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ablate.errors import SpecError
from ablate.evidence.aliasing import Structure, Term, structure
from ablate.spec.design import Design, Fractional, OneAtATime, Screening
from ablate.spec.paths import get_path, matches
from ablate.spec.sweeps import SweepSource
from ablate.spec.yaml_doc import Loc

Cell = tuple[tuple[str, Any, Loc], ...]
"""A grid cell, or one row of an axis group: (dotted path, value, where in the sweep's YAML) per axis."""
ROMAN = {3: "III", 4: "IV", 5: "V"}
FULL_MAX = 12
"""Two-level axes up to which the Findings weigh the full grid as a way to separate what a design confounds."""


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
        return replace(self, factors=factors, runs=runs)

    def coded(self, variants: list[str]) -> np.ndarray:
        """The variants' cells coded -1 (reference) / +1, as `ablate.evidence.aliasing` reads them."""
        return np.array([[2 * level - 1 for level in self.runs[v]] for v in variants], dtype=float)

    def structure(self, variants: list[str] | None = None) -> Structure:
        """What the cells of `variants` (default: one stratum's) can tell apart."""
        if variants is None:
            first = next(iter(self.strata.values()), "")
            variants = [v for v, s in self.strata.items() if s == first]
        return structure(self.coded(variants), short([f.name for f in self.factors]))

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
        out += self.noise(seeds)
        if s.words:
            out.append(f"  defining relation: {s.words_text()}")
        out.append(f"  estimable: {', '.join(s.name(t) for t in s.model)}")
        if s.confounded:
            out.append(f"  confounded (up to two-factor interactions): {'; '.join(s.confounded)}")
        return out

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
                "resolution": s.resolution if s else None,
                "defining_relation": ([term(w) for w in s.words] if s.regular else []) if s else None,
                "estimable": [term(t) for t in s.model] if s else None,
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


def choose(sweep: SweepSource, groups: list[list[Cell]], design: Design) -> Chosen:
    """The cells of `groups`' product that `design` runs; SpecError naming each problem."""
    spec, kind, how = sweep.spec, design.kind, design.chosen
    at: Loc = ("design", kind)
    problems = []
    if spec.when:
        problems.append(sweep.problem(("design",), "a design chooses among the cells of the grid, and `when:` "
                                      "blocks add axes to some cells only: move their axes into the grid, or use "
                                      "`design: full`"))  # fmt: skip
    if kind != "one-at-a-time" and not isinstance(spec.seeds, list):
        problems.append(sweep.problem(("seeds",), f"adaptive seeds decide each cell against the baseline; a {kind} "
                                      "design is read through its effects: give a fixed number of seeds"))  # fmt: skip
    if spec.tune is not None:
        problems.append(sweep.problem(("tune",), "a design's report reads its cells by their keys, and a tuned arm's "
                                      "trials move to its best recipe: tune with `design: full`, or set the tuned "
                                      "recipe in the base"))  # fmt: skip
    names = [_name(g) for g in groups]
    crossed: list[int] = []
    for i, axis in enumerate(how.crossed):
        hit = next((g for g, group in enumerate(groups) if axis in _paths(group)), None)
        if hit is None:
            problems.append(sweep.problem((*at, "crossed", i), f"{axis} is no axis of the grid (its axes: "
                                          f"{', '.join(names) or 'none'})"))  # fmt: skip
        else:
            crossed.append(hit)
    varied = [g for g, group in enumerate(groups) if len(group) > 1 and g not in crossed]
    if kind != "one-at-a-time":
        problems += [sweep.problem(at, f"{names[g]} has {len(groups[g])} values: a {kind} design varies two-level "
                                   f"axes; list it under design.{kind}.crossed to run the design at each of its "
                                   "values") for g in varied if len(groups[g]) > 2]  # fmt: skip
    if problems:
        raise SpecError(problems)
    lay = (
        _one_at_a_time(sweep, groups, varied, how)
        if isinstance(how, OneAtATime)
        else _fraction(sweep, groups, varied, how)
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
    plan = DesignPlan(kind, lay.title, factors, [names[g] for g in crossed], full, replicated=_replicated(sweep, how))
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


def _one_at_a_time(sweep: SweepSource, groups: list[list[Cell]], varied: list[int], how: OneAtATime) -> Layout:
    """The reference cell, then each varied group moved alone to each of its other rows."""
    ref = _reference(sweep, groups, varied, how)
    moved = [(h, r) for h in varied for r in range(len(groups[h])) if r != ref[h]]
    rows = [[ref[g] for g in varied], *([r if g == h else ref[g] for g in varied] for h, r in moved)]
    order = [[ref[g], *(r for r in range(len(groups[g])) if r != ref[g])] for g in varied]
    levels = [[order[i].index(r) for i, r in enumerate(row)] for row in rows]
    title = f"one at a time from {how.reference if isinstance(how.reference, str) else 'the given cell'}"
    return Layout(ref, rows, levels, order, title)


def _fraction(sweep: SweepSource, groups: list[list[Cell]], varied: list[int], how: Fractional | Screening) -> Layout:
    """pyDOE's two-level design over the varied groups, signed so that its first cell is the reference."""
    ref = _reference(sweep, groups, varied, None)
    coded = _two_level(sweep, len(varied), how)
    coded = coded * -coded[0]  # the first cell is the reference: every factor at its reference level
    levels = [[int(x > 0) for x in row] for row in sorted(coded.tolist())]
    order = [[ref.get(g, 0), 1 - ref.get(g, 0)] for g in varied]
    rows = [[order[i][lv] for i, lv in enumerate(row)] for row in levels]
    return Layout(ref, rows, levels, order, _title(how, len(varied), len(levels)))


def completions(plan: DesignPlan, variants: list[str]) -> list[tuple[str, int, Structure]]:
    """Two-level designs that would tell apart more than the cells of `variants` do, smallest first: the
    fold-over, higher resolutions, the full grid; each as (its `design:` in words, cells it adds, what it can
    tell). A fold-over contains the cells it folds, a higher resolution's cells need not contain them."""
    import pydoe  # scipy.stats with it: about a second of import that a sweep without a design never needs

    coded = plan.coded(variants)
    k = coded.shape[1]
    ran = {tuple(row) for row in coded.tolist()}
    names = short([f.name for f in plan.factors])
    options: list[tuple[str, np.ndarray]] = [("foldover: true", np.vstack([coded, -coded]))]
    for r in (4, 5):
        found = pydoe.fracfact_by_res(k, r)
        if len(found) < 2**k:
            options.append((f"fractional: {{resolution: {r}}}", found * -found[0]))
    if k <= FULL_MAX:
        options.append(("design: full", np.array(list(itertools.product((-1.0, 1.0), repeat=k)))))
    out = []
    for words, rows in options:
        added = len({tuple(row) for row in rows.tolist()} - ran)
        if added:
            out.append((words, added, structure(rows, names)))
    return out


def _two_level(sweep: SweepSource, k: int, how: Fractional | Screening) -> np.ndarray:
    """pyDOE's design for k two-level factors (cells x k, -1/+1); a SpecError where it would be the full grid."""
    import pydoe

    at: Loc = ("design", "fractional" if isinstance(how, Fractional) else "screening")
    try:
        coded = pydoe.fracfact_by_res(k, how.resolution) if isinstance(how, Fractional) else pydoe.pbdesign(k)
    except ValueError as e:
        raise SpecError([sweep.problem(at, f"no design for {k} two-level axes: {e}")]) from None
    if k < 2 or len(np.unique(coded, axis=0)) >= 2**k:
        what = f"resolution {how.resolution}" if isinstance(how, Fractional) else "screening"
        raise SpecError([sweep.problem(at, f"{what} with {k} two-level ax{'is' if k == 1 else 'es'} is reached only "
                                       f"by the full grid ({2**k} cells): use `design: full`")])  # fmt: skip
    if isinstance(how, Fractional) and how.foldover:
        coded = pydoe.fold(coded)
    return np.asarray(coded, dtype=float)


def _title(how: Fractional | Screening, k: int, cells: int) -> str:
    if isinstance(how, Fractional):
        p = k - round(math.log2(cells))
        fold = ", folded over" if how.foldover else ""
        return f"fractional factorial 2^({k}-{p}){fold}"
    return f"Plackett-Burman screening, {k} axes in {cells} cells"


def _replicated(sweep: SweepSource, how: Fractional | OneAtATime | Screening) -> list[int]:
    """The seeds the reference cell runs at beyond the sweep's (`reference_seeds`): the first unused ones."""
    wanted = getattr(how, "reference_seeds", None)
    seeds = sweep.spec.seeds
    if wanted is None or not isinstance(seeds, list):
        return []
    if len(seeds) > 1:
        at: Loc = ("design", "fractional" if isinstance(how, Fractional) else "screening", "reference_seeds")
        raise SpecError([sweep.problem(at, f"replicates the reference cell of a one-seed design; this sweep runs every "
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


def _reference(
    sweep: SweepSource, groups: list[list[Cell]], varied: list[int], how: OneAtATime | None
) -> dict[int, int]:
    """Each group's reference row: the baseline's (or, one at a time, the `from` cell's). For a two-level design,
    a group the baseline leaves open takes its first row; one at a time, the reference must be one cell."""
    source = how.reference if how is not None else "baseline"
    at: Loc = ("design", "one-at-a-time", "from") if how is not None else ("baseline",)
    if source == "full":
        return {g: _full(group) for g, group in enumerate(groups)}
    rule = sweep.spec.baseline if source == "baseline" else source
    if rule is None:
        if how is not None:
            raise SpecError([sweep.problem(at, "from: baseline needs the sweep's `baseline:`")])
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
        raise SpecError([sweep.problem(at, m) for m in problems])
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
