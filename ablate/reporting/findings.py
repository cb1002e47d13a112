"""What a sweep found, in a few lines that open its report: written from the report's own tests (the variant
table's comparisons with the baseline and the effects table, p adjusted as there, intervals and the
small-sample policy's `why`), so the verdict can never disagree with the tables below it.

The lines, in order: every decided comparison and effect with its size, interval and adjusted p; per group the
best variant or the variants it ties with (`ablate.evidence.verdict`, the rule summary.json and the launch summary
follow too); then one line per comparison or effect the sweep could not decide: its minimum detectable difference
and the seed count that would detect its |Δ|, both at the level that decides it in its table's family
(`ablate.reporting.advice`), or, where no feasible count can, what the seeds did establish; a comparison that
adaptive seeding decided says so instead; and where the policy has no test, the seeds it needs. A tuned sweep's
report adds, per pair of tuned arms, where their bands on the median best of n configurations are apart or
that they overlap (`tuned`, from `ablate.reporting.bands`); a sweep over several datasets opens with which arms'
aggregate interval excludes the baseline's (`ablate.reporting.across_datasets.finding`).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate import evidence
from ablate.evidence.verdict import Verdict
from ablate.planning import adaptive
from ablate.reporting import advice, frames, stats, tables
from ablate.reporting.bands import Band, Comparison
from ablate.reporting.effects import Factorial
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table
from ablate.spec.schema import MAX_SEEDS
from ablate.spec.tuning import MAX_BUDGET

SHOWN = 6
"""Decided comparisons and effects listed by name; the rest are counted (the tables list them all)."""
DECIDED, BEST, TIED, OPEN, NO_TEST = "decided", "best", "tied", "not decided", "no test"
ASSUMED = "assumed"
"""What a test rests on that nothing in the sweep measured: Lenth's effect sparsity in place of seed noise."""
ACROSS = "across datasets"
"""Which arms' aggregate over a sweep's datasets differs from the baseline's (`ablate.reporting.across_datasets`)."""
CONFOUNDED = "confounded"
"""What a fractional or screening design could not tell apart (`ablate.reporting.designed.unseparated`)."""


@dataclass(frozen=True)
class Finding:
    """One line of the Findings block: what kind of statement it is and the statement."""

    kind: str
    """DECIDED, BEST, TIED, OPEN, NO_TEST, CONFOUNDED, ACROSS, or the decision adaptive seeding reached (higher, lower,
    equivalent) on a comparison the table's adjusted test left open."""
    text: str


@dataclass(frozen=True)
class _Row:
    """A comparison or effect of the report's tables, as the Findings read it."""

    name: str
    size: float
    r: pd.Series
    """Its table row: lo, hi, p_adj, why, test."""
    sd: float
    """The SD of its paired differences or per-replicate contrasts (NaN for effects of cell means)."""
    n: int
    k: int
    """The size of the family its p is adjusted over (the variant table's tests, or the effects table's)."""
    variant: str = ""
    """The variant a comparison with the sweep's baseline is of (adaptive seeding judged it); else empty."""


