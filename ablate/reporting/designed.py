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

A screen (Plackett-Burman) fits main effects only; with one seed its unused columns, dummy contrasts
(`ablate.planning.screens`), join the main effects in Lenth's pseudo standard error: only the main effects are
reported and adjusted, the dummies only measure the noise.

A one-at-a-time design: each cell's difference to the reference (the sweep's baseline, so the variant
table's paired comparisons), in a paper's ablation layout: the axis moved, from what to what, the change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablate import evidence
from ablate.evidence import pure_error
from ablate.evidence.aliasing import Structure, Term, columns
from ablate.planning import followup, screens
from ablate.planning.designs import DesignPlan, candidates, short
from ablate.planning.fractions import ROMAN
from ablate.reporting import frames, stats
from ablate.reporting.effects import COLUMNS, LENTH_PSE, PAIRED
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table
from ablate.reporting.tables import EFFECT_HEADER, ci, digits, na_words, num, pvalue

MAX_SAID = 6
"""Main effects whose three-factor aliases a caption lists (the effects CSV's `aliases` lists every one)."""
PURE_ERROR = "cell means, pure error"
"""The `method` of an unreplicated design's rows tested against its reference cell's seeds (`reference_seeds`)."""
UNTESTED = "cell means, no test"
"""The `method` of an unreplicated design's rows that Lenth's test could not read."""


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
    out = pd.DataFrame(
        {"term": ["main" if len(t) == 1 else "interaction" for t in s.model], "t": np.nan, "screen": "", "terms": 0}
    )
    given = f" ({stratum})" if stratum else ""
    partial = plan.kind == "screening" and not s.regular  # a chain of every partial loading would fill the row
    out["factor"] = [(s.name(t) if partial else s.chain(t)) + given for t in s.model]
    out["contrast"] = [_contrast(plan, t) for t in s.model]
    out["aliases"] = ["; ".join([*(s.name(a) + (f" ({w:+.2g})" if partial else "") for a, w in s.aliases.get(t, [])),
                                 *(f"{x} (three-factor, assumed zero)" for x in _threes(s, t))])
                      for t in s.model]  # fmt: skip
    if len(complete) >= 2:
        per = np.linalg.lstsq(x, cells[complete].to_numpy(), rcond=None)[0][1:] * scale
        est = stats.paired(per, replicates=data.replicates, effect=False)
        for col in ("lo", "hi", "p", "test", "why"):
            out[col] = est[col]
        out["effect"], out["n"], out["df"], out["sd"] = est["mean"], len(complete), len(complete) - 1, est["std"]
    else:
        out["sd"] = np.nan
        dummies = plan.dummies(list(cells.index))
        if dummies is not None:  # a whole screen: its dummy contrasts, on the main effects' scale, measure the noise
            x, scale = np.column_stack([x, dummies]), np.vstack([scale, np.full((dummies.shape[1], 1), 2.0)])
        weights = np.linalg.pinv(x)[1:] * scale
        every = weights @ cells.mean(axis=1).to_numpy()
        counts = cells.notna().sum(axis=1).to_numpy()
        error = pure_error.pooled(cells.to_numpy())
        est = stats.unreplicated(every, weights, counts, data.replicates.unit, stratum or "every cell", error)
        out["effect"] = every[: len(s.model)]
        for col in ("lo", "hi", "p", "test", "why", "t", "screen", "terms"):
            out[col] = est[col].to_numpy()[: len(s.model)]
        out["n"], out["df"] = len(complete), 0
    if len(complete) >= 2:
        out["method"] = PAIRED
    else:
        tests = out["test"].to_numpy()
        out["method"] = np.select([tests == stats.LENTH, tests == stats.PURE], [LENTH_PSE, PURE_ERROR], UNTESTED)
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
    lenth = (eff["test"] == stats.LENTH).any()
    model = _screened(s) if plan.kind == "screening" else "the two-factor interactions the cells tell apart"
    caption = (f"{plan.title[:1].upper()}{plan.title[1:]}: {len(plan.runs)} of the full grid's {plan.full} cells."
               f"{relation}{_assumed(s)} Least-squares fit of the main effects and {model}, per complete replicate; "
               "95% interval and p from the paired test over replicates (n)"
               f"{stats.LENTH_WORDS if lenth else ''}{stats.PURE_WORDS if (eff['test'] == stats.PURE).any() else ''}."
               f"{_dummy_words(plan, data) if lenth else ''} "
               "A term written a = b is their "
               "sum: the design cannot tell them apart; interactions of three or more axes are taken as negligible. "
               f"Main effect = mean {data.metric} at the level minus at the reference (the baseline's); "
               "interaction = effect of the first factor at the second's level minus at its reference. "
               f"{stats.family(int(eff['p_adj'].notna().sum()), correction, 'terms')}."
               + na_words([row[3] for row in rows], "replicate"))  # fmt: skip
    header = ["term (= confounded with)", "contrast", EFFECT_HEADER, "95% CI", "p", "p adj.", "n"]
    return Table(caption, header, rows, left=2)


def _threes(s: Structure, term: tuple[int, ...]) -> list[str]:
    """The three-factor interactions a main effect of a resolution IV fraction is confounded with (each word of
    four switches through it, less the switch): the fit takes them as zero."""
    if s.resolution != 4 or len(term) != 1:
        return []
    return [s.name(tuple(j for j in w if j != term[0])) for w in s.words if len(w) == 4 and term[0] in w]


