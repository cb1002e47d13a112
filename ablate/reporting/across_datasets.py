"""The report's section on a sweep over several datasets (an axis on `data.name` or `data.id`, as syn-mil's five MIL
benchmarks): each arm (a variant less its dataset) aggregated over the datasets as Agarwal et al. (2021) do
(`ablate.evidence.aggregates`: interquartile mean, stratified bootstrap interval, performance profile), beside the
per-dataset table it comes from, and the line that leads the Findings: which arms' IQM interval lies wholly above
or below the baseline's, or that none does (`finding`). A sweep on one dataset gets no section and pays nothing for
it.

Scores are normalised per dataset before they are pooled: 0 is the sweep's worst run on that dataset, 1 its best
(min-max over every arm's runs there; flipped for a metric where lower is better), so an AUC of 0.95 on an easy
dataset and 0.80 on a hard one weigh alike. A run is an independent replicate (a seed, or a repeat of
cross-validation with its folds averaged: folds of one repeat share training data).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ablate.evidence import EXACT_N, LEVEL, aggregates
from ablate.reporting import findings, frames, plots, tables
from ablate.reporting.frames import STRATA, SweepData
from ablate.reporting.render import Block, Image, Section, Table

TAUS = np.linspace(0.0, 1.0, 101)
"""The thresholds a profile is drawn at (normalised scores)."""
FIGURE = "profile"


@dataclass(frozen=True)
class Arm:
    """A variant less its dataset: its runs on each of the sweep's datasets, raw and normalised."""

    label: str
    baseline: bool
    raw: list[np.ndarray]
    """The metric's runs per dataset, in the sweep's order of datasets (empty where the arm has none)."""
    scores: list[np.ndarray]
    """The same runs normalised (module docstring)."""

    @property
    def complete(self) -> bool:
        """Whether the arm has runs on every dataset: only then is its aggregate comparable with another's."""
        return all(len(r) for r in self.raw)


@dataclass(frozen=True)
class Datasets:
    """A sweep's arms over its datasets, and each dataset's range of runs (its normalisation)."""

    names: list[str]
    arms: list[Arm]
    worst: np.ndarray
    best: np.ndarray
    """Per dataset, the worst and the best run (the lowest and highest, or where lower is better the reverse)."""


@dataclass
class Across:
    """What the section adds to a report: the section, its figure (by file stem) and its line of the Findings."""

    section: Section
    figures: dict[str, bytes] = field(default_factory=dict)
    found: list[findings.Finding] = field(default_factory=list)


def datasets(data: SweepData) -> Datasets | None:
    """The sweep's arms over its datasets; None where the sweep has fewer than two datasets."""
    strata = [a for a in data.axes if a in STRATA and data.variants[f"axis.{a}"].nunique() > 1]
    if not strata:  # read before any cell: a sweep on one dataset pays nothing
        return None
    cells = frames.axis_cells(data.variants, data.axes)
    others = [a for a in data.axes if a not in strata]
    of_dataset = [" / ".join(r) for r in cells[strata].itertuples(index=False, name=None)]
    words = dict(zip(of_dataset, data.variants["dataset"]))
    names = list(dict.fromkeys(of_dataset))
    said = names if len(set(words.values())) < len(names) else [words[n] for n in names]
    of_arm = list(cells[others].itertuples(index=False, name=None))
    several = data.variants["architecture"].nunique() > 1
    runs = frames.replicates(data, "repeat").to_numpy(dtype=float)  # a row per variant, in the variants' order
    found: dict[tuple[str, ...], dict[str, np.ndarray]] = {}
    labels: dict[tuple[str, ...], str] = {}
    base = None
    described = data.variants[["architecture", "mixer"]].itertuples(index=False)
    for variant, values, arm, ds, (architecture, mixer) in zip(
        data.variants.index, runs, of_arm, of_dataset, described
    ):
        found.setdefault(arm, {})[ds] = values[~np.isnan(values)]
        labels.setdefault(arm, f"{architecture}: {mixer}" if several else str(mixer))
        base = arm if variant == data.baseline else base
    raw = {arm: [by.get(n, np.empty(0)) for n in names] for arm, by in found.items()}
    pooled = [np.concatenate([r[i] for r in raw.values()]) for i in range(len(names))]
    ranged = [p if len(p) else np.full(1, np.nan) for p in pooled]
    worst = np.array([np.min(p) if data.higher else np.max(p) for p in ranged])
    best = np.array([np.max(p) if data.higher else np.min(p) for p in ranged])
    arms = [Arm(labels[arm], arm == base, r, [_normalised(x, lo, hi) for x, lo, hi in zip(r, worst, best)])
            for arm, r in raw.items()]  # fmt: skip
    return Datasets(said, arms, worst, best)


