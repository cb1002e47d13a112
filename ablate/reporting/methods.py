"""The methods paragraph of a sweep's report (`methods.md`, `methods.tex`): what a paper says of how its numbers were
made, written from the store and the sweep's record, so that each sentence is true of the sweep it describes.

One sentence per fact (`SENTENCES`): the design and its replicates, the training recipe, the tuning of the arms
(budget, space, selection rule) and its curves' bands, the tests the variant table used and the policy that chose
them, the correction, the intervals, the hardware and software the trials recorded, and the code fingerprint. A
fact the store does not hold (no environment recorded, no tuning) makes no sentence: the paragraph says less rather
than guess. The tests and intervals are named from the variant table's own columns (`TESTS`, `INTERVALS`: a new
test or interval method adds its line there). `methods.tex` is a fragment to `\\input` (booktabs): the paragraph,
then the report's tables with their captions, as tables.tex has them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from ablate.evidence import EXACT_N, LEVEL, SMALL_N, bootstrap
from ablate.planning.tuning import space_words
from ablate.reporting import bands, render, stats
from ablate.reporting.frames import SweepData, own_config
from ablate.reporting.render import Section, Table
from ablate.reporting.tuning import searches_of
from ablate.spec.paths import get_path, overlaps
from ablate.spec.tuning import Searches
from ablate.store import Store
from ablate.store.queries import Provenance

FILES = ("methods.md", "methods.tex")


@dataclass(frozen=True)
class Method:
    """A test as the paragraph names it: the test, when the small-sample policy gives it, its interval."""

    test: str
    when: str
    interval: str


TESTS = {
    stats.T_TEST: Method("the paired t-test", f"from {SMALL_N} pairs", "the t interval of the mean paired difference"),
    stats.SIGN_FLIP: Method("the exact sign-flip (randomisation) test of the mean paired difference",
                            f"from {EXACT_N} to {SMALL_N - 1} pairs", "the interval that inverts the sign-flip test"),
    stats.CORRECTED: Method("the corrected resampled t-test of Nadeau and Bengio (2003) over the folds",
                            f"from {SMALL_N} fold differences", "the corrected resampled t interval"),
}  # fmt: skip
"""The variant table's `test` names -> the paragraph's words. A new test adds its line."""

INTERVALS = {
    "d_lo": "standardised effects (Cohen's d_z, the mean paired difference over its standard deviation) with "
    "noncentral-t intervals beside the t-tests",
    "b_lo": f"paired bootstrap intervals beside the t-tests (BCa, {bootstrap.RESAMPLES:,} resamples of the seed "
    "differences, scipy)",
}
"""Intervals the variant table holds beyond each test's own: a column (its lower bound) -> the words of how they were
computed, said where a row has one. A new interval method adds its line."""

RECIPE = {
    "data.name": "dataset {}",
    "train.epochs": "{} epochs",
    "train.opt": "optimizer {}",
    "train.lr": "learning rate {}",
    "train.weight_decay": "weight decay {}",
    "train.batch_size": "batch size {}",
    "train.sched": "{} learning-rate schedule",
    "train.warmup_epochs": "{} warm-up epochs",
    "train.label_smoothing": "label smoothing {}",
    "train.mixup": "mixup {}",
    "train.cutmix": "cutmix {}",
    "train.grad_clip": "gradients clipped at norm {}",
}
"""The training recipe's config paths and their words; a value that differs between variants is said per variant."""
OPTIONAL = {"train.warmup_epochs", "train.label_smoothing", "train.mixup", "train.cutmix", "train.grad_clip"}
"""Recipe paths said only where some variant uses them (not zero, not none)."""

SOFTWARE = {"python": "Python", "torch": "PyTorch", "ablate": "ablate"}
"""`Provenance`'s versions, by field, and their names in the paragraph."""


@dataclass(frozen=True)
class Facts:
    """What the paragraph is written from: the sweep, its variant table and correction, its tuning record (None:
    not tuned), what its finished trials were computed with, and the median bands of its tuned arms that the
    report's Findings compare (`ablate.reporting.tuning`; none where not tuned)."""

    data: SweepData
    table: pd.DataFrame
    correction: str
    searches: Searches | None
    provenance: list[Provenance]
    medians: Mapping[str, bands.Band] = field(default_factory=dict)

    @property
    def compared(self) -> pd.DataFrame:
        """The variant table's rows compared with a reference (those whose p-values are adjusted together)."""
        t = self.table
        return t[t["ref"].notna() & (t.index != t["ref"]) & (t["pairs"] > 1)]


