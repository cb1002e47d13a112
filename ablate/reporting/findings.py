"""What a sweep found, in a few lines that open its report: written from the report's own tests (the variant
table's comparisons with the baseline and the effects table, p adjusted as there, intervals and the
small-sample policy's `why`), so the verdict can never disagree with the tables below it.

The lines, in order: every decided comparison and effect with its size, interval and adjusted p; per group the
best variant or the variants it ties with (`ablate.evidence.verdict`, the rule summary.json and the launch summary
follow too); what the sweep could not decide, with the smallest difference its replicates could have
detected (`mdd`) and the seeds that would decide it; and where the policy has no test, the seeds it needs.

The minimum detectable difference of a paired comparison at two-sided level alpha and power 1 - beta is

    MDD(n) = (t_{1 - alpha/2, n - 1} + t_{1 - beta, n - 1}) * SD * sqrt(1/n + ratio)

with SD the standard deviation of the paired differences (pooled over the table's undecided comparisons:
the noise the sweep measured), n the pairs and `ratio` the resampling correction of cross-validation (0 for
seeds). It is the t-test's (Cohen 1988, normal-theory); from EXACT_N to SMALL_N - 1 pairs the policy's test is
the exact sign-flip test, whose power at normal differences is close to the t's, and the same formula is used.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate import evidence
from ablate.evidence.verdict import Verdict
from ablate.reporting import frames, stats, tables
from ablate.reporting.effects import PAIRED, Factorial
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table
from ablate.spec.schema import MAX_SEEDS

POWER = 0.8
"""1 - beta of the minimum detectable difference: the conventional 80%."""
SHOWN = 6
"""Decided comparisons and effects listed by name; the rest are counted (the tables list them all)."""
DECIDED, BEST, TIED, OPEN, NO_TEST = "decided", "best", "tied", "not decided", "no test"
CONFOUNDED = "confounded"
"""What a fractional or screening design could not tell apart (`ablate.reporting.designed.unseparated`)."""


@dataclass(frozen=True)
class Finding:
    """One line of the Findings block: what kind of statement it is and the statement."""

    kind: str
    """DECIDED, BEST, TIED, OPEN, NO_TEST or CONFOUNDED."""
    text: str


def mdds(sd: float, n: np.ndarray, ratio: float = 0.0, alpha: float = evidence.ALPHA) -> np.ndarray:
    """The minimum detectable difference (module docstring) of n paired differences with standard deviation `sd`,
    for each n (at least 2) of `n`, at two-sided level `alpha`."""
    q = sps.t.ppf(1 - alpha / 2, n - 1) + sps.t.ppf(POWER, n - 1)
    out: np.ndarray = q * sd * np.sqrt(1 / n + ratio)
    return out


def mdd(sd: float, n: int, ratio: float = 0.0, alpha: float = evidence.ALPHA) -> float:
    """`mdds` of one n; NaN below two pairs."""
    return float(mdds(sd, np.array([n]), ratio, alpha)[0]) if n >= 2 else math.nan


def seeds_needed(sd: float, target: float, ratio: float = 0.0) -> int | None:
    """The fewest pairs (at least EXACT_N, the fewest the policy tests) whose MDD reaches `target`; None when no
    sweep could (over MAX_SEEDS, or never under cross-validation's floor sqrt(ratio) SD)."""
    n = np.arange(evidence.EXACT_N, MAX_SEEDS + 1)
    reach = np.flatnonzero(mdds(sd, n, ratio) <= target)
    return int(n[reach[0]]) if len(reach) else None


@dataclass(frozen=True)
class _Row:
    """A comparison or effect of the report's tables, as the Findings read it."""

    name: str
    size: float
    r: pd.Series
    """Its table row: lo, hi, p_adj, why, test."""
    sd: float
    """The SD of its paired differences (NaN where its test gives none to read: sign-flip or pooled effects)."""
    n: int


def findings(
    data: SweepData, table: pd.DataFrame, fac: Factorial | None, eff: pd.DataFrame | None, won: dict[str, Verdict]
) -> list[Finding]:
    """The Findings of one sweep from its variant table, factorial parts and effects table (None without one:
    of one factor only, its effects are the variant table's comparisons and are left out; `fac` None with an
    effects table: a design's, `ablate.reporting.designed`) and best-or-tied
    verdicts per group (`tables.verdicts`)."""
    d, unit = tables.digits(data), " points" if tables.digits(data) == 2 and data.higher else ""
    compared = table[table["ref"].notna() & ~table["is_baseline"] & (table["pairs"] > 0)]
    labels = table["label"]
    values = frames.replicates(data)
    diffs = values.loc[compared.index].to_numpy() - values.reindex(index=compared["ref"]).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one pair: no SD, NaN
        sds = np.nanstd(diffs, axis=1, ddof=1) if len(compared) else np.array([])
    rows = [_Row(f"{labels[v]} vs {labels[r['ref']]}", r["delta"], r, float(sd), int(r["pairs"]))
            for (v, r), sd in zip(compared.iterrows(), sds)]  # fmt: skip
    if eff is not None and (fac is None or any(len(part.factors) > 1 for part in fac.parts)):
        rows += [_Row(_term(e), e["effect"], e, _effect_sd(e, data.design.ratio), int(e["n"]))
                 for _, e in eff.iterrows()]  # fmt: skip
    decided = [x for x in rows if x.r["p_adj"] < evidence.ALPHA]
    out = [Finding(DECIDED, _decided(x, d, unit, data.higher)) for x in decided[:SHOWN]]
    if len(decided) > SHOWN:
        out.append(Finding(DECIDED, f"and {len(decided) - SHOWN} more significant differences (tables below)."))
    several = len(won) > 1
    for group, v in won.items():
        if v.p_adj:
            out.append(_verdict(group if several else "", v, labels))
    undecided = [x for x in rows if x.r["p_adj"] >= evidence.ALPHA]
    if undecided:
        out.append(Finding(OPEN, _open(undecided, data, d, unit)))
    untested = compared[compared["why"] != ""]
    if len(untested):
        out.append(Finding(NO_TEST, _no_test(untested, labels, data)))
    if not out:
        base = data.baseline
        why = ("no baseline" if base is None or base not in table.index else "the baseline has no results"
               if table.loc[base, "n"] == 0 else "no variant but the baseline has results")  # fmt: skip
        out.append(Finding(NO_TEST, f"Nothing compared: {why}, and fewer than two measured variants per group."))
    return out


def _effect_sd(e: pd.Series, ratio: float) -> float:
    """The SD of an effect's per-replicate contrasts, read back from its t interval (half-width = t_{1-alpha/2,
    n-1} SD sqrt(1/n + ratio)); NaN for sign-flip and pooled-variance effects, whose intervals are not that."""
    if e["method"] != PAIRED or e["test"] not in (stats.T_TEST, stats.CORRECTED):
        return math.nan
    half = (e["hi"] - e["lo"]) / 2
    return float(half / sps.t.ppf(1 - evidence.ALPHA / 2, e["n"] - 1) / math.sqrt(1 / e["n"] + ratio))


def block(found: list[Finding]) -> Table:
    """The Findings as a table of the report's render machinery (it heads the report)."""
    caption = (f"From the tables below: Δ with its 95% interval and p adjusted as there (α = {evidence.ALPHA:.2f}); "
               "best = significantly better than every other variant of its group, else tied with those it is not; "
               "MDD: docs/concepts/statistics.md.")  # fmt: skip
    return Table(caption, ["", "finding"], [[f.kind, f.text] for f in found], left=2)


def _term(e: pd.Series) -> str:
    return f"{e['factor']}: {e['contrast']}" if e["term"] == "main" else f"{e['factor']} interaction: {e['contrast']}"


def _size(x: _Row, d: int, unit: str) -> str:
    return f"{tables.num(x.size, d, True)}{unit} {tables.ci(x.r['lo'], x.r['hi'], d, x.r['why'])}"


def _decided(x: _Row, d: int, unit: str, higher: bool) -> str:
    """ "stack: pure beats alternating by +10.82 points [+8.97, +12.66], p adj < 0.001"."""
    p = tables.pvalue(x.r["p_adj"])
    adj = f"p adj {p.replace('<', '< ')}" if p.startswith("<") else f"p adj = {p}"
    if " vs " not in x.name or "interaction" in x.name:
        return f"{x.name}: {_size(x, d, unit)}, {adj}."
    head, _, ref = x.name.rpartition(" vs ")
    verb = "beats" if (x.size > 0) == higher else "trails"
    return f"{head} {verb} {ref} by {_size(x, d, unit)}, {adj}."


def _verdict(group: str, v: Verdict, labels: pd.Series) -> Finding:
    where = f"{group}: " if group else ""
    if v.significant:
        return Finding(BEST, f"{where}{labels[v.best]} is better than every other variant (largest p adj "
                             f"{tables.pvalue(v.largest)}; each test in Best or tied).")  # fmt: skip
    largest = "no test for some pair" if math.isnan(v.largest) else f"largest p adj {tables.pvalue(v.largest)}"
    tied = " / ".join(labels[x] for x in v.tied)
    return Finding(
        TIED,
        f"{where}{tied}: the best mean is not significantly better than the others listed ({largest}). Tied "
        "is not equivalent: Best or tied gives each difference's interval and the smallest one its replicates could "
        "detect (MDD).",
    )


def _open(undecided: list[_Row], data: SweepData, d: int, unit: str) -> str:
    """What could not be decided, each with the MDD of its replicates at the SD they measured, and what to run
    to decide the one nearest to it (the largest |Δ| / MDD)."""
    ratio, word = data.design.ratio, data.design.unit
    floors = [mdd(x.sd, x.n, ratio) for x in undecided]
    listed = "; ".join(f"{x.name} {_size(x, d, unit)}, p adj = {tables.pvalue(x.r['p_adj'])}"
                       + ("" if math.isnan(m) else f", MDD {tables.num(m, d)} (SD {tables.num(x.sd, d + 1)}, {x.n} "
                          f"{word}s)") for x, m in zip(undecided[:SHOWN], floors))  # fmt: skip
    more = f"; and {len(undecided) - SHOWN} more" if len(undecided) > SHOWN else ""
    text = (f"{listed}{more}. MDD: the smallest difference those {word}s could detect at the SD of the paired "
            f"differences they measured ({POWER:.0%} power)")  # fmt: skip
    measured = [(abs(x.size) / m, x, m) for x, m in zip(undecided, floors) if m > 0]
    if not measured:
        return f"{text}."
    _, x, floor = max(measured, key=lambda t: t[0])
    target = abs(x.size)
    need = seeds_needed(x.sd, target, ratio)
    if need is None:
        return f"{text}; no feasible number of {word}s detects |Δ| = {tables.num(target, d)} ({x.name})."
    if need <= x.n:
        return f"{text}; {x.name}: |Δ| is above its MDD, undecided after the adjustment over the table."
    return (f"{text}. To decide {x.name} (|Δ| = {tables.num(target, d)}): about {need} {word}s, or adaptive seeds "
            f"`seeds: {{min: {x.n}, max: {need}, threshold: {tables.num(floor, d)}}}`.")  # fmt: skip


def _no_test(untested: pd.DataFrame, labels: pd.Series, data: SweepData) -> str:
    """Comparisons the small-sample policy gives no test, why (`evidence.why`), and the replicates a test needs
    where they are too few."""
    word = data.design.unit
    listed = "; ".join(f"{labels[v]} vs {labels[r['ref']]} ({r['why']})" for v, r in untested.head(SHOWN).iterrows())
    more = f"; and {len(untested) - SHOWN} more" if len(untested) > SHOWN else ""
    if not untested["why"].str.contains("needs").any():
        return f"{listed}{more}: no spread to test."
    exact = f"{evidence.EXACT_N} {word}s for the exact sign-flip test (`seeds: {evidence.EXACT_N}`)"
    need = (
        f"{exact}, {evidence.SMALL_N} for a t-test"
        if data.design.exchangeable
        else f"{evidence.SMALL_N} {word} differences for a t-test"
    )
    return f"{listed}{more}: too few for any test of the small-sample policy, which needs {need}."
