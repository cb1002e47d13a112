"""The report's account of a tuned sweep (`tune:`, `ablate.planning.tuning`): how each arm was tuned, how good it gets
with how much tuning, and whether its comparison with the baseline holds without its own tuning.

Read from the sweep's record (`ablate.spec.tuning.Searches`: each arm's configurations by trial key, its best, its
final trials and its trials at the baseline's configuration) and the store's trials. Per arm: the configuration
chosen on the validation metric, and Dodge et al.'s expected best validation score against the number of
configurations tried (`ablate.reporting.expected_best`) with its simultaneous band (`ablate.reporting.bands`), all
arms on one plot; the median best of n with its band (Lourie et al.'s recommended curve, tighter at the budgets
sweeps spend), and the Findings' lines from it on which arm is better once both are tuned; the comparison with the
baseline at each arm's own best (the variant table's) beside the comparison at the baseline's configuration (the
same seeds, paired, p adjusted over the arms); and the smallest budget from which the arms' ranking stops changing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ablate.planning.search import STARTUP, Failed
from ablate.planning.tuning import AXIS, results, space_words
from ablate.reporting import bands, findings, plots, stats, tables
from ablate.reporting.expected_best import ExpectedBest, expected_best, stable_budget
from ablate.reporting.frames import SweepData
from ablate.reporting.output import csv
from ablate.reporting.render import Block, Image, Section, Table
from ablate.spec.paths import get_path
from ablate.spec.tuning import ArmSearch, Searches, companion
from ablate.store import Store

FIGURE, MEDIAN_FIGURE = "tuning", "tuning_median"
"""The section's figures (file stems): the expected best of n with its bands, the median best of n with its."""


@dataclass
class Tuned:
    """What a tuned sweep adds to its report: the section, its CSV files, its figure (by file name), its lines
    of the Findings and the median bands they are read from (by arm)."""

    section: Section
    files: dict[str, str] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    found: list[findings.Finding] = field(default_factory=list)
    medians: dict[str, bands.Band] = field(default_factory=dict)


@dataclass
class _Arm:
    """One arm as the report reads it."""

    label: str
    search: ArmSearch
    values: list[float | None]
    """Each configuration's validation score in the order tried: a number, NaN where it failed, None where it has
    not run yet."""
    variant: str | None
    """The variant of its final trials (its best configuration), once they are planned."""
    chosen: dict[str, Any] = field(default_factory=dict)


def searches_of(store: Store, sweep: str) -> Searches | None:
    """The sweep's searches as its last launch recorded them; None for a sweep without `tune:`."""
    record = store.sweep(sweep)
    raw = (record.spec or {}).get("tuning") if record is not None else None
    return Searches.model_validate(raw) if raw else None


def current(store: Store, data: SweepData) -> SweepData:
    """A tuned sweep's data with only its arms' current final trials: a larger budget can move an arm's best,
    and the sweep keeps the trials of the best it had before (done, not compared any more)."""
    record = searches_of(store, data.name)
    if record is None:
        return data
    keys = {k for arm in record.arms for k in arm.finals}
    trials = data.trials[data.trials["key"].isin(keys)]
    variants = data.variants[data.variants.index.isin(set(trials["variant"]))]
    return replace(data, trials=trials, variants=variants)