def findings(
    data: SweepData,
    table: pd.DataFrame,
    fac: Factorial | None,
    eff: pd.DataFrame | None,
    won: dict[str, Verdict],
    judged: dict[str, adaptive.Verdict] | None = None,
) -> list[Finding]:
    """The Findings of one sweep from its variant table, factorial parts and effects table (None without one:
    of one factor only, its effects are the variant table's comparisons and are left out; `fac` None with an
    effects table: a design's, `ablate.reporting.designed`), best-or-tied verdicts per group (`tables.verdicts`)
    and adaptive seeding's verdicts per variant where the sweep had adaptive seeds (`adaptive.verdicts`)."""
    d, unit = tables.digits(data), " points" if tables.digits(data) == 2 and data.higher else ""
    compared = table[table["ref"].notna() & ~table["is_reference"] & (table["pairs"] > 0)]
    labels = table["label"]
    values = frames.replicates(data)
    diffs = values.loc[compared.index].to_numpy() - values.reindex(index=compared["ref"]).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one pair: no SD, NaN
        sds = np.nanstd(diffs, axis=1, ddof=1) if len(compared) else np.array([])
    k = int(table["p_adj"].notna().sum())
    rows = [_Row(f"{labels[v]} vs {labels[r['ref']]}", r["delta"], r, float(sd), int(r["pairs"]), k,
                 v if r["ref"] == data.baseline else "") for (v, r), sd in zip(compared.iterrows(), sds)]  # fmt: skip
    if eff is not None and (fac is None or any(len(part.factors) > 1 for part in fac.parts)):
        k = int(eff["p_adj"].notna().sum())
        rows += [_Row(_term(e), e["effect"], e, float(e["sd"]), int(e["n"]), k)
                 for _, e in eff.iterrows()]  # fmt: skip
    decided = [x for x in rows if x.r["p_adj"] < evidence.ALPHA]
    out = [Finding(DECIDED, _decided(x, d, unit, data.higher)) for x in decided[:SHOWN]]
    if len(decided) > SHOWN:
        out.append(Finding(DECIDED, f"and {len(decided) - SHOWN} more significant differences (tables below)."))
    several = len(won) > 1
    for group, v in won.items():
        if v.p_adj:
            out.append(_verdict(group if several else "", v, table["mixer"] if several else labels))
    undecided = [x for x in rows if x.r["p_adj"] >= evidence.ALPHA]
    out += [_open(x, data, d, unit, (judged or {}).get(x.variant)) for x in undecided[:SHOWN]]
    if len(undecided) > SHOWN:
        out.append(Finding(OPEN, f"and {len(undecided) - SHOWN} more not decided (tables below)."))
    if eff is not None and (eff["test"] == stats.LENTH).any():
        out.append(Finding(ASSUMED, _sparsity(data)))
    untested = compared[compared["why"] != ""]
    if len(untested):
        out.append(Finding(NO_TEST, _no_test(untested, labels, data, len(compared))))
    if not out:
        base = data.baseline
        why = ("no baseline" if base is None or base not in table.index else "the baseline has no results"
               if table.loc[base, "n"] == 0 else "no variant but the baseline has results")  # fmt: skip
        out.append(Finding(NO_TEST, f"Nothing compared: {why}, and fewer than two measured variants per group."))
    return out


def _sparsity(data: SweepData) -> str:
    """Where Lenth's test decided the effects: one value per cell, so no seed variation was measured; how to measure
    it (a design's reference cell at more seeds, `ablate.evidence.pure_error`; a full grid's more seeds)."""
    if data.trials["seed"].nunique() > 1:
        how = "the trials not done at the other seeds would measure it"
    elif data.design is not None and data.design.two_level:
        how = (f"`reference_seeds: 4` under design.{data.design.kind} runs the reference cell at 3 more seeds and "
               "tests each effect against their spread")  # fmt: skip
    else:
        how = "more seeds measure it: the effects table then compares each effect over them (the paired test)"
    return (f"No seed variation measured: p assumes effect sparsity. With one {data.replicates.unit} per cell, Lenth's "
            f"test takes the smaller effects for noise; {how}.")  # fmt: skip


def block(found: list[Finding]) -> Table:
    """The Findings as a table of the report's render machinery (it heads the report)."""
    caption = (f"From the tables below: Δ with its 95% interval and p adjusted as there (α = {evidence.ALPHA:.2f}); "
               "best = significantly better than every other variant of its group, else tied with those it is not; "
               f"MDD: the smallest |Δ| detected with {advice.POWER:.0%} power at α/m, which decides in a family of m "
               "whatever the other p (docs/concepts/statistics.md).")  # fmt: skip
    return Table(caption, ["", "finding"], [[f.kind, f.text] for f in found], left=2)


def _term(e: pd.Series) -> str:
    return f"{e['factor']}: {e['contrast']}" if e["term"] == "main" else f"{e['factor']} interaction: {e['contrast']}"


def _size(x: _Row, d: int, unit: str) -> str:
    return f"{tables.num(x.size, d, True)}{unit} {tables.ci(x.r['lo'], x.r['hi'], d, x.r['why'])}"


