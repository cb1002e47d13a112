"""The report's tables as formatted cells: the variant table in the CSaN paper's layout, published numbers
beside measured ones, effects of each knob, and unfinished trials.
"""

from __future__ import annotations

import math

import pandas as pd

from ablate.config import REPLICATES
from ablate.reporting import frames, published, stats
from ablate.reporting.effects import PAIRED, Factorial
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Table

MAX_UNFINISHED = 200
TESTS = {stats.T_TEST: "t", stats.WILCOXON: "W"}


def num(x: float | None, digits: int = 2, sign: bool = False) -> str:
    if x is None or pd.isna(x):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def params(p: float) -> str:
    return "-" if pd.isna(p) else f"{p / 1e6:.2f}M" if p < 1e7 else f"{p / 1e6:.1f}M"


def pvalue(p: float) -> str:
    return "-" if pd.isna(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def digits(data: SweepData) -> int:
    """Decimals for the metric: 2 for percentages, 4 for values in [0, 1] (AUC)."""
    values = data.trials["value"].abs()
    return 4 if values.notna().any() and values.max() <= 1 else 2


def variants(table: pd.DataFrame, data: SweepData) -> Table:
    """Architecture, token mixer, #params, GFLOPs, samples/s, metric mean +- std (n), paired delta with
    95% CI, p (test), trials; grouped by backbone and dataset; the best value per column in each group bold."""
    d = digits(data)
    header = ["Architecture", "Token mixer", "#Params", "GFLOPs", "samples/s", f"{data.metric} (mean ± std)",
              "n", "Δ vs baseline [95% CI]", "p (test)", "trials"]  # fmt: skip
    rows = []
    for _, r in table.iterrows():
        if r["is_baseline"]:
            delta, p = "baseline", ""
        elif r["pairs"] > 0:
            delta = f"{num(r['delta'], d, True)} [{num(r['lo'], d, True)}, {num(r['hi'], d, True)}]"
            p = f"{pvalue(r['p'])} {TESTS.get(r['test'], '')}".strip()
        else:
            delta, p = "-", "-"
        metric = f"{num(r['mean'], d)} ± {num(r['std'], d)}" if r["n"] > 1 else num(r["mean"], d)
        trials = f"{r['done']}/{r['trials']} done" + (f"; {r['unfinished']}" if r["unfinished"] else "")
        if r["stale"]:
            trials += f"; {r['stale']} stale†" + (" (mixed with current)" if r["stale"] < r["done"] else "")
        rows.append([r["architecture"], r["mixer"], params(r["params"]), num(r["gflops"], 3),
                     num(r["samples_s"], 0), metric, str(int(r["n"])), delta, p, trials])  # fmt: skip
    best = _best(table, data.higher)
    ref = table.loc[data.baseline, "label"] if data.baseline in table.index else "none"
    moved = " (the baseline's cell on each variant's own dataset)" if table["ref"].nunique() > 1 else ""
    caption = (
        f"{data.metric}: mean ± std over replicates ({' x '.join(_replicate_words(data))}); "
        f"n = finished replicates. Δ: paired difference to the baseline ({ref}){moved} over matching replicates, "
        f"with a 95% t interval. p: t = paired t-test (n ≥ {stats.SMALL_N} pairs), W = Wilcoxon signed-rank "
        f"(n < {stats.SMALL_N}; it cannot fall below 2/2^n, e.g. 0.5 with 2 pairs). GFLOPs = stored FLOPs / 2e9: "
        "multiply-accumulates per example, as the papers count FLOPs. samples/s: training throughput, mean over "
        f"epochs of up to {frames.THROUGHPUT_TRIALS} finished trials. Bold: best per column within its group "
        "(fewest params and GFLOPs, most samples/s, best metric and Δ)." + stale_note(data)
    )
    return Table(caption, header, rows, groups=list(table["group"]), bold=best)


def stale_note(data: SweepData) -> str:
    """The footnote of stale results: which components changed since they were computed."""
    if not data.stale:
        return ""
    changed = sorted({c for k in data.stale for c in data.stale[k]})
    return (f" † stale: {len(data.stale)} done trials were computed by other code than now (changed: "
            f"{', '.join(changed)}); their values are in the means above; `ablate launch --rerun stale` "
            "retrains them.")  # fmt: skip


def _best(table: pd.DataFrame, higher: bool) -> set[tuple[int, int]]:
    """(row, column) of the best value per column group within each table group."""
    marks = set()
    order = {v: i for i, v in enumerate(table.index)}
    sign = 1 if higher else -1
    columns = {2: ("params", -1), 3: ("gflops", -1), 4: ("samples_s", 1), 5: ("mean", sign), 7: ("delta", sign)}
    for _, g in table[table["n"] > 0].groupby("group", sort=False):
        if len(g) < 2:
            continue
        for col, (name, direction) in columns.items():
            vals = g[name] * direction
            if name == "delta":
                vals = vals.where(~g["is_baseline"])
            if vals.notna().any() and vals.nunique() > 1:
                marks |= {(order[v], col) for v in vals[vals == vals.max()].index}
    return marks


def _replicate_words(data: SweepData) -> list[str]:
    words = {"seed": "seed", "data.split_seed": "split repeat", "data.fold": "fold"}
    return [words[p] for p in REPLICATES if p == "seed" or f"axis.{p}" in data.trials]


def published_tables(table: pd.DataFrame, data: SweepData) -> list[Table]:
    """Published rows beside the measured variants they correspond to; rows that only share the token mixer
    and stack (other size or dataset) in a second table, for orientation only."""
    done = data.trials[data.trials["state"] == "done"]
    top1 = pd.to_numeric(done["test.top1"], errors="coerce") if "test.top1" in done else pd.Series(math.nan, done.index)
    measured = top1.groupby(done["variant"]).mean()
    exact, near, sources, notes = [], [], {}, dict[str, None]()
    for variant, cfg in data.variants["config"].items():
        found = published.match(cfg)
        if found is None:
            continue
        row = found.row
        sources[found.table.source] = found.table.dataset
        r = table.loc[variant]
        m_top1 = measured.get(variant, float("nan"))
        if found.comparable:
            notes[found.table.note] = None
            exact.append([r["label"], f"{row.model}, {row.setting}", params(r["params"]), f"{row.params_m:.1f}M",
                          num(r["params"] / 1e6 - row.params_m, 1, True), num(r["gflops"], 2),
                          num(row.gflops, 1), num(r["gflops"] - (row.gflops or math.nan), 2, True),
                          num(m_top1, 2), num(row.top1, 1), num(m_top1 - row.top1, 2, True)])  # fmt: skip
        else:
            differs = "; ".join(found.differs[:3]) + (
                f"; +{len(found.differs) - 3} more" if len(found.differs) > 3 else ""
            )
            near.append([r["label"], differs, f"{row.model}, {row.setting}", f"{row.params_m:.1f}M",
                         num(row.gflops, 1), num(row.top1, 1), num(m_top1, 2)])  # fmt: skip
    src = "; ".join(sources)
    datasets = "/".join(dict.fromkeys(sources.values()))
    out = []
    if exact:
        header = ["Variant", "published row", "#Params", "published", "Δ", "GFLOPs", "published", "Δ",
                  "top-1 (%)", "published", "Δ"]  # fmt: skip
        out.append(Table(f"Measured vs published ({src}): same size, stack, token mixer, dataset and recipe; Δ = "
                         f"measured - published (published {'; '.join(notes)}). Measured GFLOPs count the attention "
                         "matmuls, which published tables leave out (`ablate plan` shows both): expect them 2-8% "
                         "higher.", header, exact))  # fmt: skip
    if near:
        header = ["Variant", "differs from the paper in", f"published row ({datasets})", "#Params", "GFLOPs",
                  "top-1 (%)", "measured top-1 (%)"]  # fmt: skip
        caption = (f"For orientation only, not comparable: published {datasets} rows ({src}) with the same token "
                   "mixer and stack but another model size, dataset or recipe (first differences shown).")  # fmt: skip
        out.append(Table(caption, header, near, left=3))
    return out


def effects(eff: pd.DataFrame, f: Factorial, data: SweepData) -> Table:
    d = digits(data)
    levels = "; ".join(f"{name}: {', '.join(lv)}" for name, lv in zip(f.factors, f.levels))
    rows = [[r["term"], r["factor"], r["contrast"], num(r["effect"], d, True),
             f"[{num(r['lo'], d, True)}, {num(r['hi'], d, True)}]", pvalue(r["p"]), str(r["n"])]
            for _, r in eff.iterrows()]  # fmt: skip
    if f.method == PAIRED:
        how = ("per complete replicate (every cell has the seed/fold); 95% t interval and paired t-test p over "
               "replicates; n = replicates")  # fmt: skip
    else:
        how = ("on cell means, as fewer than two (or fewer than half) of the replicates are complete in every "
               "cell; 95% t interval and p from the pooled within-cell variance (unpaired; none with one trial "
               "per cell); n = trials")  # fmt: skip
    caption = (f"Factorial part: {levels} (first level = reference, the baseline's; other axes at the baseline's "
               f"values). Main effect = mean {data.metric} at the level minus at the reference, averaged over the "
               "other factors; interaction = effect of the first factor at the second's level minus at its "
               f"reference. Estimated {how}.")  # fmt: skip
    return Table(caption, ["term", "factor", "contrast", "effect", "95% CI", "p", "n"], rows, left=3)


def unfinished(data: SweepData) -> Table | None:
    t = data.trials[data.trials["state"] != "done"]
    if t.empty:
        return None
    labels = data.variants["label"]
    rows = []
    for _, r in t.head(MAX_UNFINISHED).iterrows():
        what = r["error"] if isinstance(r["error"], str) else ""
        if r["state"] == "diverged" and not pd.isna(r["diverged_epoch"]):
            step = "" if pd.isna(r["diverged_step"]) else f", step {r['diverged_step']}"
            what = f"diverged at epoch {r['diverged_epoch']}{step}"
        rows.append([r["key"][:12], labels.get(r["variant"], r["variant"]), r["rep"], r["state"], what])
    more = f" Showing {MAX_UNFINISHED} of {len(t)}; trials.csv lists all." if len(t) > MAX_UNFINISHED else ""
    return Table(f"{len(t)} of {len(data.trials)} trials are not done; they are left out of the statistics.{more}",
                 ["trial", "variant", "replicate", "state", "error"], rows, left=5)  # fmt: skip