def report(store: Store, data: SweepData, table: pd.DataFrame, correction: str, draw: bool = True) -> Tuned | None:
    """The tuning section of a tuned sweep's report (None for any other sweep); `draw`: with its two plots."""
    record = searches_of(store, data.name)
    if record is None:
        return None
    spec = record.spec
    told = results(store, data.name, spec.metric)
    tried = store.trials_frame(companion(data.name)).drop_duplicates("key").set_index("key")
    variant_of = dict(zip(data.trials["key"], data.trials["variant"]))
    configs = store.configs([k for a in record.arms if a.best is not None and (k := a.search[a.best])])
    arms = []
    for a in record.arms:
        values = [_value(told, key) for key in a.search]
        variant = next((variant_of[k] for k in a.finals if k in variant_of), None)
        label = data.variants.loc[variant, "label"] if variant in data.variants.index else _words(a.axes)
        key = a.search[a.best] if a.best is not None else None
        chosen = {p: get_path(configs[key], p) for p in spec.space} if key in configs else {}
        arms.append(_Arm(str(label), a, values, variant, chosen))
    finite = {a.label: [v for v in a.values if v is not None and not math.isnan(v)] for a in arms}
    curves = {label: expected_best(values, spec.direction) for label, values in finite.items() if values}
    ends = bands.bounds(spec.metric)
    found = bands.bands(finite, spec.direction, ends)
    medians = bands.bands(finite, spec.direction, ends, bands.MEDIAN)
    middle = {label: bands.median_best(values, spec.direction) for label, values in finite.items() if values}
    theirs = _at_baseline(store, data, record, arms, tried, correction)
    summary = _summary(data, record, arms, table, theirs)
    lead = arms[record.baseline].label if record.baseline is not None else None
    blocks: list[Block] = [_procedure(record, data), _table(data, record, summary, correction)]
    figures = {}
    for name, points, banded in ((FIGURE, {a: c.mean for a, c in curves.items()}, found),
                                 (MEDIAN_FIGURE, middle, medians)):  # fmt: skip
        if draw and (png := plots.tuning_plot(points, banded, spec.metric, lead)) is not None:
            figures[name] = png
            curve = next(iter(banded.values())).curve
            blocks.append(Image(name, png, f"{curve} best {spec.metric} against configurations tried"))
    blocks.append(_stability(curves, spec.metric, spec.direction == "max", ends))
    frames = {"tuning.csv": _configurations(record, arms, tried), "tuning_arms.csv": summary,
              "tuning_curves.csv": _curves(curves, found, middle, medians)}  # fmt: skip
    files = {name: csv(frame, index=False) for name, frame in frames.items()}
    pairs = _pairs([a.label for a in arms if a.label in medians], lead)
    compared = [bands.compare(a, b, finite, medians, spec.direction, ends) for a, b in pairs]
    lines = findings.tuned(compared, spec.metric, tables.digits(data))
    return Tuned(Section("Tuning", blocks), files, figures, lines, medians)


def _pairs(labels: list[str], lead: str | None) -> list[tuple[str, str]]:
    """The pairs of arms the Findings compare once tuned: each arm with the baseline, or every pair without one."""
    if lead in labels:
        return [(a, lead) for a in labels if a != lead]
    return [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :]]


def _value(told: dict[str, Any], key: str | None) -> float | None:
    result = Failed() if key is None else told.get(key)
    if result is None:
        return None
    return math.nan if isinstance(result, Failed) or not math.isfinite(result) else float(result)


def _words(axes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items()) or "the only arm"


def _at_baseline(
    store: Store, data: SweepData, record: Searches, arms: list[_Arm], tried: pd.DataFrame, correction: str
) -> pd.DataFrame:
    """Per non-baseline arm (index: its label): its trials at the baseline's best configuration against the
    baseline's at the same, paired by replicate (seed, split seed, fold), as the variant table's columns
    (pairs, delta, lo, hi, p, test, p_adj). Empty without a baseline or before its best is known."""
    if record.baseline is None or not record.arms[record.baseline].finals:
        return pd.DataFrame()
    base = record.arms[record.baseline]
    others = [a for i, a in enumerate(arms) if i != record.baseline and a.search.at_baseline]
    keys = [*base.finals, *(k for a in others for k in a.search.at_baseline)]
    configs = store.configs(keys)
    rep = {k: (c["seed"], c["data"].get("split_seed"), c["data"].get("fold")) for k, c in configs.items()}
    value = pd.Series(np.where(data.trials["state"] == "done", data.trials["value"], np.nan), index=data.trials["key"])
    done = tried[tried["state"] == "done"]
    theirs = pd.to_numeric(done[data.metric], errors="coerce") if data.metric in done else pd.Series(dtype=float)
    reference = {rep[k]: value.get(k, np.nan) for k in base.finals if k in rep}
    order = list(reference)
    diffs = np.full((len(others), len(order)), np.nan)
    for i, a in enumerate(others):
        for k in a.search.at_baseline:
            if k in rep and rep[k] in reference:
                diffs[i, order.index(rep[k])] = theirs.get(k, np.nan) - reference[rep[k]]
    out = stats.paired(diffs, replicates=data.replicates).rename(columns={"n": "pairs", "mean": "delta"})
    out.index = pd.Index([a.label for a in others])
    out["p_adj"] = stats.adjust(out["p"], correction)
    return out


