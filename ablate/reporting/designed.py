"""The report of a designed sweep (`design:`): what was run, analysed as what it can tell.

A fractional or screening design: the effects of the design's model, fitted by least squares on the cells
coded -1 (the reference level, the baseline's) / +1 (`ablate.evidence.aliasing` picks the estimable terms).
Each complete replicate (a seed every cell has) is fitted alone and each term's estimates are compared over
replicates by the small-sample policy's paired test, as the full grid's effects table is (`effects`), with
one Holm (or BH) family over every term. With fewer than two complete replicates the fit is on cell means and
tested by Lenth's pseudo standard error (`ablate.evidence.lenth`: effect sparsity stands in for replication),
as a screening design of one seed is meant to be read. A main effect is 2 b (mean at the level minus at the
reference), a two-factor interaction 4 b (the effect of one factor at the other's level minus at its
reference), the full grid's contrasts. Every row names what it is confounded with, and the Findings say which
design would tell the confounded terms apart. Crossed axes (`crossed:`) split the cells into strata, each fitted alone.

A one-at-a-time design: each cell's difference to the reference (the sweep's baseline, so the variant
table's paired comparisons), in a paper's ablation layout: the axis moved, from what to what, the change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablate.evidence import pure_error
from ablate.evidence.aliasing import Structure, columns
from ablate.planning.designs import DesignPlan, completions, short
from ablate.reporting import frames, stats
from ablate.reporting.effects import COLUMNS, PAIRED
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table
from ablate.reporting.tables import ci, digits, na_words, num, pvalue


def effects(data: SweepData, plan: DesignPlan, correction: str = "holm") -> pd.DataFrame:
    """One row per estimable term of each stratum (COLUMNS, and `aliases`: what the term is confounded with)."""
    values = frames.replicates(data)
    parts = []
    for stratum in dict.fromkeys(plan.strata.values()):
        cells = values.reindex([v for v, s in plan.strata.items() if s == stratum])
        cells = cells[cells.notna().any(axis=1)]
        if len(cells) > 1:
            parts.append(_fit(data, plan, cells, stratum))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*COLUMNS, "aliases"])
    out["p_adj"] = stats.adjust(out["p"], correction)
    return out[[*COLUMNS, "aliases"]]


def _fit(data: SweepData, plan: DesignPlan, cells: pd.DataFrame, stratum: str) -> pd.DataFrame:
    """The terms of one stratum: `cells` is its measured variants x replicates."""
    s = plan.structure(list(cells.index))
    coded = plan.coded(list(cells.index))
    x = np.column_stack([columns(coded, t) for t in [(), *s.model]])
    scale = np.array([2.0 ** len(t) for t in s.model])[:, None]
    complete = cells.columns[cells.notna().all(axis=0)]
    out = pd.DataFrame({"term": ["main" if len(t) == 1 else "interaction" for t in s.model]})
    given = f" ({stratum})" if stratum else ""
    out["factor"] = [s.chain(t) + given for t in s.model]
    out["contrast"] = [_contrast(plan, t) for t in s.model]
    out["aliases"] = ["; ".join(s.name(a) for a, _ in s.aliases.get(t, [])) for t in s.model]
    if len(complete) >= 2:
        per = np.linalg.lstsq(x, cells[complete].to_numpy(), rcond=None)[0][1:] * scale
        est = stats.paired(per, design=data.design, effect=False)
        for col in ("lo", "hi", "p", "test", "why"):
            out[col] = est[col]
        out["effect"], out["n"], out["df"], out["sd"] = est["mean"], len(complete), len(complete) - 1, est["std"]
    else:
        out["sd"] = np.nan
        weights = np.linalg.pinv(x)[1:] * scale
        out["effect"] = weights @ cells.mean(axis=1).to_numpy()
        error = pure_error.pooled(cells.to_numpy())
        est = stats.unreplicated(out["effect"], weights, cells.notna().sum(axis=1).to_numpy(), data.design.unit, error)
        for col in ("lo", "hi", "p", "test", "why"):
            out[col] = est[col]
        out["n"], out["df"] = len(complete), 0
    out["method"] = PAIRED
    return out


def _contrast(plan: DesignPlan, term: tuple[int, ...]) -> str:
    levels = [plan.factors[i].levels for i in term]
    if len(levels) == 1:
        return f"{levels[0][1]} vs {levels[0][0]}"
    return " x ".join(f"({lv[1]} vs {lv[0]})" for lv in levels)


def table(eff: pd.DataFrame, plan: DesignPlan, data: SweepData, correction: str = "holm") -> Table:
    """The effects of a fractional or screening design, with the design's words in the caption."""
    d = digits(data)
    rows = [[r["factor"], r["contrast"], num(r["effect"], d, True), ci(r["lo"], r["hi"], d, r["why"]),
             pvalue(r["p"]), pvalue(r["p_adj"]), str(r["n"])] for _, r in eff.iterrows()]  # fmt: skip
    s = plan.structure()
    relation = f" Defining relation {s.words_text()}." if s.words else ""
    caption = (f"{plan.title.capitalize()}: {len(plan.runs)} of the full grid's {plan.full} cells.{relation} "
               "Least-squares fit of the main effects and the two-factor interactions the cells tell apart, per "
               "complete replicate; 95% interval and p from the paired test over replicates (n)"
               f"{stats.LENTH_WORDS if (eff['test'] == stats.LENTH).any() else ''}"
               f"{stats.PURE_WORDS if (eff['test'] == stats.PURE).any() else ''}. A term written a = b is their "
               "sum: the design cannot tell them apart; interactions of three or more axes are taken as negligible. "
               f"Main effect = mean {data.metric} at the level minus at the reference (the baseline's); "
               "interaction = effect of the first factor at the second's level minus at its reference. "
               f"{stats.family(int(eff['p_adj'].notna().sum()), correction, 'terms')}."
               + na_words([row[3] for row in rows], "replicate"))  # fmt: skip
    header = ["term (= confounded with)", "contrast", "effect", "95% CI", "p", "p adj.", "n"]
    return Table(caption, header, rows, left=2)


