"""The report's tables as formatted cells: the variant table in the CSaN paper's layout, published numbers
beside measured ones, effects of each knob, and unfinished trials.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ablate import evidence, units
from ablate.config import REPLICATES
from ablate.evidence import bootstrap
from ablate.evidence.verdict import Verdict, decide
from ablate.probe import steptime
from ablate.reporting import frames, published, stats
from ablate.reporting.effects import LENTH_PSE, PAIRED, Factorial
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table
from ablate.store import divergence

Row = Mapping[str, Any]
"""A row of a report's frame as its cells are read: a Series, or a dict of `DataFrame.to_dict("records")` (a Series
per row, as `iterrows` makes, was most of the time of a large sweep's tables)."""

MAX_UNFINISHED = 200
TESTS = {stats.T_TEST: "t", stats.SIGN_FLIP: "e", stats.CORRECTED: "c"}


def num(x: float | None, digits: int = 2, sign: bool = False) -> str:
    if x is None or pd.isna(x):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def pvalue(p: float) -> str:
    return "-" if pd.isna(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def ci(lo: float, hi: float, digits: int, why: str) -> str:
    """A 95% interval, or n/a and `why` the small-sample policy gives none (`ablate.evidence.why`): never the
    zero-width interval a t interval degenerates to, nor one beside a test that cannot decide."""
    if pd.isna(lo) or pd.isna(hi):
        return f"[n/a: {why}]"
    return f"[{num(lo, digits, True)}, {num(hi, digits, True)}]"


def difference(r: Row, digits: int, marked: bool = True) -> str:
    """A paired difference (delta) with its interval, or why it has none, and (`marked`) marks (`marks`)."""
    return f"{num(r['delta'], digits, True)} {ci(r['lo'], r['hi'], digits, r['why'])}{marks(r) if marked else ''}"


def standardised(r: Row) -> str:
    """Cohen's d_z with its interval (beside a t-test only); "-" where there is no test."""
    if pd.isna(r["d"]):
        return "-"
    shown = num(r["d"], 2, True)
    return shown if pd.isna(r["d_lo"]) else f"{shown} [{num(r['d_lo'], 2, True)}, {num(r['d_hi'], 2, True)}]"


def na_words(cells: list[str], unit: str) -> str:
    """The caption's footnote for n/a intervals, where a table has any."""
    if not any("n/a" in c for c in cells):
        return ""
    return (f" n/a: no interval and no test: one {unit}, every {unit} with the same difference (zero spread: a "
            f"zero-width interval would claim a certainty so few replicates cannot give), or fewer {unit}s than "
            f"any test needs to reach p < {stats.ALPHA:.2f} (independent pairs: {stats.EXACT_N} for the exact "
            f"sign-flip test, whose smallest p is 2/2^n; otherwise {stats.SMALL_N} for a t-test); such a row is "
            "never significant.")  # fmt: skip


def digits(data: SweepData) -> int:
    """Decimals for the metric: 2 for percentages, 4 for values in [0, 1] (AUC)."""
    values = data.trials["value"].abs()
    return 4 if values.notna().any() and values.max() <= 1 else 2


def variants(
    table: pd.DataFrame, data: SweepData, correction: str = "holm", won: dict[str, Verdict] | None = None
) -> Table:
    """Architecture, token mixer, #params, GFLOPs, metric mean +- std, replicates, paired delta with 95% CI,
    standardised effect, p (test), adjusted p, trials; grouped by backbone and dataset. A metric cell is bold only
    where its variant is significantly better than every other of its group (`won`: the `verdicts` the report
    made already, None: made here). Measured speed is not a column: a trial's throughput ranks the machine's load
    as much as the architecture (`costs` shows it apart)."""
    d = digits(data)
    resampled = "b_lo" in table
    unit = data.replicates.unit
    header = ["Architecture", "Token mixer", "#Params", "GFLOPs", f"{data.metric} (mean ± std)", "n",
              "Δ vs baseline [95% CI]", *["Δ [95% BCa]"] * resampled, "d [95% CI]", "p (test)", "p adj.",
              f"P({unit} better)", "ρ (var. removed)", "trials"]  # fmt: skip
    rows = []
    for r in table.to_dict("records"):
        if r["is_reference"]:
            delta, eff, p, adj, boot, better, rho = "baseline", "", "", "", "", "", ""
        elif r["pairs"] > 0:
            delta = difference(r, d)
            boot = ci(r["b_lo"], r["b_hi"], d, r["b_why"] or r["why"]) if resampled else ""
            eff = standardised(r)
            p, adj = f"{pvalue(r['p'])} {TESTS.get(r['test'], '')}".strip(), pvalue(r["p_adj"])
            better, rho = num(r["better"]), correlation(r)
        else:
            delta, eff, p, adj, boot, better, rho = "-", "-", "-", "-", "-", "-", "-"
        metric = f"{num(r['mean'], d)} ± {num(r['std'], d)}" if r["values"] > 1 else num(r["mean"], d)
        trials = f"{r['done']}/{r['trials']} done" + (f"; {r['unfinished']}" if r["unfinished"] else "")
        if r["stale"]:
            trials += f"; {r['stale']} stale†" + (" (mixed with current)" if r["stale"] < r["done"] else "")
        rows.append([r["architecture"], r["mixer"], units.params(r["params"]), units.gflops(r["gflops"]), metric,
                     replicates(r, data), delta, *[boot] * resampled, eff, p, adj, better, rho, trials])  # fmt: skip
    order = {v: i for i, v in enumerate(table.index)}
    won = verdicts(table, data, correction) if won is None else won
    bold = _cheapest(table) | {(order[w.best], 4) for w in won.values() if w.significant}
    ref = table.loc[data.baseline, "label"] if data.baseline in table.index else "none"
    moved = " (the baseline's cell on each variant's own dataset)" if table["ref"].nunique() > 1 else ""
    k = int(table["p_adj"].notna().sum())
    caption = (
        f"{metric_words(data)} Mean ± std over {spread_words(data)}; n = {replicate_words(data)} with a result. "
        f"Δ: paired difference to the baseline ({ref}){moved} over the replicates both have, with a 95% "
        f"interval; d: Δ in standard deviations of the paired differences (Cohen's d_z) with its 95% interval "
        f"(noncentral t). p: {test_words(data)}. {stats.starred(k, correction, 'comparisons with the baseline')} "
        f"{floor_words(table, data)} "
        f"{winner_words(data, correction)} {pairing_words(data, resampled)} #Params and GFLOPs are exact: bold = "
        "the smallest of "
        f"the group. GFLOPs = stored FLOPs / 2e9: multiply-accumulates per example, as the papers count FLOPs. "
        "Measured training speed: Cost (apart: it depends on the machine's load as much as on the architecture)."
        + na_words([row[6] for row in rows], data.replicates.unit)
        + stale_note(data)
    )
    return Table(caption, header, rows, groups=list(table["group"]), bold=bold)


def correlation(r: Row) -> str:
    """The seed correlation of a variant's pairs and the share of variance the pairing removed, beside a test only
    ("-" elsewhere: a correlation of a few pairs can take any value)."""
    if not r["test"] or pd.isna(r["rho"]) or pd.isna(r["removed"]):
        return "-"
    return f"{num(r['rho'], 2, True)} ({r['removed']:.0%})"


def pairing_words(data: SweepData, resampled: bool) -> str:
    """The caption's words on what the pairing bought and, with `resampled`, on the BCa interval."""
    unit = data.replicates.unit
    words = (f"P({unit} better): the share of {unit}s at which the variant beats the same {unit} of the baseline "
             f"(ties count half; the probability of improvement). ρ: the correlation of the variant's and the "
             f"baseline's {unit}s over their pairs, with the share of the unpaired difference's variance the pairing "
             f"removed, 1 - var(Δ) / (var(variant) + var(baseline)) (ρ itself where both arms spread alike; "
             f"negative: pairing added variance), beside a test only.")  # fmt: skip
    if not resampled:
        return words
    return (f"{words} Δ [95% BCa]: the paired bootstrap's bias-corrected and accelerated interval of Δ (scipy, "
            f"{bootstrap.RESAMPLES} resamples of the {unit} differences, seed {bootstrap.SEED}), only where the "
            f"policy gives a t-test over independent {unit}s (n ≥ {stats.SMALL_N}); on few pairs it holds the mean "
            "less often than its level says (docs/concepts/statistics.md), so p and * go by Δ's interval.")  # fmt: skip


def costs(table: pd.DataFrame) -> Table | None:
    """What each variant's training measured: steady-state samples/s and s/epoch of its own trials and, with
    `report --time`, its architecture's step time relative to the fastest, timed side by side (`speed_words`); None
    when nothing was measured. Kept out of the variant table, which ranks: the same trials gave one variant the
    lowest throughput of a sweep in one run and the highest in another, as the load they ran beside changed."""
    side = "step_rel" in table
    if not (table["timed"] > 0).any() and not side:
        return None
    header = ["Variant", "samples/s, epochs 2+", "s/epoch, epochs 2+", "trials timed"]
    rows = [[r["label"], num(r["samples_s"], 0), num(r["epoch_s"], 1), str(r["timed"])]
            + ([f"×{num(r['step_rel'], 2)}"] if side else []) for _, r in table.iterrows()]  # fmt: skip
    header += ["step time, side by side"] if side else []
    return Table(speed_words(table), header, rows, groups=list(table["group"]), left=1)


def speed_words(table: pd.DataFrame) -> str:
    """What the measured costs timed: each trial in steady state where and when it ran, and, with `report --time`,
    every architecture side by side in one process at the trials' batch."""
    counts = sorted(set(table["timed"][table["timed"] > 0]))
    n = "-".join(map(str, counts[:: max(len(counts) - 1, 1)])) or "0"
    devices = ", ".join(sorted({d for ds in table["device"].dropna() for d in str(ds).split(", ") if d})) or "-"
    words = (f"samples/s, s/epoch: steady-state training throughput, epochs 2+ (a trial's first epoch, and the one "
             f"it resumed in, warm the worker up), median of {n} trials per variant on {devices}, each where and when "
             "it ran: a figure of the machine's load as much as of the architecture, which can reverse between runs "
             "of the same trials, so not a ranking of the architectures.")  # fmt: skip
    if "step_rel" not in table:
        return words + " `ablate report --time` adds each architecture's relative step time, measured side by side."
    batch = int(table["step_batch"].iloc[0])
    return (f"{words} Step time, side by side: one process, CPU ({steptime.THREADS} thread), batch {batch} (the "
            f"trials' own: a worker's micro-batch, train.device_batch, the most common where variants differ): each "
            f"architecture's forward and backward, median of {steptime.ROUNDS} rounds timed in turn after a warm-up "
            "step, over the fastest architecture's (×1.00).")  # fmt: skip


def marks(r: Row) -> str:
    """* significant after the table's correction; ‡ smaller than the reference's seed std."""
    return ("*" if r["p_adj"] < stats.ALPHA else "") + ("‡" if r["below_floor"] else "")


def replicates(r: Row, data: SweepData) -> str:
    """Independent replicates of a variant; under cross-validation with its fold count."""
    n = str(int(r["n"]))
    return n if data.replicates.folds is None else f"{n} ({int(r['values'])} folds)"


def metric_words(data: SweepData) -> str:
    """What the headline number is: the metric and which epoch it comes from (`train.select`)."""
    head = f"{data.metric}, {'higher' if data.higher else 'lower'} is better:"
    picks = {c.get("train", {}).get("select", "final") for c in data.variants["config"]}
    if picks == {"best"}:
        return (f"{head} the best epoch's, chosen on validation data (the epoch with the best validation score; "
                "the test split never chooses).")  # fmt: skip
    if picks == {"final"}:
        return (f"{head} the final epoch's (the trainer evaluates the test split once, after the last epoch; no "
                "epoch is selected).")  # fmt: skip
    return f"{head} the final epoch's for some variants and the best validation epoch's for others (train.select)."


def spread_words(data: SweepData) -> str:
    if data.replicates.folds is None:
        return f"replicates ({' x '.join(_replicate_words(data))})"
    return f"every fold of every repeat ({' x '.join(_replicate_words(data))})"


def replicate_words(data: SweepData) -> str:
    """What n counts: seeds, or CV repeats (seed x split seed), which are the independent replicates."""
    return "seeds" if data.replicates.folds is None else "independent repeats of the cross-validation (seed x split)"


def test_words(data: SweepData) -> str:
    """Which test a p comes from, under the sweep's design."""
    if data.replicates.folds is not None:
        return (f"c = corrected resampled t-test (Nadeau & Bengio 2003) over the fold differences of "
                f"{data.replicates.words}: variance (1/n + 1/(k-1)) s², df n - 1")  # fmt: skip
    return (f"t = paired t-test over seeds (n ≥ {stats.SMALL_N} pairs), e = exact sign-flip test ({stats.EXACT_N} ≤ "
            f"n < {stats.SMALL_N}; its interval inverts it, coverage ≥ 95%), none below {stats.EXACT_N} pairs (the "
            "smallest p, 2/2^n, is 0.5 with 2 pairs): see docs/concepts/statistics.md")  # fmt: skip


def floor_words(table: pd.DataFrame, data: SweepData) -> str:
    """The seed-noise floor: the baseline's seed std, and what ‡ flags."""
    if data.baseline not in table.index:
        return "No baseline: no noise floor."
    floor = table.loc[data.baseline, "seed_std"]
    if pd.isna(floor):
        return "Noise floor: not measurable (the baseline has fewer than two seeds)."
    each = " (each variant against its own reference's)" if table["ref"].nunique() > 1 else ""
    return (f"Noise floor: the baseline's seed std = {num(floor, digits(data) + 1)}; ‡ = |Δ| below it{each}, "
            "a difference seeds alone produce.")  # fmt: skip


def verdicts(table: pd.DataFrame, data: SweepData, correction: str = "holm") -> dict[str, Verdict]:
    """Per group (backbone and dataset) of measured variants: the best, or the variants tied with it
    (`ablate.evidence.verdict.decide` on their replicates, under the sweep's design): the rule of the bold cell, the
    Findings and summary.json alike."""
    values = frames.replicates(data)
    out = {}
    for group, g in table[table["n"] > 0].groupby("group", sort=False):
        cells = dict(zip(map(str, g.index), values.loc[g.index].to_numpy().tolist()))  # a Series per variant was slow
        found = decide({v: dict(zip(values.columns, row)) for v, row in cells.items()}, data.higher, correction,
                       data.replicates.ratio)  # fmt: skip
        if found is not None:
            out[str(group)] = found
    return out


def winner_words(data: SweepData, correction: str) -> str:
    """What a bold metric cell means; the verdict itself opens the report (Findings)."""
    return (f"Bold {data.metric}: better than every other variant of its group (paired tests against each, "
            f"{stats.CORRECTIONS[correction]} over those k comparisons, α = {stats.ALPHA:.2f}; none bold: tied, "
            "see Findings).")  # fmt: skip


def stale_note(data: SweepData) -> str:
    """The footnote of stale results: which components changed since they were computed."""
    if not data.stale:
        return ""
    changed = sorted({c for k in data.stale for c in data.stale[k]})
    return (f" † stale: {len(data.stale)} done trials were computed by other code than now (changed: "
            f"{', '.join(changed)}); their values are in the means above; `ablate launch --rerun stale` "
            "retrains them.")  # fmt: skip


def _cheapest(table: pd.DataFrame) -> set[tuple[int, int]]:
    """(row, column) of the fewest params and GFLOPs per group: exact numbers, no test needed."""
    marks = set()
    order = {v: i for i, v in enumerate(table.index)}
    for _, g in table[table["n"] > 0].groupby("group", sort=False):
        for col, name in ((2, "params"), (3, "gflops")):
            vals = g[name]
            if len(g) > 1 and vals.notna().any() and vals.nunique() > 1:
                marks |= {(order[v], col) for v in vals[vals == vals.min()].index}
    return marks


def _replicate_words(data: SweepData) -> list[str]:
    words = {"seed": "seed", "data.split_seed": "split repeat", "data.fold": "fold"}
    return [words[p] for p in REPLICATES if p == "seed" or f"axis.{p}" in data.trials]


def published_tables(table: pd.DataFrame, data: SweepData) -> list[Table | str]:
    """Published rows beside the measured variants they correspond to; rows that only share the token mixer
    and stack (other size or dataset) in a second table, for orientation only. When no variant is comparable,
    one line saying why instead (`published.none_comparable`), and nothing unless a variant's mechanism is one a
    table publishes (`published.publishes`)."""
    done = data.trials[data.trials["state"] == "done"]
    top1 = pd.to_numeric(done["test.top1"], errors="coerce") if "test.top1" in done else pd.Series(math.nan, done.index)
    measured = top1.groupby(done["variant"]).mean()
    exact, near, misses, sources, notes = [], [], [], {}, dict[str, None]()
    for variant in data.variants.index:
        found = published.match(frames.own_config(data, variant))
        if found is None:
            continue
        row = found.row
        sources[found.table.source] = found.table.dataset
        r = table.loc[variant]
        m_top1 = measured.get(variant, float("nan"))
        if found.comparable:
            notes[found.table.note] = None
            exact.append([r["label"], f"{row.model}, {row.setting}", units.params(r["params"]),
                          f"{row.params_m:.1f}M", units.params(r["params"] - row.params_m * 1e6, True),
                          units.gflops(r["gflops"]), num(row.gflops, 1),
                          units.gflops(r["gflops"] - (row.gflops or math.nan), True),
                          num(m_top1, 2), num(row.top1, 1), num(m_top1 - row.top1, 2, True)])  # fmt: skip
        else:
            misses.append(found)
            near.append([r["label"], f"{row.model}, {row.setting}", "; ".join(found.differs)])
    if not exact:
        kinds = {str(c.get("attention", {}).get("kind")) for c in data.variants["config"]}
        about = list({id(t): t for k in sorted(kinds) for t in published.publishes(k)}.values())
        return [published.none_comparable([m for m in misses if m.table in about], about)] if about else []
    src = "; ".join(sources)
    datasets = "/".join(dict.fromkeys(sources.values()))
    header = ["Variant", "published row", "#Params", "published", "Δ", "GFLOPs", "published", "Δ",
              "top-1 (%)", "published", "Δ"]  # fmt: skip
    out: list[Table | str] = [
        Table(f"Measured vs published ({src}): same size, stack, token mixer, dataset and recipe; Δ = measured - "
              f"published (published {'; '.join(notes)}). Measured GFLOPs count the attention matmuls, which "
              "published tables leave out (`ablate plan` shows both): expect them 2-8% higher.", header, exact)
    ]  # fmt: skip
    if near:
        header = ["Variant", f"nearest published row ({datasets})", "not compared: differs from the paper in"]
        caption = (f"Not compared with the published numbers ({src}): these variants share the token mixer and "
                   "stack with a published row but not its dataset, model size or recipe, so no number of theirs "
                   "is put beside the paper's; every difference is listed.")  # fmt: skip
        out.append(Table(caption, header, near, left=3))
    return out


def effects(eff: pd.DataFrame, f: Factorial, data: SweepData, correction: str = "holm") -> Table:
    d = digits(data)
    rows = [[r["term"], r["factor"], r["contrast"], num(r["effect"], d, True),
             ci(r["lo"], r["hi"], d, r["why"]), pvalue(r["p"]),
             pvalue(r["p_adj"]), str(r["n"])] for _, r in eff.iterrows()]  # fmt: skip
    parts = []
    for i, part in enumerate(f.parts, 1):
        levels = "; ".join(f"{name}: {', '.join(lv)}" for name, lv in zip(part.factors, part.levels))
        where = ", ".join(f"{a} = {v}" for a, v in part.within.items())
        held = ", ".join(f"{a} = {v}" for a, v in part.held.items())
        parts.append((f"({i}) " if len(f.parts) > 1 else "") + (f"within {where}: " if where else "") + levels
                     + (f" ({held})" if held else ""))  # fmt: skip
    more = (" An axis outside the first part gets a part of its own among the variants it applies to (a knob "
            "of one token mixer: that mixer's variants; reference = the one nearest the baseline), with the terms "
            "that involve it; its rows name the values that part's variants share: factor (axis=value)."
            if len(parts) > 1 else "")  # fmt: skip
    how = "; ".join(_how(m, f.replicates, eff["test"][eff["method"] == m]) for m in dict.fromkeys(eff["method"]))
    caption = (f"Factorial part{'s' if len(parts) > 1 else ''}: {'; '.join(parts)} (first level = reference, the "
               "baseline's; other axes at the baseline's values, or in parentheses where the baseline lacks them)."
               f" Main effect = mean {data.metric} at the level minus at the reference, averaged over the other "
               "factors (a factor of k levels: k - 1 rows, each level against the reference); interaction = "
               f"effect of the first factor at the second's level minus at its reference.{more} Estimated "
               f"{how}. "
               f"{stats.family(int(eff['p_adj'].notna().sum()), correction, 'terms')}. {noise_floor(data)}"
               + na_words([row[4] for row in rows], "replicate"))  # fmt: skip
    return Table(caption, ["term", "factor", "contrast", EFFECT_HEADER, "95% CI", "p", "p adj.", "n"], rows, left=3)


EFFECT_HEADER = "effect (A x B: A's effect at B minus at B's reference, twice the textbook's AB)"
"""The effects column's header: it states the interaction's scale, the difference of conditional effects, which is
twice Box, Hunter & Hunter's interaction effect (their AB is half that difference)."""


PAIRED_TESTS = {stats.T_TEST: "paired t-test", stats.CORRECTED: "corrected resampled t over the folds",
                stats.SIGN_FLIP: f"exact sign-flip test (below {evidence.SMALL_N} replicates)"}  # fmt: skip
"""The paired effects' tests in the caption's words, as the rows' `test` names them."""


def _how(method: str, replicates: stats.Replicates, tests: pd.Series) -> str:
    """How the effects of a part are estimated, in the caption's words: the paired rows' own tests (`tests`),
    the sign-flip test where they had too few replicates for the t."""
    if method == PAIRED:
        default = stats.CORRECTED if replicates.folds is not None else stats.T_TEST
        used = [PAIRED_TESTS[t] for t in dict.fromkeys(tests) if t in PAIRED_TESTS] or [PAIRED_TESTS[default]]
        return (f"per complete replicate (every cell has the seed/fold); 95% interval and {' or '.join(used)} p "
                "over replicates; n = replicates")  # fmt: skip
    unit = "repeat means (folds averaged)" if replicates.folds is not None else "trials"
    if method == LENTH_PSE:
        return ("on cell means, one value per cell: 95% interval and p from Lenth's test (the terms' pseudo standard "
                f"error, which assumes most terms are null; two-level factors only); n = {unit}")  # fmt: skip
    return ("on cell means, as fewer than two (or fewer than half) of the replicates are complete in every "
            f"cell; 95% t interval and p from the pooled within-cell variance (unpaired) of the {unit}; "
            f"n = {unit}")  # fmt: skip


def noise_floor(data: SweepData) -> str:
    """The baseline's seed std in words, for tables that do not list the baseline."""
    values = frames.replicates(data, "repeat")
    if data.baseline is None or data.baseline not in values.index:
        return "No baseline: no noise floor."
    std = stats.interval(values.loc[[data.baseline]].to_numpy())["std"].iloc[0]
    if pd.isna(std):
        return "Noise floor: not measurable (the baseline has fewer than two seeds)."
    return f"Noise floor: the baseline's seed std = {num(std, digits(data) + 1)}."


def unfinished(data: SweepData) -> Table | None:
    t = data.trials[data.trials["state"] != "done"]
    if t.empty:
        return None
    labels = data.variants["label"]
    rows = []
    for _, r in t.head(MAX_UNFINISHED).iterrows():
        what = r["error"] if isinstance(r["error"], str) else ""
        if r["state"] == "diverged":
            what = divergence(r["diverged_epoch"], r["diverged_step"]) or what
        rows.append([r["key"][:12], labels.get(r["variant"], r["variant"]), r["rep"], r["state"], what])
    more = f" Showing {MAX_UNFINISHED} of {len(t)}; trials.csv lists all." if len(t) > MAX_UNFINISHED else ""
    return Table(f"{len(t)} of {len(data.trials)} trials are not done; they are left out of the statistics.{more}",
                 ["trial", "variant", "replicate", "state", "error"], rows, left=5)  # fmt: skip