def _verdict(r: pd.Series | None, higher: bool) -> str:
    """A comparison in a word: better, worse (significant after adjustment, in the metric's direction) or
    no clear difference; "-" where there is none to make."""
    if r is None or not r["pairs"] > 1:
        return "-"
    if pd.isna(r["p_adj"]) or r["p_adj"] >= stats.ALPHA:
        return "no clear difference"
    return "better" if (r["delta"] > 0) == higher else "worse"


COMPARED = ("pairs", "delta", "lo", "hi", "p", "p_adj", "why")
"""A comparison's columns in the arms' frame, once for each (`own_*`, `theirs_*`)."""


def _summary(
    data: SweepData, record: Searches, arms: list[_Arm], table: pd.DataFrame, theirs: pd.DataFrame
) -> pd.DataFrame:
    """One row per arm (tuning_arms.csv): configurations tried and failed, its best validation score and chosen
    values, both comparisons with the baseline and the conclusion."""
    rows = []
    for i, a in enumerate(arms):
        ran = [v for v in a.values if v is not None]
        row: dict[str, Any] = {"arm": a.label, "baseline": i == record.baseline, "tried": len(ran),
                               "failed": sum(math.isnan(v) for v in ran),
                               "best": a.values[a.search.best] if a.search.best is not None else math.nan}  # fmt: skip
        row.update({p: a.chosen.get(p) for p in record.spec.space})
        own = table.loc[a.variant] if i != record.baseline and a.variant in table.index else None
        other = theirs.loc[a.label] if a.label in theirs.index else None
        for name, r in (("own", own), ("theirs", other)):
            row.update({f"{name}_{c}": r[c] if r is not None else math.nan for c in COMPARED})
        words = [_verdict(own, data.higher), _verdict(other, data.higher)]
        row["conclusion"] = "" if i == record.baseline else _conclusion(*words)
        rows.append(row)
    return pd.DataFrame(rows)


def _conclusion(own: str, theirs: str) -> str:
    """Whether an arm's comparison with the baseline holds at the baseline's configuration too."""
    if "-" in (own, theirs):
        return "-"
    if own == theirs:
        return f"{own} at both"
    return f"depends on tuning: {own} at its own best, {theirs} at the baseline's"


def _table(data: SweepData, record: Searches, summary: pd.DataFrame, correction: str) -> Table:
    spec, d, unit = record.spec, tables.digits(data), data.replicates.unit
    space = list(spec.space)
    header = ["arm", "configurations", f"best {spec.metric}", *space, "Δ at its own best [95% CI]",
              "Δ at the baseline's configuration [95% CI]", "conclusion"]  # fmt: skip
    rows = []
    for _, r in summary.iterrows():
        count = str(spec.budget) if r["tried"] == spec.budget else f"{r['tried']} of {spec.budget}"
        count += f" ({r['failed']} failed)" if r["failed"] else ""
        chosen = [_shown(r[p]) for p in space]
        if r["baseline"]:
            rows.append([r["arm"], count, tables.num(r["best"], d), *chosen, "baseline", "baseline", ""])
            continue
        cells = []
        for name in ("own", "theirs"):
            c = pd.Series({**{k: r[f"{name}_{k}"] for k in COMPARED}, "below_floor": False})
            cells.append(tables.difference(c, d) if c["pairs"] > 0 else "-")
        rows.append([r["arm"], count, tables.num(r["best"], d), *chosen, *cells, r["conclusion"]])
    k = int(summary["theirs_p_adj"].notna().sum())
    caption = (
        f"Each arm's configuration chosen on {spec.metric} (its best of the configurations tried, at its first "
        f"seed), and its paired difference to the baseline in {data.metric} over the {unit}s both have: at its own "
        f"best configuration (the variant table's comparison, p adjusted there), and at the baseline's best "
        f"configuration (the same {unit}s). {stats.starred(k, correction, 'arms at the baseline configuration')} "
        "Conclusion: better, worse or no clear "
        "difference at each, and whether it depends on the arms' own tuning."
    )
    return Table(caption, header, rows, left=1)