def _normalised(runs: np.ndarray, worst: float, best: float) -> np.ndarray:
    """Runs on a [0, 1] scale from the dataset's worst run to its best; every run 1 where all runs are equal."""
    if best == worst:
        return np.ones_like(runs)
    return (runs - worst) / (best - worst)


def report(data: SweepData, draw: bool = True) -> Across | None:
    """The section of a sweep over several datasets (None for any other sweep); `draw`: with its profile plot."""
    found = datasets(data)
    if found is None:
        return None
    complete = [a for a in found.arms if a.complete]
    estimates = [aggregates.aggregate(a.scores) if a.complete else None for a in found.arms]
    blocks: list[Block] = [_words(found, data), _aggregate_table(found, estimates), _per_dataset(found, data)]
    png = None
    if draw and complete:
        shown = _shown(found.arms, estimates)
        png = profile_plot({a.label: aggregates.profile(a.scores, TAUS) for a in shown},
                            next((a.label for a in shown if a.baseline), None), len(complete))  # fmt: skip
        blocks.append(Image(FIGURE, png, "performance profiles: fraction of runs above each normalised score"))
    said = finding(found, estimates)
    return Across(Section("Across datasets", blocks), {FIGURE: png} if png else {}, [said] if said else [])


def finding(found: Datasets, estimates: list[aggregates.Estimate | None]) -> findings.Finding | None:
    """The Findings' line across datasets: the arms whose IQM interval lies wholly above the baseline arm's (better
    on the normalised scale) or wholly below it, with the aggregate table's numbers, or that none does; and the arms
    without an interval to compare. None without a baseline arm."""
    base = next((i for i, a in enumerate(found.arms) if a.baseline), None)
    if base is None:
        return None
    label, mine = found.arms[base].label, estimates[base]
    head = (
        f"Across the {len(found.names)} datasets (IQM of normalised scores, {LEVEL:.0%} stratified bootstrap intervals)"
    )
    if mine is None or mine.why:
        return findings.Finding(findings.ACROSS, f"{head}: no arm is compared with the baseline {label}, whose "
                                                 f"aggregate is {_cell(found, found.arms[base], mine)}.")  # fmt: skip
    beyond, within, without = [], [], []
    for arm, e in zip(found.arms, estimates):
        if arm.baseline:
            continue
        if e is None or e.why:
            without.append(f"{arm.label} ({_cell(found, arm, e)})")
        elif e.lo > mine.hi or e.hi < mine.lo:
            beyond.append(f"{arm.label}'s {_cell(found, arm, e)} lies wholly {'above' if e.lo > mine.hi else 'below'}")
        else:
            within.append(arm.label)
    against = f"the baseline {label}'s {_cell(found, found.arms[base], mine)}"
    overlapping = f"{', '.join(within)} overlap{'s' if len(within) == 1 else ''} it" if within else ""
    if beyond:
        text = f"{head}, against {against}: {'; '.join(beyond)}" + (f"; {overlapping}" if within else "")
    else:
        text = f"{head}: no arm's interval excludes {against}" + (f" ({overlapping})" if within else "")
    text += f"; no interval to compare for {'; '.join(without)}" if without else ""
    return findings.Finding(findings.ACROSS, text + ".")


def _shown(arms: list[Arm], estimates: list[aggregates.Estimate | None]) -> list[Arm]:
    """The arms the profile plot draws, in the sweep's order: every complete one, or the baseline and the highest
    IQMs, `plots.MAX_CURVES` in all."""
    scored = {i: e.value for i, e in enumerate(estimates) if e is not None}
    ranked = sorted(scored, key=lambda i: (not arms[i].baseline, -scored[i]))
    keep = set(ranked[: plots.MAX_CURVES])
    return [a for i, a in enumerate(arms) if i in keep]