def ablation(table_: pd.DataFrame, plan: DesignPlan, data: SweepData) -> Table | str:
    """A one-at-a-time design as a paper's ablation table: the reference, then each axis moved alone; its Δ are the
    variant table's, so a report whose baseline is another cell (`--baseline`) says so instead."""
    references = {v for v, levels in plan.runs.items() if not any(levels)}  # one per stratum
    if data.baseline is not None and references and data.baseline not in references:
        ref = ", ".join(f"{f.name}={f.levels[0]}" for f in plan.factors)
        return (f"This report's baseline is not the design's reference ({ref}), and each of its cells moves one axis "
                "from that reference only: report without --baseline for the one-axis-at-a-time table.")  # fmt: skip
    d = digits(data)
    names = short([f.name for f in plan.factors])
    rows = []
    for variant, levels in plan.runs.items():
        if variant not in table_.index:
            continue
        r = table_.loc[variant]
        moved = [f"{n}: {f.levels[0]} -> {f.levels[lv]}" for n, f, lv in zip(names, plan.factors, levels) if lv]
        mean = f"{num(r['mean'], d)} ± {num(r['std'], d)}" if r["n"] > 0 else "-"
        within = f" ({plan.strata[variant]})" if plan.strata[variant] else ""
        if not moved:
            rows.append([f"reference{within}", mean, "", "", ""])
            continue
        rows.append([", ".join(moved) + within, mean, num(r["delta"], d, True), ci(r["lo"], r["hi"], d, r["why"]),
                     pvalue(r["p_adj"])])  # fmt: skip
    ref = ", ".join(f"{n}={f.levels[0]}" for n, f in zip(names, plan.factors))
    caption = (f"One axis at a time from the reference ({ref}): each row moves one axis and keeps the rest; Δ to "
               "the reference with its 95% interval and adjusted p, as in the variant table. No interaction is "
               "estimable: a row's Δ is that axis's effect with every other axis at the reference.")  # fmt: skip
    return Table(caption, ["moved", data.metric, "Δ", "95% CI", "p adj."], rows, left=1)


def unseparated(plan: DesignPlan, data: SweepData) -> str | None:
    """What the design could not tell apart, and the design that would (the Findings' line); None if nothing."""
    measured = frames.replicates(data).reindex(list(plan.runs)).dropna(how="all").index
    if len(measured) < 2:
        return None
    s = plan.structure([v for v in measured if plan.strata[v] == plan.strata[measured[0]]])
    if not s.confounded:
        return None
    text = f"Confounded by the design: {'; '.join(s.confounded)}"
    found = [(w, n, x) for w, n, x in completions(plan, list(measured)) if _fewer(x, s)]
    if not found:
        return text + "."
    words, added, _ = found[0]
    return f"{text}. `{words}` adds {added} cells per stratum and tells more of them apart."


def _fewer(x: Structure, s: Structure) -> bool:
    """Whether `x` confounds less than `s`: fewer main effects confounded, then fewer chains."""
    mains = sum(len(t) == 1 for t in x.aliases if t), sum(len(t) == 1 for t in s.aliases if t)
    return (mains[0], len(x.confounded)) < (mains[1], len(s.confounded))
