"""Findings on whether the models trained at all, said before any comparison: which variants diverged and
where; a comparison of models that barely learned (scores near chance) or were stopped while still learning
(validation scores still rising at the last epoch) says more about the recipe than about the mechanisms, and
more seeds do not change that.

Near chance: a variant's mean top-k is below a quarter of the way from chance (k of C classes: 100 k / C) to
100. Still rising: the mean over a variant's replicates of the metric's validation twin (`val.top1`) is best at
the last epoch and better there than at the epoch three quarters through by more than RISE of the metric's
scale, read from up to TRIALS done trials per variant.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ablate.config import TrialConfig
from ablate.registry import DATASETS
from ablate.reporting import frames, tables
from ablate.reporting.findings import Finding
from ablate.reporting.frames import SweepData
from ablate.store import Store, divergence

NEAR_CHANCE, STILL_RISING, DIVERGED = "near chance", "still improving", "diverged"
NEAR = 0.25
"""Near chance: below this fraction of the way from chance to a perfect score."""
RISE = 0.01
"""Still rising: a gain over the last quarter of the epochs above this fraction of the metric's scale (100 for
percentages, 1 for scores in [0, 1])."""
TRIALS = 3
"""Done trials per variant whose epochs are read (the first in plan order): every trial's would dominate a large
sweep's report."""
LISTED = 3
"""Variants named per line; the rest are counted."""


def findings(store: Store, data: SweepData, table: pd.DataFrame) -> list[Finding]:
    """The lines on training that head the Findings (empty when every variant trained clear of chance and
    levelled off)."""
    found = (_diverged(data, table), _near_chance(data, table), _still_rising(store, data, table))
    return [f for f in found if f is not None]


def _diverged(data: SweepData, table: pd.DataFrame) -> Finding | None:
    """Which variants diverged, in how many of their trials, and where first (a variant with none done is in
    no comparison: without this line the report would only miss it)."""
    t = data.trials[data.trials["state"] == "diverged"]
    if t.empty:
        return None
    # each variant's first divergence: one stable sort of them all (a sort per variant took a large sweep's time)
    first = t.sort_values(["diverged_epoch", "diverged_step"]).drop_duplicates("variant")
    where = {v: divergence(e, s) for v, e, s in zip(first["variant"], first["diverged_epoch"], first["diverged_step"])}
    counts, labels, trials = t["variant"].value_counts(), table["label"], table["trials"]
    parts = []
    for v in t["variant"].unique():  # in the order the diverged trials come
        at = f", first {said.removeprefix('diverged ')}" if (said := where[v]) else ""
        parts.append(f"{labels[v]} in {counts[v]} of {int(trials[v])} trials{at}")
    named = "; ".join(parts[:LISTED]) + (f"; and {len(parts) - LISTED} more variants" if len(parts) > LISTED else "")
    lost = [v for v in t["variant"].unique() if table.loc[v, "n"] == 0]
    none = f" {len(lost)} of them with no trial done: compared with nothing." if lost else ""
    return Finding(DIVERGED, f"Diverged (loss not finite): {named}.{none} `ablate report` lists the trials under "
                             "Unfinished trials.")  # fmt: skip


def chance(data: SweepData, variant: str) -> float | None:
    """The top-k score of guessing among the variant's classes (100 k / C), for a top-k metric; None for
    other metrics or where the classes cannot be read without the data."""
    leaf = data.metric.rsplit(".", 1)[-1]
    if not (leaf.startswith("top") and leaf[3:].isdigit()):
        return None
    try:
        cfg = TrialConfig.model_validate(frames.own_config(data, variant))
        classes = cfg.model.num_classes or DATASETS.get(cfg.data.name).dims(cfg)[1]
    except Exception:  # a dataset that counts its classes from files absent here: no line, not a failed report
        return None
    return 100 * min(int(leaf[3:]), classes) / classes if classes else None


def _near_chance(data: SweepData, table: pd.DataFrame) -> Finding | None:
    if not data.higher:
        return None
    near = []
    measured = table[table["n"] > 0]
    for v, mean in zip(measured.index, measured["mean"]):
        c = chance(data, str(v))
        if c is not None and mean < c + NEAR * (100 - c):
            near.append((str(v), mean, c))
    if not near:
        return None
    d = tables.digits(data)
    named = "; ".join(f"{table.loc[v, 'label']} {tables.num(m, d)} (chance {tables.num(c, d)})"
                      for v, m, c in near[:LISTED])  # fmt: skip
    more = f"; and {len(near) - LISTED} more" if len(near) > LISTED else ""
    every = "every variant" if len(near) == int((table["n"] > 0).sum()) else f"{len(near)} variants"
    return Finding(
        NEAR_CHANCE,
        f"{every.capitalize()} scored near chance on {data.metric}: {named}{more}. Below a quarter of the way from "
        "chance to 100 the models barely learned, and their differences say little about the mechanisms: train "
        "longer or fix the recipe before adding seeds.",
    )


def _still_rising(store: Store, data: SweepData, table: pd.DataFrame) -> Finding | None:
    done = data.trials[data.trials["state"] == "done"]
    chosen = done.groupby("variant", sort=False).head(TRIALS)
    twin = frames.val_metric(data.metric)
    m = frames.metrics(store, [twin], chosen["key"].tolist())
    if m.empty:
        return None
    # each row's variant through its key's categorical code (no text per row)
    owner, names = pd.factorize(chosen["variant"])
    keys = m["key"].cat
    variant = owner[pd.Index(chosen["key"]).get_indexer(keys.categories)][keys.codes.to_numpy()]
    means = m.groupby([variant, m["step"].to_numpy()])["value"].mean()  # sorted by variant, then step
    codes, steps, values = (means.index.get_level_values(0).to_numpy(), means.index.get_level_values(1).to_numpy(),
                            means.to_numpy())  # fmt: skip
    starts = np.searchsorted(codes, np.arange(len(names) + 1))
    scale = 1.0 if tables.digits(data) == 4 else 100.0
    sign = 1 if data.higher else -1
    rising = []
    for code in pd.unique(variant):  # in the order the variants' rows come, as the Findings list them
        step, mean = steps[starts[code] : starts[code + 1]], values[starts[code] : starts[code + 1]]
        if len(mean) < 2:
            continue
        at = max(math.ceil(0.75 * len(mean)) - 1, 0)
        at = at if at < len(mean) - 1 else len(mean) - 2
        gain = sign * (mean[-1] - mean[at])
        finite = mean[~np.isnan(mean)]
        top = (finite.max() if data.higher else finite.min()) if len(finite) else np.nan
        if mean[-1] == top and gain > RISE * scale:
            rising.append((str(names[code]), gain, int(step[at]), int(step[-1])))
    if not rising:
        return None
    d = tables.digits(data)
    named = "; ".join(f"{table.loc[v, 'label']} {tables.num(g, d, True)} from epoch {a} to {e}"
                      for v, g, a, e in rising[:LISTED])  # fmt: skip
    more = f"; and {len(rising) - LISTED} more" if len(rising) > LISTED else ""
    measured = int((table["n"] > 0).sum())
    every = "every variant" if len(rising) == measured else f"{len(rising)} of {measured} variants"
    return Finding(
        STILL_RISING,
        f"{every.capitalize()} still improved at the last epoch ({twin}, mean over up to {TRIALS} seeds): {named}"
        f"{more}. The scores compared are those of unfinished training: more epochs (train.epochs) may change "
        "them and their order.",
    )
