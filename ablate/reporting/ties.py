"""The tests behind best or tied (`ablate.evidence.verdict`): each variant of a group against the group's best mean,
one row each, so that the Findings' best/tied line and the bold cell can be checked against numbers.

A row holds Δ = best - variant over the replicates both have, with the interval and test the small-sample policy
gives those pairs (`stats.paired`: the p `verdict.p_value` takes), the p adjusted over the group's m comparisons
(the verdict's own), and the pairs' minimum detectable difference (`advice.mdd`: 80% power at the SD of their
differences) at level α/m: the level one comparison must reach on its own under either correction (Holm's first
step, Benjamini-Hochberg's strictest). Where the exact sign-flip test cannot reach α/m at all (its smallest p,
2/2^n, is not below it) no difference is detectable at these pairs: no MDD.

Tied is not equivalent: a tie says the replicates do not show the best better, not that the variants are the same.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ablate import evidence
from ablate.evidence.verdict import Verdict
from ablate.reporting import advice, frames, stats, tables
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table

TIED, WORSE = "tied", "worse than the best"
"""A row's verdict: tied with the best, or significantly worse than it."""


def against_best(data: SweepData, won: dict[str, Verdict]) -> pd.DataFrame:
    """Per group with a comparison, the best (`variant` == `best`, first) and each other variant against it: group,
    best, variant, mean, pairs, delta (best - variant), lo, hi, p, test, why, p_adj (the verdict's), sd (of the
    paired differences), k (the group's comparisons with a test), level (α/m), mdd (inf where no pair count of the
    exact test reaches the level) and verdict (TIED, WORSE or "" for the best)."""
    values = frames.replicates(data)
    parts = []
    for group, v in won.items():
        if not v.p_adj:
            continue
        others = list(v.p_adj)
        test = stats.paired(values.loc[[v.best] * len(others)].to_numpy() - values.loc[others].to_numpy(),
                            replicates=data.replicates, effect=False)  # fmt: skip
        k = sum(not math.isnan(p) for p in v.p_adj.values())
        level = advice.level(k)
        part = pd.DataFrame({"group": group, "best": v.best, "variant": others, "mean": [v.means[o] for o in others],
                             "pairs": test["n"], "delta": test["mean"], "lo": test["lo"], "hi": test["hi"],
                             "p": test["p"], "test": test["test"], "why": test["why"],
                             "p_adj": [v.p_adj[o] for o in others], "sd": test["std"], "k": k,
                             "level": level})  # fmt: skip
        # NaN without a test; inf where the exact test cannot reach the level at these pairs (module docstring)
        mdd = advice.mdds(test["std"].to_numpy(), test["n"].to_numpy(), level, data.replicates)
        part["mdd"] = np.where((test["test"] != "").to_numpy(), mdd, math.nan)
        part["verdict"] = [TIED if o in v.tied else WORSE for o in others]
        head = {"group": group, "best": v.best, "variant": v.best, "mean": v.means[v.best], "verdict": ""}
        parts.append(pd.concat([pd.DataFrame([head]), part], ignore_index=True))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def table(frame: pd.DataFrame, data: SweepData, correction: str) -> Table:
    """The best-against-others rows as the report's table, grouped like the variant table."""
    d, labels, unit = tables.digits(data), data.variants["label"], data.replicates.unit
    rows = []
    for r in frame.to_dict("records"):
        name = labels.get(r["variant"], r["variant"])
        if r["variant"] == r["best"]:
            rows.append([name, tables.num(r["mean"], d), "", "best mean", "", "", "", ""])
            continue
        p = f"{tables.pvalue(r['p'])} {tables.TESTS.get(r['test'], '')}".strip()
        rows.append([name, tables.num(r["mean"], d), str(int(r["pairs"])), tables.difference(r, d, marked=False), p,
                     tables.pvalue(r["p_adj"]), _mdd_cell(r, d), r["verdict"]])  # fmt: skip
    ks = "/".join(str(int(k)) for k in sorted(set(frame["k"].dropna())))
    unreachable = frame[np.isinf(frame["mdd"].astype(float))]
    none = (f" none: at {'/'.join(str(int(n)) for n in sorted(set(unreachable['pairs'])))} pairs the exact "
            f"sign-flip test's smallest p, 2/2^n, is not below α/m: no difference is detectable."
            if len(unreachable) else "")  # fmt: skip
    caption = (
        f"Best or tied, per group: each variant against the variant with the best mean (first row) over the "
        f"{unit}s both have ({'higher' if data.higher else 'lower'} is better). Δ = best - variant with its 95% "
        f"interval; p: {tables.test_words(data)}. p adj.: {stats.CORRECTIONS[correction]} over the group's m "
        f"comparisons with the best (m = {ks}): the best is significantly better than every other variant when "
        f"every adjusted p is below α = {evidence.ALPHA:.2f} with Δ in its favour (its {data.metric} is then bold "
        f"in the variant table); otherwise it is tied with each variant it does not beat (the Findings' best/tied "
        f"line). MDD: the smallest |Δ| these pairs would detect with {advice.POWER:.0%} power at the SD of their "
        f"differences, at α/m (the level one comparison reaches alone under Holm's first step, Benjamini-Hochberg's "
        f"strictest).{none} "
        f"Tied is not equivalent: a tie says these {unit}s do not show the best better, not that the variants are the "
        f"same; a difference anywhere in the interval, or below the MDD, is still possible."
        + tables.na_words([row[3] for row in rows], unit)
    )
    header = [
        "Variant", f"{data.metric} (mean)", "pairs", "Δ best - variant [95% CI]", "p (test)", "p adj.", "MDD (SD)",
        "verdict"]  # fmt: skip
    return Table(caption, header, rows, groups=list(frame["group"].astype(str)), left=1)


def _mdd_cell(r: tables.Row, d: int) -> str:
    if math.isnan(r["mdd"]):
        return "-"
    shown = "none" if math.isinf(r["mdd"]) else tables.num(r["mdd"], d)
    return f"{shown} (SD {tables.num(r['sd'], d + 1)})"
