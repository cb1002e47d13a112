"""Runs ablate did not train, as trials of a sweep: which of a run's parameters are axes and which is the seed, which
metric is the headline and which epoch's values are the result (`Mapping`), turned into the store's rows
(`to_dump`), every run checked before any row is made.

An imported trial's config holds its parameters under `params` (`params.lr`: the axes are those paths, so a
parameter named `model` or `data` never meets the sections ablate's own trials have) and its seed at `seed`;
`model.backbone`, `data.name` and `attention.kind` say `imported`, the source's experiment and `run` where a
report puts a variant in words. Its key is a hash of where it came from (the MLflow run id; a table's sweep, cell
and seed), so importing the same runs again adds nothing. It has no code record: it is never stale, and no launch
plans its key, so none trains it again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ablate.spec.metrics import DIRECTIONS, higher_is_better
from ablate.spec.paths import set_path
from ablate.store.dump import Dump

KEY_VERSION = "ablate-import-v1"
SELECT = ("last", "best")
"""Which epoch's values are a run's result: its last, or the one where the headline metric is best."""
DIRECTION = ("max", "min")
DUPLICATES = ("refuse", "first", "last")
"""What to do with runs that claim the same cell and seed: refuse the import, or keep the first or last started."""
PARAMS = "params"
"""Where an imported trial's config holds its parameters (its axes are `params.<name>`)."""


class ImportProblem(ValueError):
    """Runs that cannot be imported as asked, every problem at once; nothing was written."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Point:
    """One value of a metric's history."""

    step: int
    value: float
    wall_time: float | None = None


@dataclass
class Run:
    """One run as its source holds it: parameters (typed values), tags, metric histories, how it ended."""

    run_id: str
    params: dict[str, Any]
    metrics: dict[str, list[Point]]
    tags: dict[str, Any] = field(default_factory=dict)
    state: str = "done"
    """done or failed (a source's other states are mapped by its reader, or the run left out)."""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None


@dataclass(frozen=True)
class Source:
    """Where runs come from: `mlflow` or `table`, its URI (tracking URI or file) and experiment (id or file name)."""

    kind: str
    uri: str
    experiment: str

    def of(self, run: Run) -> dict[str, Any]:
        """What a trial records of its source."""
        return {"kind": self.kind, "uri": self.uri, "experiment": self.experiment, "run_id": run.run_id}


@dataclass(frozen=True)
class Mapping:
    """How runs become a sweep's trials."""

    sweep: str
    seed: str
    """The parameter (or tag, a column) that holds each run's seed: an integer."""
    axes: tuple[str, ...] | None = None
    """The parameters that make the cells; None: every parameter but the seed and `ignore`."""
    metric: str | None = None
    """The headline metric; None: the first metric, by name."""
    direction: str | None = None
    """Which way the headline metric is better, max or min; None: what its name says."""
    select: str = "last"
    baseline: dict[str, Any] | None = None
    """The baseline cell: {parameter: value}."""
    ignore: tuple[str, ...] = ()
    """Parameters that are neither axes nor the seed (kept in the config)."""
    duplicates: str = "refuse"
    description: str | None = None


@dataclass(frozen=True)
class Converted:
    """The rows of the imported runs and what was left out, in words."""

    dump: Dump
    runs: int
    notes: list[str]


