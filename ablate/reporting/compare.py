"""Two sweeps side by side: the variants they share, each sweep's mean, and the paired difference B - A where
their trials pair up.

    compare("cpu", "cpu-v2", store=store)   # reports/compare-cpu-vs-cpu-v2/{index.html, report.md, ...}

A variant of A and one of B are the same variant when they agree on every axis both sweeps have (a
variant that another of its own sweep also matches is ambiguous and left out, with a count). Replicates
pair up when they are the same cell's same seed (and split and fold): the same replicate label. The
differences go through the same design-aware test as a sweep's own table, and the shared variants are one
family for the correction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.reporting import frames, stats, tables
from ablate.reporting.frames import ReportError, SweepData
from ablate.reporting.output import FORMATS, check, write_file, write_pages
from ablate.reporting.output import folder as sweep_folder
from ablate.reporting.render import Section, Table
from ablate.store import Store


@dataclass
class Comparison:
    """Two sweeps' shared variants: one row each (`frame`), and what could not be matched."""

    a: SweepData
    b: SweepData
    frame: pd.DataFrame
    """Per shared variant: label, a_mean/a_std/a_n, b_mean/b_std/b_n, pairs, delta, lo, hi, d, d_lo, d_hi,
    p, test, p_adj, below_floor."""
    axes: list[str]
    """The axes both sweeps have: what a shared variant agrees on."""
    ambiguous: int
    """Variants left out because another variant of their own sweep agrees on the same axes."""
    replicates: stats.Replicates


def pairs(a: SweepData, b: SweepData) -> tuple[list[tuple[str, str]], list[str], int]:
    """(variant of A, variant of B) for every one-to-one match on the axes both have; those axes; the count
    of variants left out as ambiguous."""
    axes = [x for x in a.axes if x in b.axes]
    keys = []
    for data in (a, b):
        cells = frames.axis_cells(data.variants, axes)
        keys.append(pd.Series([tuple(r) for r in cells.itertuples(index=False)], index=cells.index, dtype=object))
    ka, kb = keys
    unique_a, unique_b = ka[~ka.duplicated(keep=False)], kb[~kb.duplicated(keep=False)]
    by_key = {k: v for v, k in unique_b.items()}
    matched = [(str(va), str(by_key[k])) for va, k in unique_a.items() if k in by_key]
    left_out = int(ka.duplicated(keep=False).sum() + kb.duplicated(keep=False).sum())
    return matched, axes, left_out


def comparison(a: SweepData, b: SweepData, correction: str = "holm") -> Comparison:
    """The shared variants of A and B with their paired differences B - A (see the module docstring)."""
    if a.metric != b.metric:
        raise ReportError(f"sweeps {a.name!r} and {b.name!r} report different metrics ({a.metric}, {b.metric})")
    matched, axes, ambiguous = pairs(a, b)
    if not matched:
        raise ReportError(
            f"sweeps {a.name!r} and {b.name!r} share no variant (axes both have: {', '.join(axes) or 'none'})"
        )
    shared = a.replicates if a.replicates == b.replicates else stats.Replicates()
    va, vb = frames.replicates(a), frames.replicates(b)
    reps = sorted(set(va.columns) | set(vb.columns))
    left = va.reindex(index=[m[0] for m in matched], columns=reps).to_numpy()
    right = vb.reindex(index=[m[1] for m in matched], columns=reps).to_numpy()
    own = [stats.interval(frames.replicates(d, "repeat").reindex(index=[m[i] for m in matched]).to_numpy())
           for i, d in enumerate((a, b))]  # fmt: skip
    spread = [stats.interval(x) for x in (left, right)]
    test = stats.paired(right - left, replicates=shared)
    out = pd.DataFrame({"variant_a": [m[0] for m in matched], "variant_b": [m[1] for m in matched],
                        "label": a.variants.loc[[m[0] for m in matched], "label"].to_numpy()})  # fmt: skip
    for side, s, o in zip("ab", spread, own):
        out[f"{side}_mean"], out[f"{side}_std"], out[f"{side}_n"] = s["mean"], s["std"], o["n"]
    out["pairs"], out["delta"] = test["n"], test["mean"]
    for col in ("lo", "hi", "d", "d_lo", "d_hi", "p", "test", "why"):
        out[col] = test[col]
    out["p_adj"] = stats.adjust(out["p"].where(out["pairs"] > 1), correction)
    floor = _floor(a)
    out["below_floor"] = (out["pairs"] > 1) & (out["delta"].abs() < floor)
    return Comparison(a, b, out, axes, ambiguous, shared)