def facts(
    store: Store,
    data: SweepData,
    table: pd.DataFrame,
    correction: str,
    medians: Mapping[str, bands.Band] | None = None,
) -> Facts:
    """The facts of one sweep's report: its tuning record, the provenance of its finished trials read in one
    grouped query, and its tuned arms' median bands as the report made them."""
    done = data.trials.loc[data.trials["state"] == "done", "key"].unique()
    found = store.provenance(done.tolist())
    return Facts(data, table, correction, searches_of(store, data.name), found, dict(medians or {}))


def _value(v: Any) -> str:
    """A config value as the store holds it (shortest exact float: a reader can trace it)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "on" if v else "off"
    return "none" if v is None else str(v)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _seeds(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]} to {seeds[-1]}"
    return ("seed " if len(seeds) == 1 else "seeds ") + _and([str(s) for s in seeds])


def design(f: Facts) -> str | None:
    """The variants, how they were chosen, the seeds they ran at, the replicates each mean is over, and the metric."""
    data, t = f.data, f.table
    shown = t[t["n"] > 0]
    if shown.empty:
        return None
    over = f"{_range(shown['n'], 'independent seed')} with a result"
    if data.replicates.folds is not None:  # the table's mean is over every fold's result, n counts the repeats
        over = (f"{_range(shown['values'], 'fold result')}, from {_range(shown['n'], 'independent repeat')} of a "
                f"{data.replicates.folds}-fold cross-validation")  # fmt: skip
    grid = f" over {_and([f'`{a}`' for a in data.axes])}" if data.axes else ""
    chosen = data.design
    how = (f", the cells of a {chosen.title} ({len(chosen.runs)} of the full grid's {chosen.full})"
           if chosen is not None else "")  # fmt: skip
    base = f"; the baseline is {t.loc[data.baseline, 'label']}" if data.baseline in t.index else ""
    done = int((data.trials["state"] == "done").sum())
    ran = (f"all {done} finished" if done == len(data.trials)
           else f"{done} of {len(data.trials)} finished, and only those enter the statistics")  # fmt: skip
    seeds = _seeds(sorted(int(s) for s in data.trials["seed"].unique()))
    return (f"We compare {len(t)} variants{grid}{how}{base}. The trials ran at {seeds} ({ran}); each variant's mean "
            f"and standard deviation of `{data.metric}` ({'higher' if data.higher else 'lower'} is better) are over "
            f"its {over}.")  # fmt: skip


def recipe(f: Facts) -> str | None:
    """The training recipe: each path of `RECIPE` the variants share, or its value per variant where they differ
    (a grid axis, say), less what the tuning searched."""
    searched = set(f.searches.spec.space) if f.searches is not None else set()
    rows = f.data.variants.loc[f.table.index]
    axes = [f"axis.{a}" for a in f.data.axes if any(overlaps(a, p) for p in RECIPE)]
    cells = zip(map(id, rows["config"]), rows[axes].astype(str).itertuples(index=False, name=None))
    picked = dict(zip(cells, rows.index)).values()  # a variant per config read and recipe axes' values
    configs = [own_config(f.data, str(v)) for v in picked]
    said = []
    for path, words in RECIPE.items():
        if path in searched:
            continue
        values = list(dict.fromkeys(_value(get_path(c, path)) for c in configs))
        if path in OPTIONAL and set(values) <= {"none", "0", "0.0"}:
            continue
        said.append(words.format(_and(values) if len(values) == 1 else f"{_and(values)} (by variant)"))
    return re.sub(r"(?<![\d.])1 (epoch|warm-up epoch)s", r"1 \1", f"Training: {', '.join(said)}.") if said else None


def tuning(f: Facts) -> str | None:
    """The tuned arms' search: budget, space, sampler, selection rule, and arms whose search has not finished."""
    if f.searches is None:
        return None
    spec, arms = f.searches.spec, f.searches.arms
    rule = "highest" if spec.direction == "max" else "lowest"
    open_ = sum(a.best is None for a in arms)
    left = (f" The search of {open_} of the {len(arms)} arms has not finished: their comparisons are provisional."
            if open_ else "")  # fmt: skip
    return (f"Each of the {len(arms)} arms was tuned alike, with a budget of {spec.budget} configurations of "
            f"{space_words(spec)}, proposed by Optuna's {spec.sampler} sampler (seed {spec.seed}, the same for every "
            f"arm) in rounds of {spec.batch}, each trained at the arm's first seed; the configuration with the {rule} "
            f"`{spec.metric}` was selected (the test split selected nothing), and the seeds above ran at each arm's "
            f"selected configuration.{left}")  # fmt: skip


