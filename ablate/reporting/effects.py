"""Which knob carries the gain: main effects and two-way interactions of the factorial parts of a sweep.

The factorial part is the largest set of axes whose levels are fully crossed among the measured variants
while every other axis stays at the baseline's value (a linked grid like the CSaN paper's table holds the
2 x 2 stack x mixer square through its baseline). A knob of one attention kind (CSaN's kappa_pub, ISTA's
steps) is held at its first value among the variants it applies to, and ignored for the others.
Reference levels are the baseline's. An axis left out of that part (a knob of one attention kind with
more than one value, `power: [1, 2, 3]` under `when: relu2`) gets a part of its own: the same search among
the variants it applies to, with that axis in the set and the variant nearest the baseline as reference;
such a part reports the terms that involve the axes no earlier part has, named with the values its
variants share (`power (kind=relu2)`). A factor of k levels gives k - 1 contrasts, each level against the
reference (many-to-one comparisons, as a reviewer reads a knob's levels against its default). With cells
y[level_1, ..., level_k]:

    main effect of factor A at level a = mean over the other factors of  y[a, ...] - y[a0, ...]
    interaction A x B at (a, b)        = mean over the rest of  y[a, b] - y[a0, b] - y[a, b0] + y[a0, b0]

(the effect of A when B is at b minus its effect when B is at b0). Both are linear contrasts of the cells.
When at least half the replicates are complete (every cell has that seed/fold), each contrast is computed
per complete replicate and its 95% interval and p-value are the paired t over replicates (seed effects
shared by all cells cancel; under cross-validation the corrected resampled t over the folds, see `stats`).
Otherwise (failures scattered over a large grid) it is computed on cell means with a t interval from the
pooled within-cell variance: unpaired, so wider, but it uses every trial (under cross-validation, on each
repeat's mean over its folds, the independent replicates). The p-values of every part's terms are adjusted
together, one family. Which terms get an interval and a p follows the small-sample policy (`ablate.evidence`):
none where the spread cannot be estimated (zero spread) or the replicates are too few (paired: as the
variant table; cell means: a t-test needs 9 degrees of freedom, there is no exact test). With one value per cell
(an unreplicated factorial: one seed) the terms are tested by Lenth's pseudo standard error instead
(`ablate.evidence.lenth`): where every factor of the part has two levels, so the terms are orthogonal contrasts.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ablate import evidence
from ablate.reporting import describe, stats
from ablate.reporting.frames import NA, STRATA, SweepData, axis_cells, replicates

MAX_FACTORS = 12
PAIRED = "paired over replicates"
POOLED = "cell means, pooled variance"
LENTH_PSE = "cell means, Lenth's PSE"
"""The `method` of a row Lenth's test read (one value per cell): the effects CSV says which test stands behind p."""


@dataclass
class Factorial:
    """One factorial part: per factor its levels (reference first) and the metric per cell; the first part
    holds the others (`more`)."""

    factors: list[str]
    levels: list[list[str]]
    values: np.ndarray
    """(replicates, level_1, ..., level_k): the metric per replicate and cell, NaN where missing."""
    replicates: stats.Replicates = field(default_factory=stats.Replicates)
    repeats: tuple[str, ...] = ()
    """The independent replicate (seed[/split seed]) of each replicate of `values` (its folds share one)."""
    knobs: tuple[str, ...] = ()
    """The factors whose terms this part reports: main effects and the interactions that involve one (every
    factor of the first part; in a later part those no earlier part has)."""
    within: dict[str, str] = field(default_factory=dict)
    """Axis values every variant of the part has and the baseline has not (attention.kind: relu2 for the
    part of relu2's own knobs)."""
    held: dict[str, str] = field(default_factory=dict)
    """Axes outside the factors held at a value other than the baseline's (a knob the baseline lacks, at its
    first value)."""
    more: list[Factorial] = field(default_factory=list)
    """The parts of the axes with two or more levels that this one leaves out."""

    @property
    def complete(self) -> np.ndarray:
        """Replicates measured in every cell."""
        complete: np.ndarray = ~np.isnan(self.values.reshape(len(self.values), -1)).any(axis=1)
        return complete

    @property
    def method(self) -> str:
        n = int(self.complete.sum())
        return PAIRED if n >= 2 and 2 * n >= len(self.values) else POOLED

    @property
    def parts(self) -> list[Factorial]:
        return [self, *self.more]


def factorial(data: SweepData) -> Factorial | None:
    """The factorial parts of the sweep (see the module docstring), or None if no axis has two levels."""
    table = replicates(data).dropna(how="all").dropna(axis=1, how="all")
    measured = data.variants.loc[table.index]
    if measured.empty:
        return None
    grid = axis_cells(measured, data.axes)
    base = str(data.baseline if data.baseline in grid.index else grid.index[0])
    first = _part(data, table, grid, base)
    if first is None:
        return None
    covered = set(first.factors)
    for axis in [a for a in data.axes if grid[a].nunique() > 1][:MAX_FACTORS]:
        if axis in covered:
            continue
        stratum = grid[grid[axis] != NA]
        nearest = str((stratum == grid.loc[base]).sum(axis=1).idxmax())  # agrees with the baseline on most axes
        part = _part(data, table, stratum, nearest, grid.loc[base], axis)
        if part is None:
            continue
        part.knobs = tuple(f for f in part.factors if f not in covered)
        covered |= set(part.factors)
        first.more.append(part)
    return first


