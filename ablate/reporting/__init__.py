"""Reports: the results store as a researcher puts it in a paper and reads it to decide.

    from ablate.reporting import report
    with Store() as store:
        report(["cpu"], store=store)   # reports/cpu/{index.html, report.md, *.png, trials.csv, variants.csv}

Per sweep: the variant table in the CSaN paper's layout (mean +- std over replicates, paired delta to the
baseline with a 95% interval, standardised effect, the test's p-value and the p adjusted over the table's
comparisons, Holm or Benjamini-Hochberg; the tests respect the design, see `stats`), each variant against its
group's best (the tests behind best or tied, `ties`), measured training speed apart from the variant table (a
figure of the machine's load as much as of the architecture), published numbers
beside the measured ones they are comparable with, main effects and
two-way interactions of the factorial part, plots (metric per variant, metric vs cost with the Pareto
front, training curves, attention diagnostics), and the trials that are not done. `reports/index.html`
lists every report under the output folder. Re-running on an unchanged store rewrites identical files
(the date shown is the sweep's last change, not the time of writing). Format "tex" adds `tables.tex`
(booktabs); every page format writes `methods.md` and `methods.tex` too, a methods paragraph from the store and
the tables (`methods`); `compare` puts two sweeps side by side (`ablate.reporting.compare`).

Modules: `frames` (store -> frames, per-variant statistics), `stats` (design-aware tests, corrections),
`effects` (factorial effects), `ties` (each variant against its group's best: the tests behind best or tied),
`describe` (variants in words), `pairing` (each replicate's paired difference, as the pairing plot shows it),
`published` (the tables mechanisms declare), `halfnormal` (the half-normal
reading of a one-seed design's terms), `plots` (matplotlib), `tables` (formatted cells), `render` (HTML, Markdown,
LaTeX), `methods` (the methods paragraph), `compare` (two sweeps),
`findings` and `advice` (the Findings and what more seeds could decide), `undertrained` (the Findings on scores
near chance and curves still rising, said first).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.evidence.verdict import Verdict
from ablate.reporting import (
    across_datasets,
    adaptive,
    designed,
    effects,
    findings,
    frames,
    halfnormal,
    methods,
    pairing,
    plots,
    render,
    sections,
    tables,
    ties,
    tuning,
    undertrained,
)
from ablate.reporting.compare import compare
from ablate.reporting.frames import ReportError, SweepData
from ablate.reporting.output import ALL_FORMATS, FORMATS, check, csv, folder, write_file, write_pages
from ablate.reporting.render import Block, Image, Section, Table
from ablate.spec.tuning import tuned_of
from ablate.store import STATES, Store

__all__ = ["ALL_FORMATS", "FORMATS", "ReportError", "compare", "folder", "labels", "report"]

FIGURES = (
    "variants",
    "pairing",
    "best",
    "profile",
    "tuning",
    "tuning_median",
    "cost",
    "curves",
    "diagnostics",
    "effects",
    "halfnormal",
)
SUMMARY = "summary.json"
ORDER = ("findings", "variants", "best", "datasets", "tuning", "seeds", "cost", "published", "effects", "contributed",
         "training", "unfinished")  # fmt: skip
"""The places of a sweep report's sections, in the order they are written: the verdict first, then the variant
table with what explains its bold cells (best or tied) and how its variants were chosen (tuning, adaptive seeds),
then cost, published numbers, effects, the sections mechanisms contribute (`sections`), training curves, and the
trials not done last."""


def report(
    sweeps: str | Iterable[str] | None = None,
    *,
    store: Store,
    out: str | Path = "reports",
    metric: str | None = None,
    baseline: str | None = None,
    formats: Iterable[str] = FORMATS,
    correction: str = "holm",
    time: bool = False,
    all_trials: bool = False,
    interval: str = "policy",
) -> list[Path]:
    """Write the report of each sweep (default: every sweep in the store) to `out/<sweep>/`, then
    `out/index.html`; return the files written. `metric` and `baseline` (a variant key or prefix, or
    PATH=VALUE[,PATH=VALUE] on axis values) override the sweep's; `correction` (holm or bh) adjusts each
    table's p-values; `interval` (policy or bca, `stats.INTERVALS`) adds the paired bootstrap's BCa interval beside
    the variant table's tests; `time` times every architecture's training step side by side on this machine's CPU (the
    report's relative step time, `ablate.probe.steptime`; the report then differs from run to run). A report
    covers the trials each sweep's current plan makes; `all_trials` adds those launched before under other
    settings, labelled by the config paths they differ in. Every sweep is
    read before anything is written, so an unknown sweep, metric or baseline
    (ReportError) leaves the folder as it was."""
    wanted = check(formats, correction, interval)
    counts = store.sweeps_frame().set_index("name")["trials"]
    names = [sweeps] if isinstance(sweeps, str) else list(sweeps or counts.index)
    searches = {n: of for n in names if (of := tuned_of(n)) in counts.index}  # a tuned sweep's search
    if sweeps and (alone := [n for n, of in searches.items() if of not in names]):
        raise ReportError(f"{alone[0]} is the search of the tuned sweep {searches[alone[0]]}: its report is the "
                          f"Tuning section of {searches[alone[0]]}'s")  # fmt: skip
    names = [n for n in names if n not in searches]
    if not sweeps:  # every sweep, less a tuned one still searching: it has no trials of its own yet
        names = [n for n in names if counts.get(n, 0) > 0]
    if not names:
        raise ReportError("no sweeps in the store")
    with uncollected():
        loaded = [tuning.current(store, frames.load(store, name, metric, baseline, all_trials)) for name in names]
    out = Path(out)
    written: list[Path] = []
    for data in loaded:
        with uncollected():
            written += _write_sweep(store, data, out / folder(data.name), wanted, correction, time, interval == "bca")
    if "html" in wanted:
        written.append(write_file(out / "index.html", index_page(out)))
    return written


def labels(store: Store, sweep: str) -> dict[str, str]:
    """Each variant's label as the sweep's report names it (its variants table's `label`), read without writing the
    report (MLflow names a trial's run by it: `ablate.tracking.tracker.Tracker.run_name`); ReportError as `report`
    raises it."""
    with uncollected():
        variants = frames.load(store, sweep).variants
    return {str(v): label for v, label in variants["label"].items() if isinstance(label, str) and label}


@contextmanager
def uncollected() -> Iterator[None]:
    """Python's cycle collector paused for a sweep's reading or writing, as it was again after (an exception too):
    a report makes many short-lived objects (frames, matplotlib artists) over a heap that holds the sweep's trials,
    and each full collection walks that heap, a tenth of the report of 10,000 trials. What the sweep left in cycles
    (its figures) is freed by the collections after it."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _write_sweep(
    store: Store, data: SweepData, where: Path, formats: set[str], correction: str, time: bool, resampled: bool
) -> list[Path]:
    table = frames.variant_table(data, frames.throughput(store, data, side_by_side=time), correction, resampled)
    chosen = data.design
    fac = effects.factorial(data) if chosen is None else None
    eff = effects.effects(fac, correction) if fac is not None else None
    if chosen is not None and chosen.two_level:
        eff = designed.effects(data, chosen, correction)
    won = tables.verdicts(table, data, correction)
    best = ties.against_best(data, won)
    written = []
    tuned = tuning.report(store, data, table, correction, bool(formats & {"html", "md"}))  # None unless tuned
    if "csv" in formats and tuned is not None:
        written += [write_file(where / name, text) for name, text in tuned.files.items()]
    if "csv" in formats:
        label = data.trials["variant"].map(data.variants["label"])
        written.append(write_file(where / "trials.csv", csv(data.trials.assign(label=label), index=False)))
        written.append(write_file(where / "variants.csv", csv(table)))
        if eff is not None:
            written.append(write_file(where / "effects.csv", csv(eff, index=False)))
        if len(best):
            written.append(write_file(where / "best.csv", csv(best, index=False)))
    if formats & {"html", "md", "tex"}:
        figures = _figures(store, data, table, eff, best) if formats & {"html", "md"} else {}
        contributed = sections.sections(sections.SweepResults(data, table, correction, store))
        title, meta, parts = _sections(data, table, fac, eff, won, figures, correction, contributed)
        if (seeds := adaptive.section(store, data)) is not None:
            parts["seeds"] = [seeds]
        if (across := across_datasets.report(data, draw=bool(formats & {"html", "md"}))) is not None:
            parts["datasets"], figures = [across.section], figures | across.figures
        if tuned is not None:
            parts["tuning"] = [tuned.section]
            figures |= tuned.figures
        if len(best):
            shown = [Image("best", figures["best"], "each variant against the best")] if "best" in figures else []
            parts["best"] = [Section("Best or tied", [ties.table(best, data, correction), *shown])]
        judged = adaptive.verdicts(store, data)
        found = [*(across.found if across is not None else []), *undertrained.findings(store, data, table)]
        found += findings.findings(data, table, fac, eff, won, judged)
        found += tuned.found if tuned is not None else []
        if chosen is not None and chosen.two_level and (words := designed.unseparated(chosen, data, eff)) is not None:
            found.append(findings.Finding(findings.CONFOUNDED, words))
        parts["findings"] = [Section("Findings", [findings.block(found)], latex=False)]
        written += write_pages(where, formats, title, meta, ordered(parts))
        medians = tuned.medians if tuned is not None else None
        said = methods.files(methods.facts(store, data, table, correction, medians), ordered(parts))
        written += [write_file(where / name, text) for name, text in said.items()]
        if "md" in formats:
            written += [write_file(where / f"{name}.png", png) for name, png in figures.items()]
            for stale in set(FIGURES) - set(figures):
                (where / f"{stale}.png").unlink(missing_ok=True)
    written.append(write_file(where / SUMMARY, json.dumps(summary(data, table, won), indent=1, sort_keys=True) + "\n"))
    return written


def _figures(
    store: Store, data: SweepData, table: pd.DataFrame, eff: pd.DataFrame | None, best: pd.DataFrame
) -> dict[str, bytes]:
    shown = plots.pick(table, data.higher, plots.MAX_CURVES)
    curves = frames.curves(store, data, list(shown.index))
    made = {
        "variants": plots.variants_plot(table, data),
        "pairing": plots.pairing_plot(pairing.pairs(table, data), data.metric),
        "best": plots.best_plot(best, data.variants["label"], data.metric) if len(best) else None,
        "cost": plots.cost_plot(table, data),
        "curves": plots.curves_plot(curves, table, data),
        "diagnostics": plots.diagnostics_plot(curves, table),
        "effects": plots.effects_plot(eff, data.metric) if eff is not None else None,
        "halfnormal": plots.halfnormal_plot(halfnormal.screens(eff)) if eff is not None else None,
    }
    return {name: png for name, png in made.items() if png is not None}


def _counts(states: pd.Series) -> str:
    counts = states.value_counts()
    return ", ".join(f"{counts[s]} {s}" for s in STATES if s in counts)


def _sections(
    data: SweepData,
    table: pd.DataFrame,
    fac: effects.Factorial | None,
    eff: pd.DataFrame | None,
    won: dict[str, Verdict],
    figures: dict[str, bytes],
    correction: str,
    contributed: list[Section],
) -> tuple[str, list[str], dict[str, list[Section]]]:
    """The report's own sections and those its mechanisms contribute (`sections`), by their place in `ORDER`."""

    def fig(name: str, alt: str) -> list[Block]:
        return [Image(name, figures[name], alt)] if name in figures else []

    base = table.loc[data.baseline, "label"] if data.baseline in table.index else "none"
    timed = " and the side-by-side step time" if "step_rel" in table else ""
    meta = [
        *([data.description] if data.description else []),
        f"Metric: {tables.metric_words(data)} Baseline: {base}. Replicates: {data.replicates.words}.",
        f"Trials: {len(data.trials)} ({_counts(data.trials['state'])}); variants: {len(table)} "
        f"({int((table['n'] > 0).sum())} with results). Last change: {data.updated}.",
        *filter(None, [data.outside.words(data.name)]),
    ]
    parts = {
        "variants": [Section("Variants", [tables.variants(table, data, correction, won),
                                          *fig("variants", f"{data.metric} per variant"),
                                          *fig("pairing", "each replicate's difference from the baseline's")])],
        "cost": [Section(
            "Cost",
            [*(fig("cost", f"{data.metric} against params, GFLOPs{timed} with the Pareto front")
               or ["No cost on which the finished variants differ (params, GFLOPs, step time): no cost plot."]),
             tables.costs(table) or "No training was timed: no measured cost."],
        )],
        "contributed": contributed,
    }  # fmt: skip
    if pub := tables.published_tables(table, data):  # only where a variant's mechanism has a published table
        parts["published"] = [Section("Published numbers", [*pub])]
    chosen = data.design
    if chosen is not None and not chosen.two_level:
        parts["effects"] = [Section("Ablation, one axis at a time", [designed.ablation(table, chosen, data)])]
    elif chosen is not None and eff is not None and len(eff):
        shown = [designed.table(eff, chosen, data, correction), *fig("effects", "effects"), *_daniel(eff, data, fig)]
        parts["effects"] = [Section("Effects of each knob", shown)]
    elif fac is not None and eff is not None and len(eff):
        shown = [tables.effects(eff, fac, data, correction), *fig("effects", "effects"), *_daniel(eff, data, fig)]
        parts["effects"] = [Section("Effects of each knob", shown)]
    else:
        parts["effects"] = [Section("Effects of each knob", ["No axis with two measured levels: no factorial part."])]
    training = [*fig("curves", "training curves"), *fig("diagnostics", "attention diagnostics")]
    parts["training"] = [Section("Training", training or ["No per-epoch metrics recorded yet."])]
    if (t := tables.unfinished(data)) is not None:
        parts["unfinished"] = [Section("Unfinished trials", [t])]
    return f"ablate report: {data.name}", meta, parts


def ordered(parts: dict[str, list[Section]]) -> list[Section]:
    """The sections of `parts` (place in `ORDER` -> its sections) in the report's order. A place missing from
    `ORDER` is a bug of the caller's, raised rather than dropping a section."""
    if unknown := set(parts) - set(ORDER):
        raise ValueError(f"report sections placed outside ORDER: {sorted(unknown)}")
    return [s for place in ORDER for s in parts.get(place, [])]


def _daniel(eff: pd.DataFrame, data: SweepData, fig: Callable[[str, str], list[Block]]) -> list[Block]:
    """The half-normal reading of the terms Lenth's test read (`halfnormal`): its words, and its plot where drawn."""
    found, lacking = halfnormal.screens(eff), halfnormal.missing(eff)
    said = [halfnormal.words(found, data.metric), *fig("halfnormal", "half-normal plot")] if found else []
    return [*said, *([lacking] if lacking else [])]


def summary(data: SweepData, table: pd.DataFrame, won: dict[str, Verdict]) -> dict[str, Any]:
    """What the overview page, MLflow's `report.best` and `ablate.tracking.tracker` show of a report: name, date, trial
    counts, and per group the best variant or those tied with it (`verdict`, in words; `best`: the winner where
    the sweep has one group and it has one, else None), by the rule of the report's bold cells."""
    measured, several = table[table["n"] > 0], len(won) > 1
    words = measured["mixer" if several else "label"]  # a group's name is said once, before its variants'
    labels = {v: f"{label} ({mean:.4g})" for v, label, mean in zip(measured.index, words, measured["mean"])}
    verdict = "; ".join(f"{group}: {v.words(labels)}" if several else v.words(labels) for group, v in won.items())
    best = None
    if len(won) == 1 and (only := next(iter(won.values()))).significant:
        best = {"variant": only.best, "label": table.loc[only.best, "label"], "mean": only.means[only.best]}
    counts = {str(k): int(v) for k, v in data.trials["state"].value_counts().items()}
    return {"sweep": data.name, "description": data.description, "metric": data.metric, "date": data.updated,
            "trials": len(data.trials), "states": counts, "best": best, "verdict": verdict,
            "folder": folder(data.name)}  # fmt: skip


def index_page(out: Path) -> str:
    """The overview: every report under `out` (its summary.json), with a link to each."""
    found = sorted((json.loads(p.read_text()) for p in out.glob(f"*/{SUMMARY}")), key=lambda s: s["sweep"])
    rows, links = [], {}
    for i, s in enumerate(found):
        states = ", ".join(f"{n} {k}" for k, n in sorted(s["states"].items()))
        verdict = f"{s['metric']}: {s['verdict']}" if s.get("verdict") else "-"
        rows.append([s["sweep"], s["description"], s["date"], f"{s['trials']} ({states})", verdict])
        links[i, 0] = f"{s['folder']}/index.html"
    header = ["sweep", "description", "last change", "trials", "best or tied (mean)"]
    caption = (f"{len(found)} reports under {out.name}/. Best: significantly better than every other variant of "
               "its group (the report's Findings); else tied among those listed.")  # fmt: skip
    t = Table(caption, header, rows, left=5, links=links)
    return render.html_page("ablate reports", [], [Section("Sweeps", [t])])
