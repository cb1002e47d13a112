"""The Syn paper's own tables, computed from a sweep's trials: the section Syn adds to the report of every sweep
that uses it (registered in `ablate.nn.mechanisms.syn`).

A setting is what the paper holds fixed while it varies the iterations I: the variant's group (backbone and
dataset) and every other axis of the sweep. Per setting: the Syn variants with the top and the bottom mean and
their I (Table 4), the average rank of concentration (I > 0) against distraction (I < 0) (Table 5), the drop in
the metric when Syn (I = 0) or SynPooling (`model.pool: mean`) is ablated from the top-mean variant (Table 3), and
the minimum winner-transfer rate over epochs under concentration and distraction (Fig. 6).

"Top mean" is the highest mean (the lowest where lower is better), picked untested as the paper picks its winners:
the report's "best" is a variant significantly better than every other, which these tables never claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ablate.components import Table

if TYPE_CHECKING:
    from ablate.components import Block
    from ablate.reporting.sections import SweepResults

STEPS, KIND, POOL = "attention.steps", "attention.kind", "model.pool"
WINNER = "diag.winner_transfer"
MODES = {"concentration": "I > 0", "none": "I = 0", "distraction": "I < 0"}
SIGN = {"concentration": 1, "none": 0, "distraction": -1}
"""The sign of I in each mode."""


def paper_tables(results: SweepResults) -> list[Block]:
    """The four tables; a sentence instead of each where the sweep lacks what it needs."""
    cells = settings(results)
    syn = cells[(cells[KIND] == "syn") & (cells[POOL] == "attention") & cells["mean"].notna()]
    if syn.empty:
        return ["No Syn variant has a result yet."]
    by = syn.groupby("setting", sort=False)["mean"]
    top = syn.loc[by.idxmax() if results.data.higher else by.idxmin()]  # the first of a tie, in the table's order
    return [extremes(syn, results), ranks(syn, results), ablation(cells, top, results),
            transfer(syn, top, results)]  # fmt: skip


def settings(results: SweepResults) -> pd.DataFrame:
    """Per variant: I, kind, pooling, its metric's mean, std and n, and `setting` (its group and the values
    of every axis but I, the mechanism, the pooling and the replicates: two datasets or two `data.*` options
    are two settings), in the variant table's order."""
    cells = results.cells([STEPS, KIND, POOL])
    cells[POOL] = cells[POOL].fillna("attention")
    others = [a for a in results.data.axes if a not in (STEPS, KIND, POOL)]  # replicates are not axes
    extra = results.data.variants.loc[cells.index, [f"axis.{a}" for a in others]].astype(str)
    words = [", ".join(f"{a}={v}" for a, v in zip(others, row)) for row in extra.itertuples(index=False)]
    cells["setting"] = [f"{g} ({w})" if w else g for g, w in zip(cells["group"], words)]
    return cells


def _steps(values: pd.Series) -> str:
    return ", ".join(str(int(i)) for i in values)


def extremes(syn: pd.DataFrame, results: SweepResults) -> Table:
    """Table 4: per setting, the top and bottom mean and the I that gave them (ties list every I)."""
    d = results.digits()
    rows, top_by, bottom_by = [], {"distraction": 0, "concentration": 0}, {"distraction": 0, "concentration": 0}
    for setting, g in syn.groupby("setting", sort=False):
        hi, lo = (g["mean"].max(), g["mean"].min()) if results.data.higher else (g["mean"].min(), g["mean"].max())
        top, bottom = g[g["mean"] == hi], g[g["mean"] == lo]
        for counts, chosen in ((top_by, top), (bottom_by, bottom)):
            for mode in counts:
                counts[mode] += bool((np.sign(chosen[STEPS]) == SIGN[mode]).any())
        rows.append([setting, _cell(top.iloc[0], d, results), _steps(top[STEPS]), _cell(bottom.iloc[0], d, results),
                     _steps(bottom[STEPS]), _steps(g[STEPS].sort_values())])  # fmt: skip
    k = len(rows)
    order = "highest" if results.data.higher else "lowest"
    caption = (
        f"Top and bottom mean {results.data.metric} per setting over the Syn iterations I tried (> 0 concentrate, "
        f"< 0 distract, 0 none), mean ± std over the replicates, as the Syn paper's Table 4 (top: the {order} "
        f"mean). The top mean comes from distraction in {top_by['distraction']} of {k} settings and from "
        f"concentration in {top_by['concentration']}; the bottom from distraction in {bottom_by['distraction']} "
        f"and from concentration in {bottom_by['concentration']}. Both are picked by the mean alone, as the paper "
        "picks its winners, untested: a top mean is no evidence that its I is better (the variant table tests each I "
        "against the baseline)."
    )
    return Table(caption, ["setting", "top mean", "I", "bottom mean", "I", "I tried"], rows, left=1)


def _cell(r: pd.Series, d: int, results: SweepResults) -> str:
    mean = results.num(r["mean"], d)
    return f"{mean} ± {results.num(r['std'], d)}" if pd.notna(r["std"]) else mean


