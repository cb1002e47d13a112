"""Which knob carries the gain: main effects and two-way interactions of the factorial part of a sweep.

The factorial part is the largest set of axes whose levels are fully crossed among the measured variants
while every other axis stays at the baseline's value (a linked grid like the CSaN paper's table holds the
2 x 2 stack x mixer square through its baseline; a `when` axis drops out). Reference levels are the
baseline's. With cells y[level_1, ..., level_k]:

    main effect of factor A at level a = mean over the other factors of  y[a, ...] - y[a0, ...]
    interaction A x B at (a, b)        = mean over the rest of  y[a, b] - y[a0, b] - y[a, b0] + y[a0, b0]

(the effect of A when B is at b minus its effect when B is at b0). Both are computed per complete
replicate (every cell has that seed/fold), so the 95% interval and p-value are the paired t over
replicates; with fewer than two complete replicates they come from cell means, without an interval.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.reporting import describe, stats
from ablate.reporting.frames import SweepData

MAX_FACTORS = 12


@dataclass
class Factorial:
    """Metric per replicate and cell of a full factorial: `cells[r, i1, ..., ik]`, level 0 = reference."""

    factors: list[str]
    levels: list[list[str]]
    cells: np.ndarray
    replicates: int
    """Complete replicates behind `cells` (0: one row of cell means)."""


def factorial(data: SweepData) -> Factorial | None:
    """The factorial part of the sweep (see the module docstring), or None if no axis has two levels."""
    values = data.trials.pivot_table(index="variant", columns="rep", values="value", aggfunc="mean")
    measured = data.variants.loc[data.variants.index.isin(values.index)]
    if measured.empty:
        return None
    grid = measured[[f"axis.{a}" for a in data.axes]].astype(str)
    grid.columns = data.axes
    base = data.baseline if data.baseline in grid.index else grid.index[0]
    candidates = [a for a in data.axes if grid[a].nunique() > 1][:MAX_FACTORS]
    at_base = grid[candidates].eq(grid.loc[base, candidates]).to_numpy()
    best: tuple[int, int, list[str], np.ndarray] | None = None
    for size in range(len(candidates), 0, -1):
        for subset in itertools.combinations(range(len(candidates)), size):
            rest = [i for i in range(len(candidates)) if i not in subset]
            rows = at_base[:, rest].all(axis=1) if rest else np.ones(len(grid), bool)
            sub = grid.loc[rows, [candidates[i] for i in subset]]
            counts = sub.nunique()
            if (counts > 1).all() and int(np.prod(counts)) == len(sub):
                if best is None or len(sub) > best[1]:
                    best = (size, len(sub), [candidates[i] for i in subset], rows)
        if best is not None:
            break
    if best is None:
        return None
    _, _, factors, rows = best
    sub = grid.loc[rows, factors]
    levels = [[grid.loc[base, f]] + [v for v in dict.fromkeys(sub[f]) if v != grid.loc[base, f]] for f in factors]
    vals = values.reindex(index=sub.index).to_numpy()
    complete = ~np.isnan(vals).any(axis=0)
    if complete.sum() >= 2:
        vals, reps = vals[:, complete], int(complete.sum())
    else:
        vals, reps = np.nanmean(vals, axis=1, keepdims=True), 0
    cells = np.full((vals.shape[1], *map(len, levels)), np.nan)
    for variant, row in zip(sub.index, vals):
        index = tuple(lv.index(sub.loc[variant, f]) for lv, f in zip(levels, factors))
        cells[(slice(None), *index)] = row
    shown = {f: {str(v): describe.value(v) for v in measured[f"axis.{f}"]} for f in factors}
    return Factorial(factors, [[shown[f][v] for v in lv] for f, lv in zip(factors, levels)], cells, reps)


def _contrast(cells: np.ndarray, at: dict[int, int]) -> np.ndarray:
    """Per replicate: the signed sum over {0, level}^|at| of cells (a difference of differences),
    averaged over every factor not in `at`. Factor i is axis i + 1 of `cells`."""
    total = np.zeros(cells.shape[0])
    for corner in itertools.product(*[(0, lv) for lv in at.values()]):
        sign = (-1) ** sum(c == 0 for c in corner)
        block = cells
        for axis, level in sorted(zip(at, corner), reverse=True):
            block = block.take(level, axis=axis + 1)
        total = total + sign * block.reshape(cells.shape[0], -1).mean(axis=1)
    return total


def effects(f: Factorial) -> pd.DataFrame:
    """One row per main effect (factor, level vs reference) and two-way interaction: term, factor,
    contrast, effect, lo, hi, p, n."""
    terms: list[tuple[str, str, str, dict[int, int]]] = []
    short = [describe.short(x) for x in f.factors]
    for i, lv in enumerate(f.levels):
        terms += [("main", short[i], f"{lv[j]} vs {lv[0]}", {i: j}) for j in range(1, len(lv))]
    for i, k in itertools.combinations(range(len(f.factors)), 2):
        for a, b in itertools.product(range(1, len(f.levels[i])), range(1, len(f.levels[k]))):
            contrast = f"({f.levels[i][a]} vs {f.levels[i][0]}) x ({f.levels[k][b]} vs {f.levels[k][0]})"
            terms.append(("interaction", f"{short[i]} x {short[k]}", contrast, {i: a, k: b}))
    if not terms:
        return pd.DataFrame(columns=["term", "factor", "contrast", "effect", "lo", "hi", "p", "n"])
    est = stats.interval(np.stack([_contrast(f.cells, at) for *_, at in terms]))
    out = pd.DataFrame([t[:3] for t in terms], columns=["term", "factor", "contrast"])
    out["effect"], out["lo"], out["hi"], out["p"] = est["mean"], est["lo"], est["hi"], est["p_t"]
    out["n"] = f.replicates
    return out