def _assumed(s: Structure) -> str:
    """The warning the main effects of a resolution IV fraction carry, in one sentence of the caption."""
    said = [f"{s.name(t)} with {' and '.join(x)}" for t in s.model if (x := _threes(s, t))]
    if not said:
        return ""
    more = f"; and {len(said) - MAX_SAID} more" if len(said) > MAX_SAID else ""
    return (f" Resolution {ROMAN[4]}: main effects are confounded with three-factor interactions "
            f"({'; '.join(said[:MAX_SAID])}{more}), assumed zero: where one is not, that main effect is wrong (a "
            "fold-over or resolution V tells them apart).")  # fmt: skip


def _screened(s: Structure) -> str:
    """What a screen's fit leaves out, in the caption's words (`ablate.planning.screens`)."""
    partial = (f": each two-factor interaction loads {screens.loadings_text(s)} on the main effects outside it, "
               "taken as negligible") if not s.regular and s.aliases else ""  # fmt: skip
    return f"nothing else (a screen estimates no interaction{partial})"


def _dummy_words(plan: DesignPlan, data: SweepData) -> str:
    """The caption's sentence on a screen's dummy contrasts, where Lenth's test read them: every stratum's cells
    all measured (`DesignPlan.dummies`); '' otherwise."""
    spare = len(plan.screen[0]) - len(plan.factors) if plan.screen else 0
    measured = frames.replicates(data).reindex(list(plan.runs)).dropna(how="all").index
    strata = [[v for v in measured if plan.strata[v] == x] for x in dict.fromkeys(plan.strata.values())]
    if not spare or any(plan.dummies(cells) is None for cells in strata):
        return ""
    k = len(plan.factors)
    return (f" The screen's {spare} unused column{'' if spare == 1 else 's'} (dummy contrasts: noise where "
            f"interactions are negligible) join{'s' if spare == 1 else ''} its {k} main effects in Lenth's pseudo "
            f"standard error ({k + spare} contrasts); only the main effects are reported and adjusted.")  # fmt: skip


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


def unseparated(plan: DesignPlan, data: SweepData, eff: pd.DataFrame | None = None) -> str | None:
    """What the design could not tell apart and the follow-up that would (the Findings' line; None if nothing):
    where an effect `eff` decided is confounded, up to three-factor interactions, the follow-up adding the fewest
    cells that clears every such effect (of two-factor interactions first, `ablate.planning.followup`), as the edit
    to make; else the one that confounds less."""
    measured = frames.replicates(data).reindex(list(plan.runs)).dropna(how="all").index
    if len(measured) < 2:
        return None
    stratum = plan.strata[measured[0]]
    variants = [v for v in measured if plan.strata[v] == stratum]
    coded, s = plan.coded(variants), plan.structure(variants)  # a screen's: main effects only
    names = short([f.name for f in plan.factors])
    unclear = {t: said for t in _active(s, eff, stratum) if (said := followup.confounded(coded, t, names))}
    if not s.confounded and not unclear:
        return None
    text = f"Confounded by the design: {_chains(plan, s)}. " if s.confounded else ""
    found = followup.options(coded, [f.name for f in plan.factors], names, candidates(len(plan.factors)))
    if unclear:
        chains = "; ".join(" = ".join([s.name(t), *said]) for t, said in unclear.items())
        one = len(unclear) == 1
        head = (f"{' and '.join(s.name(t) for t in unclear)} {'is' if one else 'are'} decided and confounded "
                f"({chains}), so which term of {'its chain' if one else 'each chain'} is active the design cannot "
                "tell")  # fmt: skip
        picked = followup.clearing(found, coded, list(unclear), names)
        if picked is None:
            k = len(plan.factors)  # above FULL_MAX: the full grid, which separates everything, is not weighed
            return (f"{text}{head}: no fold-over or fraction weighed separates {'it' if one else 'them'}, the full "
                    f"grid ({2**k} cells) would.")  # fmt: skip
        o, wide = picked
        of = "every interaction of up to three switches" if wide else "every two-factor interaction"
        return (f"{text}{head}: {_edit(o, plan)} ({o.added} more cells per stratum, the only ones a launch trains; the "
                f"report then reads all {len(o.coded)} as one design, where {'it is' if one else 'they are'} clear "
                f"of {of}).")  # fmt: skip
    less = followup.lessening(found, s)
    if less is None:
        return text.rstrip()
    return f"{text}To tell more of them apart, {_edit(less, plan)} ({less.added} more cells per stratum)."


def _edit(o: followup.Option, plan: DesignPlan) -> str:
    """The edit in words: `design: full` replaces the design; a follow-up is added under it, or to the list of
    those it has."""
    if o.edit == followup.FULL:
        return "set `design: full`"
    if plan.followed:
        return f"add `{o.edit}` to the list of the sweep's `design.follow-up`"
    return f"add `follow-up: {o.edit}` under the sweep's `design:`"


def _active(s: Structure, eff: pd.DataFrame | None, stratum: str) -> list[Term]:
    """The terms of `s` whose row of `eff` (of this stratum) its test decided."""
    if eff is None:
        return []
    given = f" ({stratum})" if stratum else ""
    decided = set(eff.loc[eff["p_adj"] < evidence.ALPHA, "factor"])
    return [t for t in s.model if s.chain(t) + given in decided]


def _chains(plan: DesignPlan, s: Structure) -> str:
    """The design's chains in words; a screen's partial aliasing (a chain of every interaction, each with its
    loading, per main effect) summed up instead."""
    if plan.kind != "screening" or s.regular:
        return "; ".join(s.confounded)
    most = max(len(chain) for chain in s.aliases.values())
    return (
        f"each main effect carries {screens.loadings_text(s)} of up to {most} two-factor interactions of the "
        "other switches (partial aliasing)"
    )