def ranks(syn: pd.DataFrame, results: SweepResults) -> Table:
    """Table 5: per setting, every Syn variant ranked by its mean (1 = the top mean, ties share the average rank), and
    the average rank of the concentrating and of the distracting ones."""
    rows = []
    for setting, g in syn.groupby("setting", sort=False):
        rank = g["mean"].rank(ascending=not results.data.higher, method="average")
        by = np.sign(g[STEPS])
        cells = [f"{rank[by == s].mean():.2f} (of {int((by == s).sum())})" if (by == s).any() else "-"
                 for s in (SIGN["concentration"], SIGN["distraction"], SIGN["none"])]  # fmt: skip
        rows.append([setting, *cells, str(len(g))])
    caption = (
        f"Average rank of concentration (I > 0) and distraction (I < 0) per setting, as the Syn paper's Table 5: "
        f"the Syn variants are ranked by mean {results.data.metric} (1 = the top mean, ties share their average "
        "rank) and each mode's ranks averaged (in parentheses: how many of its I); smaller is better."
    )
    return Table(caption, ["setting", "concentration", "distraction", "I = 0", "ranked"], rows, left=1)


def ablation(cells: pd.DataFrame, top: pd.DataFrame, results: SweepResults) -> Table | str:
    """Table 3: per setting, the top-mean Syn variant minus the same setting without Syn (I = 0, Syn's own
    pooling) and without SynPooling (mean pooling), paired over the replicates both have."""
    values = results.replicates()
    pairs: list[tuple[str, str, str, str]] = []
    for variant, r in top.iterrows():
        same = cells[cells["setting"] == r["setting"]]
        without_syn = same[(same[KIND] == "syn") & (same[POOL] == "attention") & (same[STEPS] == 0)]
        without_pool = same[same[POOL] == "mean"]
        for what, rest in (("Syn (I = 0)", without_syn), ("SynPooling (mean pooling)", without_pool)):
            if len(rest) and rest.index[0] != variant:
                pairs.append((str(r["setting"]), what, str(variant), str(rest.index[0])))
    if not pairs:
        return (
            "No ablated cell beside the top-mean Syn variant: the Syn paper's Table 3 needs a cell with I = 0 (Syn "
            "ablated) or with model.pool: mean (SynPooling ablated) in that variant's setting."
        )
    diffs = np.stack([values.loc[a].to_numpy() - values.loc[b].to_numpy() for _, _, a, b in pairs])
    test = results.paired(diffs).rename(columns={"n": "pairs", "mean": "delta"})
    test["below_floor"] = False
    d, unit = results.digits(), results.data.replicates.unit
    rows = [[setting, what, f"I = {int(cells.loc[a, STEPS])}", results.difference(test.iloc[i], d),
             results.pvalue(test.iloc[i]["p_adj"])] for i, (setting, what, a, _) in enumerate(pairs)]  # fmt: skip
    caption = (
        f"Drop in {results.data.metric} when Syn or SynPooling is ablated from the setting's top-mean Syn variant, "
        f"as the Syn paper's Table 3: top minus ablated, paired over the {unit}s both have, with a 95% interval "
        f"(positive: the ablated part helps). {results.starred(len(pairs), 'ablations')}"
        + results.na_words([row[3] for row in rows])
    )
    return Table(caption, ["setting", "ablated", "top mean", "drop [95% CI]", "p adj."], rows, left=3)


def transfer(syn: pd.DataFrame, top: pd.DataFrame, results: SweepResults) -> Table | str:
    """Fig. 6: per setting, each trial's lowest winner-transfer rate over its epochs, averaged over the trials
    of each mode (and of the top-mean variant)."""
    m = results.metrics([WINNER])
    if m.empty:
        return (
            "No winner-transfer rates recorded: the Syn paper's Fig. 6 needs the attention diagnostics "
            "(train.diagnostics: true)."
        )
    lowest = m.groupby(["key", "variant"], observed=True)["value"].min().reset_index()
    per_variant = lowest.groupby("variant")["value"].agg(["mean", "count"])
    rows = []
    for setting, g in syn.groupby("setting", sort=False):
        mode = np.sign(g[STEPS]).map({sign: name for name, sign in SIGN.items()})
        cells = []
        for name in MODES:
            rates = lowest[lowest["variant"].isin(g.index[mode == name])]["value"]
            cells.append(f"{100 * rates.mean():.1f}% ({len(rates)})" if len(rates) else "-")
        chosen = top.index[top["setting"] == setting][0]
        at_top = per_variant["mean"].get(chosen)
        at = f"{100 * at_top:.1f}% (I = {int(g.loc[chosen, STEPS])})" if at_top is not None else "-"
        rows.append([setting, *cells, at])
    caption = (
        "Minimum winner-transfer rate per setting, as the Syn paper's Fig. 6: each trial's lowest share of "
        "queries whose arg-max key changed from one epoch to the next, averaged over the trials of each mode "
        "(in parentheses: how many trials) and of the top-mean variant. The paper relates a higher minimum "
        "transfer rate under distraction (attention that keeps moving to other instances) to its top results."
    )
    return Table(caption, ["setting", *(f"{k} ({v})" for k, v in MODES.items()), "top-mean variant"], rows, left=1)