def _part(
    data: SweepData, table: pd.DataFrame, grid: pd.DataFrame, ref: str, base: pd.Series | None = None, must: str = ""
) -> Factorial | None:
    """The largest set of axes fully crossed among `grid`'s variants with every other axis held (`_held`)
    at the values of variant `ref`; with `must`, only sets that hold that axis. `base`: the baseline's axis
    values, against which `within` and `held` are told (default `ref`'s)."""
    candidates = [a for a in data.axes if grid[a].nunique() > 1][:MAX_FACTORS]
    if not candidates or (must and must not in candidates):
        return None
    held = {a: _held(grid[a], grid.loc[ref, a]) for a in candidates}
    at_base = np.stack([(grid[a] == held[a]) | (grid[a] == NA) for a in candidates], axis=1)
    codes = np.stack([pd.factorize(grid[a])[0] for a in candidates], axis=1)  # levels counted as numbers
    best: tuple[int, list[str], Any] | None = None
    for size in range(len(candidates), 0, -1):
        for subset in itertools.combinations(range(len(candidates)), size):
            if must and candidates.index(must) not in subset:
                continue
            rest = [i for i in range(len(candidates)) if i not in subset]
            rows = at_base[:, rest].all(axis=1)
            counts = np.array([len(np.unique(codes[rows, i])) for i in subset])
            if (counts > 1).all() and int(np.prod(counts)) == rows.sum() and (best is None or rows.sum() > best[0]):
                best = (int(rows.sum()), [candidates[i] for i in subset], rows)
        if best is not None:
            break
    if best is None:
        return None
    _, factors, rows = best
    sub = grid.loc[rows, factors]
    levels = [[grid.loc[ref, f]] + [v for v in dict.fromkeys(sub[f]) if v != grid.loc[ref, f]] for f in factors]
    vals = table.reindex(index=sub.index).to_numpy()
    values = np.full((vals.shape[1], *map(len, levels)), np.nan)
    for row, cell in zip(vals, sub.itertuples(index=False, name=None)):
        at: tuple[int | slice, ...] = (slice(None), *(lv.index(v) for lv, v in zip(levels, cell)))
        values[at] = row
    measured = data.variants.loc[grid.index]
    shown = {a: dict(zip(grid[a], measured[f"axis.{a}"].map(describe.value))) for a in data.axes}
    repeat = data.trials.drop_duplicates("rep").set_index("rep")["repeat"]
    told = grid.loc[ref] if base is None else base
    shared = {a: grid[a].iloc[0] for a in data.axes if grid[a].nunique() == 1 and told[a] != NA}
    within = {a: shown[a][v] for a, v in shared.items() if v not in (told[a], NA)}
    kept = {a: shown[a][held[a]] for a in candidates if a not in factors and held[a] not in (told[a], NA)}
    return Factorial(factors, [[shown[f][v] for v in lv] for f, lv in zip(factors, levels)], values, data.replicates,
                     tuple(repeat.reindex(table.columns).astype(str)), tuple(factors), within, kept)  # fmt: skip


def _held(column: pd.Series, base: str) -> str:
    """The value an axis outside the factorial is held at: the baseline's, or where it does not apply to
    the baseline (a CSaN knob of a softmax baseline), the first value where it applies. Variants where the
    axis does not apply pass either way."""
    if base != NA:
        return base
    return next((v for v in column if v != NA), NA)


def _contrast(cells: np.ndarray, at: dict[int, int]) -> np.ndarray:
    """Per row of `cells` (axis 0): the signed sum over {0, level}^|at| of cells (a difference of
    differences), averaged over every factor not in `at`. Factor i is axis i + 1 of `cells`."""
    total = np.zeros(cells.shape[0])
    for corner in itertools.product(*[(0, lv) for lv in at.values()]):
        sign = (-1) ** sum(c == 0 for c in corner)
        block = cells
        for axis, level in sorted(zip(at, corner), reverse=True):
            block = block.take(level, axis=axis + 1)
        total = total + sign * block.reshape(cells.shape[0], -1).mean(axis=1)
    return total