def _shown(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _procedure(record: Searches, data: SweepData) -> str:
    spec = record.spec
    startup = min(max(spec.batch, STARTUP), spec.budget)  # TPE's random start: the same draws in every arm
    same = ("the same configurations" if spec.sampler in ("random", "grid")
            else f"the same first {startup} configurations, then its own")  # fmt: skip
    return (f"Each arm (a variant of the grid) tried {spec.budget} configurations of {space_words(spec)}, proposed by "
            f"Optuna's {spec.sampler} sampler (seed {spec.seed}, the same for every arm: {same}) in rounds of "
            f"{spec.batch}, each trained at the arm's first seed and chosen on {spec.metric} alone: the test split "
            f"chose nothing. The sweep's seeds then ran at each arm's best configuration (the tables above compare "
            f"the arms there; the best's first seed is its tuning trial, whose test score chose nothing either), "
            f"and every other arm ran at the baseline's best configuration too, the same seeds, kept out of the "
            f"comparison above (`ablate runs {companion(data.name)}` lists every trial of the search).")  # fmt: skip


def _stability(curves: dict[str, ExpectedBest], metric: str, higher: bool, ends: tuple[float, float]) -> str:
    """The smallest budget from which the arms' ranking by expected best stays as it is at the largest budget
    every arm reached."""
    if len(curves) < 2:
        return "Expected best: fewer than two arms with results, no ranking to judge."
    common = min(len(c.mean) for c in curves.values())
    n = stable_budget(curves)
    order = " > ".join(
        sorted(curves, key=lambda a: -curves[a].mean[common - 1] if higher else curves[a].mean[common - 1])
    )
    how = (f"Curves: Dodge et al.'s expected best {metric} of n configurations drawn from each arm's results; "
           f"bands: {_band_words(len(curves), ends)} The median curves (the second plot, tuning_curves.csv): each "
           "arm's median best of n (the score half of all searches of n configurations reach: opda's quantile tuning "
           "curve), with its band from the same Kolmogorov-Smirnov band, at the same confidence; the Findings "
           "compare these: they need no mass at the metric's ends, so they are narrower at small n, and their "
           "upper edge reaches the range's top once the CDF band's width exceeds 1 - 0.5^(1/n).")  # fmt: skip
    if n == common and common > 1:
        return (f"The arms' ranking by expected best {metric} still changed at {common} configurations, the most "
                f"every arm tried ({order}): a larger budget may change it. {how}")  # fmt: skip
    return (f"The arms' ranking by expected best {metric} is the same from {n} configuration{'s' if n > 1 else ''} "
            f"on, up to {common} (the most every arm tried): {order}. {how}")  # fmt: skip


def _configurations(record: Searches, arms: list[_Arm], tried: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration tried: arm, its number, trial key, state, the values, the validation score."""
    rows = []
    for a in arms:
        for n, (key, value) in enumerate(zip(a.search.search, a.values), 1):
            row = {
                "arm": a.label,
                AXIS: n,
                "key": key,
                "state": tried["state"].get(key, "refused") if key else "refused",
            }
            row.update({p: tried[f"axis.{p}"].get(key) if key and f"axis.{p}" in tried else None
                        for p in record.spec.space})  # fmt: skip
            rows.append({**row, record.spec.metric: value, "chosen": n - 1 == a.search.best})
    return pd.DataFrame(rows)


def _band_words(arms: int, ends: tuple[float, float]) -> str:
    """How the plot's bands were made, and what they cover."""
    level, each = 1 - stats.ALPHA, 1 - stats.ALPHA / arms
    missing = [side for side, end in zip(("lower", "upper"), ends) if math.isinf(end)]
    unbounded = (
        f" The metric's range has no {' or '.join(missing)} end, so that side of every band is infinite "
        "(not drawn): no distribution-free band bounds an expectation there."
        if missing
        else ""
    )
    return (f"Lourie et al.'s distribution-free bands (Kolmogorov-Smirnov, exact, opda), each arm's at "
            f"{each:.2%} so that all hold at once, at every n, with {level:.0%}; they assume scores within "
            f"[{ends[0]:g}, {ends[1]:g}] and are wide where few configurations ran.{unbounded}")  # fmt: skip


def _curves(
    curves: dict[str, ExpectedBest],
    found: dict[str, bands.Band],
    middle: dict[str, np.ndarray],
    medians: dict[str, bands.Band],
) -> pd.DataFrame:
    """tuning_curves.csv: per arm and budget n, the expected best with its spread and band, the median best with
    its band."""
    rows = []
    for arm, c in curves.items():
        e, m = found[arm], medians[arm]
        rows += [{"arm": arm, "n": int(n), "expected_best": c.mean[i], "std": c.std[i], "lo": e.lo[i], "hi": e.hi[i],
                  "median_best": middle[arm][i], "median_lo": m.lo[i], "median_hi": m.hi[i]}
                 for i, n in enumerate(c.n)]  # fmt: skip
    return pd.DataFrame(rows)