def tuning_bands(f: Facts) -> str | None:
    """The tuning curves and their bands: which curves, how the bands were made, their confidence over the arms,
    the range of scores they assume, and that the Findings compare the median bands."""
    if f.searches is None or not f.medians:
        return None
    spec, found = f.searches.spec, list(f.medians.values())
    each = found[0].confidence
    ran = _range(pd.Series([len(b.lo) for b in found]), "configuration")
    lo, hi = bands.bounds(spec.metric)
    ends = (math.isfinite(lo), math.isfinite(hi))
    within = {(True, True): f"within [{lo:g}, {hi:g}]", (True, False): f"at or above {lo:g}",
              (False, True): f"at or below {hi:g}", (False, False): "anywhere"}[ends]  # fmt: skip
    return (f"Each arm's tuning curves, the expected (Dodge et al.) and the median best `{spec.metric}` of n "
            f"configurations drawn from its search's results, for every n up to its {ran} with a result, have "
            "distribution-free confidence bands simultaneous over n (Lourie, He and Cho: the exact Kolmogorov-Smirnov "
            f"band of the scores' distribution, computed with opda), each arm's at {each * 100:.4g}% so that the "
            f"{_count(len(found), 'arm')}' bands hold together at {LEVEL:.0%}, for scores {within}; "
            "an arm is called better once tuned at the budgets n where its median band lies wholly beyond the "
            "other's.")  # fmt: skip


def tests(f: Facts) -> str | None:
    """The paired tests the variant table used, the policy that chose each, and the comparisons left without one."""
    compared = f.compared
    if compared.empty:
        return None
    used = compared["test"].value_counts()
    unit = f.data.replicates.unit
    untested = compared[compared["test"] == ""]
    flat = int(untested["why"].str.startswith("zero spread").sum())
    said = [f"{TESTS[name].test} ({TESTS[name].when}) for {_count(n, 'comparison')}"
            for name, n in used.items() if name in TESTS]  # fmt: skip
    said += [
        f"no test for {_count(n, 'comparison')} ({why}: neither p-value nor interval)"
        for n, why in ((len(untested) - flat, f"too few {unit}s for any test"), (flat, "differences without spread"))
        if n
    ]
    return (f"Each variant is compared with the baseline by the paired difference over the {unit}s both have "
            f"(replicate r of the variant against replicate r of the baseline): {_and(said)}.")  # fmt: skip


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _range(counts: pd.Series, noun: str) -> str:
    """`lo to hi nouns`, or `n noun(s)` where every count is n."""
    lo, hi = int(counts.min()), int(counts.max())
    return _count(lo, noun) if lo == hi else f"{lo} to {hi} {noun}s"


def correction(f: Facts) -> str | None:
    """How the table's p-values were adjusted together."""
    k = int(f.table["p_adj"].notna().sum())
    alpha = f"a difference is significant at {'an adjusted ' if k > 1 else ''}p below {1 - LEVEL:.2f}"
    if k <= 1:
        return f"With one test in the variant table, no p-value needed adjusting; {alpha}." if k else None
    controls = {"holm": "the family-wise error rate", "bh": "the false discovery rate"}[f.correction]
    return (
        f"The {k} p-values of the variant table are adjusted together by {stats.CORRECTIONS[f.correction]}'s "
        f"method, which controls {controls}; {alpha}."
    )


def intervals(f: Facts) -> str | None:
    """How the intervals beside the tests, and any further ones the table holds, were computed."""
    compared = f.compared
    own = [TESTS[name].interval for name in dict.fromkeys(compared["test"]) if name in TESTS]
    more = [words for column, words in INTERVALS.items() if column in compared and compared[column].notna().any()]
    if not own and not more:
        return None
    return f"Intervals are {LEVEL:.0%}: {_and([*own, *more])}."