def digest(*parts: Any) -> str:
    """A key: the hash of `parts`, 20 hex digits as ablate's trial keys."""
    text = json.dumps([KEY_VERSION, *parts], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _seed(run: Run, name: str) -> int | str:
    """The run's seed, or the words of why it has none usable."""
    value = run.params.get(name, run.tags.get(name))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"run {run.run_id}: no seed (no parameter or tag {name!r})"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        return f"run {run.run_id}: seed {name}={value!r} is not an integer"
    return int(value)


def _headline(runs: Sequence[Run], metric: str | None) -> str:
    if metric is not None:
        return metric
    names = sorted({n for r in runs for n in r.metrics})
    if not names:
        raise ImportProblem(["the runs record no metric: nothing to report"])
    return names[0]


def _result(run: Run, metric: str, select: str, higher: bool) -> tuple[dict[str, float], int | None]:
    """The run's result (each metric at the chosen epoch, or its last value) and the chosen step."""
    history = run.metrics.get(metric, [])
    finite = [p for p in history if math.isfinite(p.value)]
    if select == "best" and finite:
        pick = (max if higher else min)(finite, key=lambda p: p.value)
        at: dict[str, float] = {}
        for name, points in run.metrics.items():
            values = [p.value for p in points if p.step == pick.step]
            if values:
                at[name] = values[-1]
        return at, pick.step
    return {name: points[-1].value for name, points in run.metrics.items() if points}, None


def to_dump(runs: Sequence[Run], mapping: Mapping, source: Source, *, now: datetime | None = None) -> Converted:
    """The sweep's record, its trials, memberships and metric rows of `runs`; ImportProblem with every problem
    (no seed, a seed that is not an integer, an unknown axis or metric, two runs in one cell with one seed under
    `duplicates="refuse"`)."""
    if not runs:
        raise ImportProblem([f"{source.kind} {source.experiment} ({source.uri}): no runs to import"])
    if mapping.select not in SELECT:
        raise ImportProblem([f"select {mapping.select!r}: expected one of {', '.join(SELECT)}"])
    if mapping.direction is not None and mapping.direction not in DIRECTION:
        raise ImportProblem([f"direction {mapping.direction!r}: expected one of {', '.join(DIRECTION)}"])
    if mapping.duplicates not in DUPLICATES:
        raise ImportProblem([f"duplicates {mapping.duplicates!r}: expected one of {', '.join(DUPLICATES)}"])
    t = now or datetime.now(timezone.utc)
    metric = _headline(runs, mapping.metric)
    stated = {metric: mapping.direction} if mapping.direction else {}
    params = sorted({p for r in runs for p in r.params})
    axes = list(mapping.axes) if mapping.axes is not None else [
        p for p in params if p != mapping.seed and p not in mapping.ignore]  # fmt: skip
    problems = [f"no parameter {a!r} in any run (parameters: {', '.join(params) or 'none'})" for a in axes
                if a not in params]  # fmt: skip
    if not any(metric in r.metrics for r in runs):
        recorded = sorted({n for r in runs for n in r.metrics})
        problems.append(f"no run records metric {metric!r} (metrics: {', '.join(recorded) or 'none'})")
    if mapping.baseline and (bad := [a for a in mapping.baseline if a not in axes]):
        problems.append(f"baseline: {', '.join(map(repr, bad))} is not an axis (axes: {', '.join(axes)})")
    seeds = {r.run_id: _seed(r, mapping.seed) for r in runs}
    problems += [s for s in seeds.values() if isinstance(s, str)]
    if problems:
        raise ImportProblem(problems)
    cells: dict[tuple[str, int], list[Run]] = {}
    labels = {}  # each run's cell, as text: what groups runs into cells and cells into variants
    for r in runs:
        labels[r.run_id] = json.dumps({a: r.params.get(a) for a in axes}, sort_keys=True, default=str)
        cells.setdefault((labels[r.run_id], int(seeds[r.run_id])), []).append(r)
    kept, notes = _one_per_cell(cells, mapping.duplicates)
    if notes and mapping.duplicates == "refuse":
        raise ImportProblem([*notes, "pass --duplicates first or last to keep one of each (by start time)"])
    rows = Dump(sweeps=[{"name": mapping.sweep, "spec_path": None, "spec": _spec(mapping, source, axes, stated),
                         "baseline": None, "metric": metric, "description": mapping.description or
                         f"Runs imported from {source.kind} {source.experiment} ({source.uri}).",
                         "created_at": t, "updated_at": t}])  # fmt: skip
    variants: dict[str, str] = {}
    higher = higher_is_better(metric, stated)
    for position, run in enumerate(kept):
        seed = int(seeds[run.run_id])
        cell = {f"{PARAMS}.{a}": run.params.get(a) for a in axes}
        key = digest(source.kind, run.run_id) if source.kind == "mlflow" else digest(source.kind, mapping.sweep,
                                                                                    cell, seed)  # fmt: skip
        label = labels[run.run_id]
        variant = variants.get(label) or variants.setdefault(label, digest(mapping.sweep, cell))
        result, _ = _result(run, metric, mapping.select, higher)
        state, error = run.state, run.error
        if state == "done" and not (metric in result and math.isfinite(result[metric])):
            state, error = "failed", f"no value of {metric} recorded"
            notes.append(f"run {run.run_id}: finished without a value of {metric}: imported as failed")
        axes_of = {**cell, "seed": seed}
        rows.trials.append({
            "key": key, "variant": variant, "config": _config(run, seed, source), "axes": axes_of,
            "state": state, "attempts": 1, "created_at": run.started_at or t, "started_at": run.started_at,
            "finished_at": run.finished_at, "error": error, "traceback": error, "host": None, "node_id": None,
            "device": None, "params": None, "flops": None, "peak_memory": None, "environment": None,
            "result": {k: v for k, v in result.items() if math.isfinite(v)} if state == "done" else None,
            "diverged_epoch": None, "diverged_step": None, "resumed_from": None, "code": None, "code_digest": None,
            "checkpoint": None, "source": source.of(run),
        })  # fmt: skip
        rows.members.append({"sweep": mapping.sweep, "trial_key": key, "axes": axes_of,
                             "position": position, "planned": True})  # fmt: skip
        rows.metrics += [{"trial_key": key, "name": name, "step": p.step,
                          "value": p.value if math.isfinite(p.value) else None, "wall_time": p.wall_time}
                         for name, points in run.metrics.items() for p in _last_per_step(points)]  # fmt: skip
    if mapping.baseline:
        wanted = {f"{PARAMS}.{a}": v for a, v in mapping.baseline.items()}
        hits = [t["variant"] for t in rows.trials if all(_same(t["axes"].get(a), v) for a, v in wanted.items())]
        if not hits:
            raise ImportProblem([f"baseline {mapping.baseline}: no run has these values"])
        rows.sweeps[0]["baseline"] = hits[0]
    return Converted(rows, len(kept), notes)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b or str(a) == str(b)


def _last_per_step(points: list[Point]) -> list[Point]:
    """One point per step (the last logged): the store keeps one value per trial, metric and step."""
    return points if len(points) < 2 else list({p.step: p for p in points}.values())


def _one_per_cell(cells: dict[tuple[str, int], list[Run]], duplicates: str) -> tuple[list[Run], list[str]]:
    """One run per cell and seed, in the runs' order, and a note per cell claimed by several."""
    kept, notes = [], []
    for (cell, seed), claimed in cells.items():
        if len(claimed) == 1:
            kept.append(claimed[0])
            continue
        ids = ", ".join(r.run_id for r in claimed)
        notes.append(f"runs {ids} claim the same cell {cell} and seed {seed}")
        if duplicates != "refuse":
            ordered = sorted(claimed, key=lambda r: r.started_at or datetime.min.replace(tzinfo=timezone.utc))
            kept.append(ordered[0] if duplicates == "first" else ordered[-1])
    return kept, notes


def _config(run: Run, seed: int, source: Source) -> dict[str, Any]:
    """An imported trial's config: its parameters under `params`, its seed, and the words a report puts it in."""
    params: dict[str, Any] = {}
    for name, value in sorted(run.params.items()):
        if "." in name:
            set_path(params, name, value)
        else:  # a name of one part: set_path's walk and copy of the value would make the same dict slower
            params[name] = value
    return {"seed": seed, PARAMS: params, "model": {"backbone": "imported"}, "data": {"name": source.experiment},
            "attention": {"kind": "run"}}  # fmt: skip


def _spec(mapping: Mapping, source: Source, axes: list[str], stated: dict[str, str]) -> dict[str, Any]:
    """What the sweep's record keeps of how it was imported (its axes are what its report groups by, the direction
    stated for its headline metric the way its report reads it: `ablate.spec.metrics.higher_is_better`)."""
    spec = {"axes": [f"{PARAMS}.{a}" for a in axes], "imported": {"kind": source.kind, "uri": source.uri,
            "experiment": source.experiment, "seed": mapping.seed, "select": mapping.select}}  # fmt: skip
    return {**spec, DIRECTIONS: stated} if stated else spec