def _said(x: _Row, d: int, unit: str) -> str:
    """The row's name and size; a two-factor interaction in words: "stack x kind: csan vs softmax is 2.08 points
    larger with pure than with alternating (stack) [-1.16, +5.32]"."""
    pair = re.fullmatch(r"(\S+) x (\S+)", str(x.r.get("factor", "")))
    levels = re.fullmatch(r"\((.+) vs (.+)\) x \((.+) vs (.+)\)", str(x.r.get("contrast", "")))
    if x.r.get("term") != "interaction" or pair is None or levels is None or math.isnan(x.size):
        return f"{x.name} {_size(x, d, unit)}"
    (first, second), (a1, a0, b1, b0) = pair.groups(), levels.groups()
    more = "larger" if x.size >= 0 else "smaller"
    return (f"{pair[0]}: {b1} vs {b0} ({second}) is {tables.num(abs(x.size), d)}{unit} {more} with {a1} than with "
            f"{a0} ({first}) {tables.ci(x.r['lo'], x.r['hi'], d, x.r['why'])}")  # fmt: skip


def _adjusted(x: _Row) -> str:
    p = tables.pvalue(x.r["p_adj"])
    return f"p adj {p.replace('<', '< ')}" if p.startswith("<") else f"p adj = {p}"


def _decided(x: _Row, d: int, unit: str, higher: bool) -> str:
    """ "stack: pure beats alternating by +10.82 points [+8.97, +12.66], p adj < 0.001"."""
    if " vs " not in x.name or "interaction" in x.name:
        return f"{_said(x, d, unit)}, {_adjusted(x)}."
    head, _, ref = x.name.rpartition(" vs ")
    verb = "beats" if (x.size > 0) == higher else "trails"
    return f"{head} {verb} {ref} by {_size(x, d, unit)}, {_adjusted(x)}."


def _verdict(group: str, v: Verdict, labels: pd.Series) -> Finding:
    """Best or tied in `group` (said once, first: `labels` are the variants' words within it)."""
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


def _open(x: _Row, data: SweepData, d: int, unit: str, judged: adaptive.Verdict | None) -> Finding:
    """One comparison or effect not decided: its size and adjusted p; its MDD now and the seeds that would detect
    its |Δ|, both at the level that decides it in its family (`advice`), or what its interval established where
    no feasible count can; for a variant adaptive seeding decided against the baseline, that decision."""
    head = f"{_said(x, d, unit)}, {_adjusted(x)}"
    if judged is not None and judged.decision in (adaptive.HIGHER, adaptive.LOWER, adaptive.EQUIVALENT):
        return Finding(judged.decision, f"{head}: not significant after the table's adjustment, but adaptive "
                                        f"seeding found it {judged.reason} (Adaptive seeds, below).")  # fmt: skip
    replicates, word, target = data.replicates, data.replicates.unit, abs(x.size)
    a = advice.level(x.k)
    at = f"α/{x.k} = {a:.3g}" if x.k > 1 else f"α = {a:.3g}"
    bound = max(abs(x.r["lo"]), abs(x.r["hi"]))
    established = (f"at {x.n} {word}s its 95% interval bounds |Δ| by {tables.num(bound, d)}{unit}"
                   if not math.isnan(bound) else "")  # fmt: skip
    if math.isnan(x.sd):
        return Finding(OPEN, f"{head}; {established}." if established else f"{head}.")
    now = advice.mdd(x.sd, x.n, a, replicates)
    if math.isinf(now):
        said = (f"{x.n} {word}s can decide nothing at {at} (the sign-flip test's smallest p is "
                f"{2 / 2**x.n:.3g})")  # fmt: skip
    else:
        said = f"MDD {tables.num(now, d)}{unit} at {at} ({x.n} {word}s, SD {tables.num(x.sd, d + 1)})"
    need = advice.needed(x.sd, target, x.k, x.n, replicates)
    if need is not None:
        seeds = replicates.folds is None
        runs = f"{need.runs} seeds" if seeds else f"{need.runs} repeats of the {replicates.folds}-fold split"
        return Finding(OPEN, f"{head}. {said}; about {runs} would detect |Δ| = {tables.num(target, d)}"
                             f"{' (`seeds: ' + str(need.runs) + '`)' if seeds else ''}.")  # fmt: skip
    least = advice.floor(x.sd, a, replicates)
    if replicates.folds is not None and least >= target:
        why = (f"more repeats cannot detect |Δ| = {tables.num(target, d)}: at this SD the MDD never falls below "
               f"{tables.num(least, d)}{unit}, only less noisy folds (more data per fold) lower it")  # fmt: skip
    else:
        runs = "seeds" if replicates.folds is None else "repeats"
        why = f"no feasible number of {runs} (up to {MAX_SEEDS}) detects |Δ| = {tables.num(target, d)}"
    return Finding(OPEN, f"{head}. {said}; {why}" + (f"; {established}." if established else "."))