def hardware(f: Facts) -> str | None:
    """The devices and software versions the finished trials recorded, each with its trials where they differ."""
    total = sum(p.trials for p in f.provenance)
    devices = _shares(f.provenance, _device)
    versions = [
        f"{name} {words}" for field, name in SOFTWARE.items() if (words := _shares(f.provenance, attrgetter(field)))
    ]
    if not devices and not versions:
        return None
    known = sum(p.trials for p in f.provenance if _device(p) is not None or any(map(p.__getattribute__, SOFTWARE)))
    some = f" (as {known} of the {total} recorded it)" if known < total else ""
    said = [*([f"on {devices}"] if devices else []), *([f"with {_and(versions)}"] if versions else [])]
    return f"The finished trials ran {', '.join(said)}{some}."


def _device(p: Provenance) -> str | None:
    """The device in words: a GPU's name, or a CPU with its model (an older record's `cpu:x86_64`: its machine)."""
    kind, name = (p.device, p.cpu) if p.device is not None else (p.host_device or "").partition(":")[::2]
    if kind == "cpu":
        return f"a CPU ({name})" if name else "a CPU"
    return (name if kind == "cuda" else kind) or None


def _shares(rows: Iterable[Provenance], of: Callable[[Provenance], str | None]) -> str:
    """The distinct known values of `of` over `rows`, in words; each with its trials where there are several."""
    counts: dict[str, int] = {}
    for p in rows:
        if (v := of(p)) is not None:
            counts[v] = counts.get(v, 0) + p.trials
    if len(counts) <= 1:
        return next(iter(counts), "")
    return _and([f"{v} ({n} trials)" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])])


def code(f: Facts) -> str | None:
    """The code fingerprints the finished trials recorded, with the git state of the experiments' checkout."""
    digests = _shares(f.provenance, lambda p: f"`{p.digest}`" if p.digest else None)
    if not digests:
        return None
    commits = _shares(f.provenance, _commit)
    stale = f" ({len(f.data.stale)} of them computed by code that has changed since)" if f.data.stale else ""
    several = "s" if " and " in digests else ""
    return (
        f"The results were computed by code with fingerprint{several} {digests}{stale} (ablate's digest of the "
        f"code of each trial's components and training loop){f', from {commits}' if commits else ''}."
    )


def _commit(p: Provenance) -> str | None:
    if p.git_sha is None:
        return None
    changes = {True: ", with uncommitted changes", False: "", None: ""}[p.git_dirty]
    return f"git commit {p.git_sha}{changes}"


SENTENCES: tuple[Callable[[Facts], str | None], ...] = (design, recipe, tuning, tuning_bands, tests, correction,
                                                         intervals, hardware, code)  # fmt: skip
"""The paragraph's sentences in order; each says nothing (None) where the store does not hold its fact."""


def paragraph(f: Facts) -> str:
    """The methods paragraph: every sentence the facts support, in `SENTENCES`' order."""
    return " ".join(s for make in SENTENCES if (s := make(f)) is not None)


def markdown(name: str, text: str, sections: list[Section]) -> str:
    """methods.md: the paragraph under a heading, then the report's tables with their captions."""
    tables = [Section(s.title, [b for b in s.blocks if isinstance(b, Table)]) for s in sections if s.latex]
    return render.markdown(f"Methods: {name}", [text], [s for s in tables if s.blocks])


def latex(name: str, text: str, sections: list[Section]) -> str:
    """methods.tex: a fragment to `\\input` into a paper that loads booktabs: the paragraph, then the tables."""
    head = [f"% ablate report: the methods of sweep {name} (needs \\usepackage{{booktabs}})", "", render.tex(text), ""]
    return "\n".join(head + render.latex_tables(sections)) + "\n"


def files(f: Facts, sections: list[Section]) -> dict[str, str]:
    """The methods files by name: the paragraph of `f`, and the tables of the report's `sections`."""
    text = paragraph(f)
    return dict(zip(FILES, (markdown(f.data.name, text, sections), latex(f.data.name, text, sections))))