def _terms(f: Factorial) -> list[tuple[str, str, str, dict[int, int]]]:
    """(term, factor, contrast, {factor index: level}) for every main effect of the part's `knobs` and every
    two-way interaction that involves one; a factor of k levels has k - 1 contrasts, each level against the
    reference. A part `within` some values names them after each factor (power (kind=relu2)). A dataset axis
    (`STRATA`) has no main effect (one dataset's scores against another's measure the datasets, not the sweep's
    knobs); its interactions say where a knob's effect differs between datasets."""
    short = [describe.short(x) for x in f.factors]
    given = f" ({', '.join(f'{describe.short(a)}={v}' for a, v in f.within.items())})" if f.within else ""
    own = [x in f.knobs for x in f.factors]
    terms = []
    for i, lv in enumerate(f.levels):
        if own[i] and f.factors[i] not in STRATA:  # a dataset's level against another's is no effect of a knob
            terms += [("main", short[i] + given, f"{lv[j]} vs {lv[0]}", {i: j}) for j in range(1, len(lv))]
    for i, k in itertools.combinations(range(len(f.factors)), 2):
        if not (own[i] or own[k]):
            continue
        for a, b in itertools.product(range(1, len(f.levels[i])), range(1, len(f.levels[k]))):
            contrast = f"({f.levels[i][a]} vs {f.levels[i][0]}) x ({f.levels[k][b]} vs {f.levels[k][0]})"
            terms.append(("interaction", f"{short[i]} x {short[k]}{given}", contrast, {i: a, k: b}))
    return terms


COLUMNS = ["term", "factor", "contrast", "effect", "lo", "hi", "p", "p_adj", "n", "df", "method", "test", "why", "sd",
           "t", "screen", "terms"]  # fmt: skip
"""t: the effect over its pseudo standard error, screen: the family one Lenth's test read, terms: how many terms it
read, where it tested the row (`stats.unreplicated`; NaN, "" and 0 elsewhere)."""


def effects(f: Factorial, correction: str = "holm") -> pd.DataFrame:
    """One row per main effect (factor, level vs reference) and two-way interaction of every part (`parts`):
    term, factor, contrast, effect, lo, hi and p (NaN where the small-sample policy gives no test,
    `ablate.evidence`), p_adj (adjusted together over every part's terms), n (replicates, or trials for cell
    means), df (of the t interval; 0: no spread to estimate), method, test, why there is none, and sd (of the
    per-replicate contrasts a paired effect is tested on; NaN for cell means: what the Findings' advice sizes)."""
    parts = [x for x in map(_estimate, f.parts) if len(x)]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
    out["p_adj"] = stats.adjust(out["p"], correction)
    return out[COLUMNS]


def _estimate(f: Factorial) -> pd.DataFrame:
    """The terms of one part, estimated by its `method` (module docstring); p_adj left to `effects`."""
    terms = _terms(f)
    if not terms:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.DataFrame([t[:3] for t in terms], columns=COLUMNS[:3]).assign(t=np.nan, screen="", terms=0)
    if f.method == PAIRED:
        cells = f.values[f.complete]
        contrasts = np.stack([_contrast(cells, at) for *_, at in terms])
        est = stats.paired(contrasts, replicates=f.replicates, effect=False)  # the table shows no d
        for col in ("lo", "hi", "p", "test", "why"):
            out[col] = est[col]
        out["effect"], out["n"], out["df"], out["sd"] = est["mean"], len(cells), len(cells) - 1, est["std"]
    else:
        out["sd"] = np.nan
        values = _repeat_means(f) if f.replicates.folds is not None else f.values
        count = (~np.isnan(values)).sum(axis=0)
        # a cell none of whose trials finished (all failed or diverged): its mean and the effects through it are
        # NaN, which the table shows as such; numpy's warnings about it would only be noise under the report
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            means = np.nanmean(values, axis=0)[None]
            df = int(count.sum() - count.size)
            pooled = np.nansum((values - means) ** 2) / df if df > 0 else np.nan
            if stats.zero_spread(np.sqrt(pooled), np.nanmax(np.abs(values))):
                pooled = 0.0
            basis = np.eye(count.size).reshape(count.size, *count.shape)
            weights = np.stack([_contrast(basis, at) for *_, at in terms])
            out["effect"] = [_contrast(means, at)[0] for *_, at in terms]
            se = np.sqrt(pooled * (weights**2 / count.reshape(1, -1)).sum(axis=1))
        n = int(count.sum())
        tested = evidence.family(n, df, pooled > 0, exchangeable=False) == evidence.T  # unpaired: no exact test
        lo, hi, p = stats.t_test(out["effect"], se, df)
        out["lo"], out["hi"], out["p"] = (np.where(tested, x, np.nan) for x in (lo, hi, p))
        out["n"], out["df"] = n, max(df, 0)
        out["test"] = "t (pooled variance)" if tested else ""
        unit = "trial" if f.replicates.folds is None else "repeat"
        out["why"] = evidence.why(n, df, pooled > 0, False, unit)
        if df == 0:  # one value per cell: an unreplicated factorial
            screen = ", ".join(map(describe.short, f.factors))
            est = stats.unreplicated(out["effect"], weights, count.reshape(-1), unit, screen)
            for col in ("lo", "hi", "p", "test", "why", "t", "screen", "terms"):
                out[col] = est[col]
    out["method"] = np.where(out["test"] == stats.LENTH, LENTH_PSE, f.method)
    return out


def _repeat_means(f: Factorial) -> np.ndarray:
    """`values` with the folds of each independent replicate averaged (NaN folds left out)."""
    keys = list(dict.fromkeys(f.repeats))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a cell with none of a repeat's folds: NaN
        return np.stack([np.nanmean(f.values[[r == k for r in f.repeats]], axis=0) for k in keys])
