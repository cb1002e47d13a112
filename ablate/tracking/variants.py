"""One MLflow run per variant of a sweep, holding the numbers its report prints for it (`VariantSummary`): the runs
the sweep's view (`ablate.tracking.view.sweep_view`) shows as bars, in place of one bar per trial.

Kept by `keep_variant_runs` whenever the sweep's summary is logged (`Tracker.summarise`): a variant's run is left
as it is while the report's numbers for it are, and replaced (the old one deleted) when they change, so the
experiment holds one such run per variant of the current report and never a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ablate.tracking.names import MAX_TAG, clip
from ablate.tracking.view import NUMBERS, SUMMARY

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient

MAX_VARIANTS = 50_000
"""Runs one search returns at most (MLflow's own limit): a sweep has far fewer variants."""


@dataclass(frozen=True)
class VariantSummary:
    """A variant as its sweep's report tells it: a short name (the values of the axes that vary between the
    variants), the report's label, and the numbers of its variant table under their MLflow names (`NUMBERS`;
    those the report could not measure left out)."""

    name: str
    label: str
    numbers: dict[str, float]


def variant_summaries(table: pd.DataFrame) -> dict[str, VariantSummary]:
    """Per variant (the index of the report's variants.csv as read back), its summary. A name that two variants
    would share (they differ in no axis the table lists) gains the variant key's head."""
    from ablate.reporting.describe import short, value

    axes = [c for c in table.columns if c.startswith("axis.") and table[c].astype(str).nunique() > 1]
    out: dict[str, VariantSummary] = {}
    for variant, row in table.iterrows():
        label = str(row["label"]) if isinstance(row["label"], str) else str(variant)
        name = ", ".join(f"{short(a)}={value(row[a].item() if hasattr(row[a], 'item') else row[a])}" for a in axes)
        name = name or label
        if name in {s.name for s in out.values()}:
            name = f"{name} {str(variant)[:8]}"
        numbers = {NUMBERS[c]: float(row[c]) for c in NUMBERS if c in row and row[c] == row[c]}
        out[str(variant)] = VariantSummary(name, label, numbers)
    return out


def keep_variant_runs(client: MlflowClient, exp: str, sweep: str, variants: dict[str, VariantSummary]) -> int:
    """Make the variant runs in experiment `exp` those of `variants` (empty: the sweep has no report, so none):
    a run whose name and numbers are the variant's stays, the missing ones are made (ended at once: nothing runs
    under them), then every other variant run is deleted. Two processes keeping them at once may each make a
    variant's run: each keeps the newest once its own are made, so one is left. Returns the runs made."""
    from mlflow.entities import Metric

    tag, kind = SUMMARY
    kept = _sorted(client, exp, variants)[0]  # one search (once per variant was 2.5 s of a 64-variant summary)
    made = [v for v in variants if v not in kept]
    stamp = int(time.time() * 1000)
    for variant in made:
        summary = variants[variant]
        note = f"{summary.label}: its numbers in the report of sweep {sweep}"
        tags = {tag: kind, "sweep": sweep, "variant": variant, "label": clip(summary.label, MAX_TAG),
                "mlflow.note.content": clip(note, MAX_TAG)}  # fmt: skip
        run_id = client.create_run(exp, tags=tags, run_name=summary.name).info.run_id
        client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in summary.numbers.items()])
        client.set_terminated(run_id, "FINISHED")
    for run_id in _sorted(client, exp, variants)[1]:
        client.delete_run(run_id)
    return len(made)


def _sorted(client: MlflowClient, exp: str, variants: dict[str, VariantSummary]) -> tuple[dict[str, str], list[str]]:
    """The variant runs of `exp`: per variant of `variants` the newest run holding its name and numbers, and the
    ids of all the others (older copies, other numbers, variants the report no longer has)."""
    tag, kind = SUMMARY
    keep: dict[str, str] = {}
    other: list[str] = []
    runs = client.search_runs([exp], f"tags.{tag} = '{kind}'", max_results=MAX_VARIANTS,
                              order_by=["attributes.start_time DESC"])  # fmt: skip
    for run in runs:
        variant = run.data.tags.get("variant", "")
        want = variants.get(variant)
        if variant in keep or want is None or (run.info.run_name, run.data.metrics) != (want.name, want.numbers):
            other.append(run.info.run_id)
        else:
            keep[variant] = run.info.run_id
    return keep, other