def _no_test(untested: pd.DataFrame, labels: pd.Series, data: SweepData, k: int) -> str:
    """Comparisons the small-sample policy gives no test, why (`evidence.why`), and, where they are too few, the
    replicates that could decide one in the table's family of k comparisons (all tested then): the sign-flip test
    needs 2 / 2^n below α/m (6 seeds alone, 7 in a family of 2 or 3)."""
    word = data.replicates.unit
    listed = "; ".join(f"{labels[v]} vs {labels[r['ref']]} ({r['why']})" for v, r in untested.head(SHOWN).iterrows())
    more = f"; and {len(untested) - SHOWN} more" if len(untested) > SHOWN else ""
    if not untested["why"].str.contains("needs").any():
        return f"{listed}{more}: no spread to test."
    head = f"{listed}{more}: too few for any test of the small-sample policy."
    if not data.replicates.exchangeable:
        return f"{head} A t-test needs {evidence.SMALL_N} {word} differences."
    n = advice.fewest(advice.level(k), data.replicates)
    if n >= evidence.SMALL_N:
        return f"{head} Deciding one takes at least {n} {word}s (`seeds: {n}`), for a t-test."
    family = f"α/{k}" if k > 1 else "α"
    return (f"{head} Deciding one takes at least {n} {word}s (`seeds: {n}`): the exact sign-flip test's smallest "
            f"p, 2/2^{n} = {2 / 2**n:.3g}, is then below {family}; a t-test needs {evidence.SMALL_N}.")  # fmt: skip


def tuned(compared: list[Comparison], metric: str, d: int) -> list[Finding]:
    """Per pair of tuned arms (`ablate.reporting.bands`): at which budgets n, up to the most configurations both
    tried, one is better in the bands' curve (the median or expected best validation score of n configurations,
    named in the line) than the other once both are tuned, its band wholly
    above (below, where lower is better) the other's; or that the bands overlap at every budget, with the search
    that would separate them at the scores seen so far, where one up to the largest budget allowed would."""
    out, level = [], 1 - evidence.ALPHA
    for c in compared[:SHOWN]:
        both = (f"at {c.budget}: {c.arm} {_band(c.mine, c.budget, d)}, {c.other} {_band(c.theirs, c.budget, d)}; "
                f"{level:.0%} bands, simultaneous over arms and budgets")  # fmt: skip
        head = f"Tuned alike, {c.arm} vs {c.other} in {c.mine.curve} best {metric} of n configurations"
        if c.better or c.worse:
            said = [f"{word} at n = {_budgets(ns)}" for word, ns in (("better", c.better), ("worse", c.worse)) if ns]
            rest = sorted(set(range(1, c.budget + 1)) - {*c.better, *c.worse})
            overlap = f"; the bands overlap at n = {_budgets(rest)}" if rest else ""
            out.append(Finding(DECIDED, f"{head}: {' and '.join(said)}{overlap} ({both})."))
            continue
        if c.projection is None:
            more = f"no search of up to {MAX_BUDGET} configurations per arm would separate them at the scores seen"
        else:
            p = c.projection
            more = (f"at the scores seen so far, bands from about {p.size} configurations per arm would be apart at "
                    f"n = {p.at}")  # fmt: skip
        out.append(Finding(OPEN, f"{head}: the bands overlap at every n from 1 to {c.budget}, so neither is shown "
                                 f"better once tuned ({both}); {more}."))  # fmt: skip
    if len(compared) > SHOWN:
        out.append(Finding(OPEN, f"and {len(compared) - SHOWN} more pairs of tuned arms (Tuning, below)."))
    return out


def _band(b: Band, n: int, d: int) -> str:
    return f"[{tables.num(b.lo[n - 1], d)}, {tables.num(b.hi[n - 1], d)}]"


def _budgets(ns: list[int] | tuple[int, ...]) -> str:
    """Budgets as runs: 1-3, 7, 9-20."""
    runs: list[list[int]] = []
    for n in ns:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