def _words(found: Datasets, data: SweepData) -> str:
    direction = "" if data.higher else f" (lower {data.metric} is better, so the scale is flipped)"
    run = "a seed" if data.replicates.exchangeable else "a repeat of the cross-validation, its folds averaged"
    return (f"{len(found.arms)} arms (variants less their dataset) on {len(found.names)} datasets. Each run (an "
            f"independent replicate: {run}) is normalised per dataset: 0 is the sweep's worst run on "
            f"that dataset and 1 its best (min-max over every arm's runs there){direction}, so each dataset weighs "
            "alike whatever its level; adding an arm can move the scale. The aggregate is the interquartile mean "
            "(IQM: the mean of the middle half of every run on every dataset, pooled) with its "
            f"{LEVEL:.0%} stratified bootstrap interval: runs resampled within each dataset, datasets kept "
            f"({aggregates.REPS:,} resamples, percentiles; Agarwal et al. 2021, rliable's definitions). The "
            "profile shows, at each normalised score tau, the fraction of runs above it (band: "
            f"{aggregates.PROFILE_REPS:,} such resamples); a curve above another at every tau is better on "
            "every part of the distribution.")  # fmt: skip


def _aggregate_table(found: Datasets, estimates: list[aggregates.Estimate | None]) -> Table:
    rows = []
    for arm, e in zip(found.arms, estimates):
        mean = f"{np.mean(np.concatenate(arm.scores)):.3f}" if e is not None else "-"
        rows.append([arm.label, str(sum(len(r) for r in arm.raw)), _cell(found, arm, e), mean])
    caption = (f"Normalised scores aggregated over {len(found.names)} datasets: IQM with its {LEVEL:.0%} stratified "
               "bootstrap interval, and the mean for comparison. n/a: no interval where a dataset has a single run "
               f"(resampling within it cannot vary), where every dataset's runs are equal, or from fewer than "
               f"{EXACT_N} runs; an arm missing a dataset gets no aggregate.")  # fmt: skip
    return Table(caption, ["arm", "runs", f"IQM [{LEVEL:.0%} interval]", "mean"], rows, left=1)


def _cell(found: Datasets, arm: Arm, e: aggregates.Estimate | None) -> str:
    """An arm's aggregate as the table and the Findings show it: IQM [interval], or why it has none."""
    if e is None:
        return f"- [n/a: no runs on {', '.join(n for n, r in zip(found.names, arm.raw) if not len(r))}]"
    return f"{e.value:.3f} " + (f"[n/a: {e.why}]" if e.why else f"[{e.lo:.3f}, {e.hi:.3f}]")


def _per_dataset(found: Datasets, data: SweepData) -> Table:
    digits = tables.digits(data)
    rows = [[arm.label, *(f"{tables.num(np.mean(r), digits)} ({len(r)})" if len(r) else "-" for r in arm.raw)]
            for arm in found.arms]  # fmt: skip
    ranges = "; ".join(f"{n} {tables.num(lo, digits)} to {tables.num(hi, digits)}"
                       for n, lo, hi in zip(found.names, found.worst, found.best))  # fmt: skip
    caption = (f"{data.metric} per dataset: the mean of each arm's runs (how many). Each dataset's scale, worst run "
               f"to best (0 to 1 normalised): {ranges}.")  # fmt: skip
    return Table(caption, ["arm", *found.names], rows, left=1)


def profile_plot(profiles: dict[str, aggregates.Profile], baseline: str | None, arms: int) -> bytes:
    """Each arm's performance profile with its band, the baseline in red."""
    rows = -(-len(profiles) // 2)
    fig = plots._figure(9, 4.6 + 0.17 * rows, legend=rows + 1)
    ax = fig.add_subplot()
    colors = [f"C{i}" for i in range(10) if i != 3]  # C3 is red: the baseline's
    for i, (label, p) in enumerate(profiles.items()):
        color = plots.BASE if label == baseline else colors[i % len(colors)]
        ax.step(p.taus, p.fraction, where="post", color=color, lw=1.4, label=plots._clip(label))
        if not np.isnan(p.lo).all():
            ax.fill_between(p.taus, p.lo, p.hi, step="post", color=color, alpha=0.15, lw=0)
    ax.set_xlabel("normalised score tau (0: the dataset's worst run, 1: its best)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    left = f", {len(profiles)} of {arms} arms" if len(profiles) < arms else ""
    fig.suptitle(f"performance profiles over the datasets' runs (band: {LEVEL:.0%} stratified bootstrap{left})",
                 fontsize=10)  # fmt: skip
    return plots._png(fig)