def _floor(data: SweepData) -> float:
    """Sweep A's baseline seed std (NaN without a baseline or with fewer than two seeds)."""
    values = frames.replicates(data, "repeat")
    if data.baseline is None or data.baseline not in values.index:
        return float("nan")
    return float(stats.interval(values.loc[[data.baseline]].to_numpy())["std"].iloc[0])


def table(c: Comparison, correction: str) -> Table:
    """The side-by-side table with its caption (tests, family, noise floor)."""
    d, unit = tables.digits(c.a), c.replicates.unit
    rows = []
    for _, r in c.frame.iterrows():
        sides = [f"{tables.num(r[f'{s}_mean'], d)} ± {tables.num(r[f'{s}_std'], d)}" for s in "ab"]
        if r["pairs"] > 0:
            delta = tables.difference(r, d)
            eff = tables.standardised(r)
            p = f"{tables.pvalue(r['p'])} {tables.TESTS.get(r['test'], '')}".strip()
        else:
            delta, eff, p = "not paired", "-", "-"
        rows.append([r["label"], sides[0], str(int(r["a_n"])), sides[1], str(int(r["b_n"])), str(int(r["pairs"])),
                     delta, eff, p, tables.pvalue(r["p_adj"])])  # fmt: skip
    floor = _floor(c.a)
    if np.isnan(floor):
        floor_words = f"Noise floor: not measurable in {c.a.name} (no baseline with two seeds)."
    else:
        floor_words = f"Noise floor: {c.a.name}'s baseline seed std = {tables.num(floor, d + 1)}; ‡ = |Δ| below it."
    k = int(c.frame["p_adj"].notna().sum())
    caption = (
        f"{tables.metric_words(c.a)} Variants of {c.a.name} (A) and {c.b.name} (B) that agree on every axis both "
        f"sweeps have ({', '.join(c.axes) or 'none'}); mean ± std over every finished trial, n = independent "
        f"replicates (seeds or CV repeats). Δ = B - A over the replicates both sweeps ran (same seed, split and "
        f"fold: 'pairs'), with a 95% interval; d: Δ in standard deviations of the paired differences. "
        f"p: {tables.test_words(c.a) if c.replicates == c.a.replicates else 'paired t-test'}. "
        f"{stats.starred(k, correction, 'shared variants')} {floor_words}"
        + tables.na_words([row[6] for row in rows], unit)
        + (
            f" {c.ambiguous} variants were left out: another variant of their sweep agrees on the same axes."
            if c.ambiguous
            else ""
        )
    )
    header = ["Variant", f"A: {c.a.name}", "n", f"B: {c.b.name}", "n", "pairs", "Δ (B - A) [95% CI]",
              "d [95% CI]", "p (test)", "p adj."]  # fmt: skip
    return Table(caption, header, rows, left=1)


def folder(a: str, b: str) -> str:
    """The comparison's folder under `out`: built from the two sweeps' own safe folders."""
    return f"compare-{sweep_folder(a)}-vs-{sweep_folder(b)}"


def compare(
    a: str,
    b: str,
    *,
    store: Store,
    out: str | Path = "reports",
    metric: str | None = None,
    formats: set[str] | None = None,
    correction: str = "holm",
) -> list[Path]:
    """Write the side-by-side report of sweeps `a` and `b` to `out/compare-A-vs-B/` (html, md, csv, tex as
    asked); return the files written. ReportError before anything is written when a sweep is unknown,
    the metrics differ or they share no variant."""
    wanted = check(formats or FORMATS, correction)
    c = comparison(frames.load(store, a, metric), frames.load(store, b, metric), correction)
    where = Path(out) / folder(a, b)
    title = f"ablate compare: {a} vs {b}"
    meta = [
        f"Metric: {c.a.metric}. Replicates: {c.replicates.words}. Last changes: {c.a.updated} (A), {c.b.updated} (B)."
    ]
    sections = [Section("Shared variants", [table(c, correction)])]
    written = []
    if "csv" in wanted:
        written.append(write_file(where / "compare.csv", c.frame.to_csv(index=False)))
    return written + write_pages(where, wanted, title, meta, sections)
