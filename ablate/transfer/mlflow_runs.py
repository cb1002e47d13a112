"""Runs from an MLflow experiment: a tracking URI (a local `mlruns` folder, an SQLite file or a server) and an
experiment by name or id, read through MLflow's own client.

Parameters are MLflow's text, read as YAML values (`0.01` a number, `resnet18` text); every metric's history is
read whole (its steps are the epochs); a FINISHED run is done, a FAILED or KILLED one failed, and a run still
RUNNING or SCHEDULED is left out (said in a note: an import once it ended adds it), and so are the runs ablate
made there itself (`ablate sync` of a sweep imported from this experiment puts its summary beside them). A
`mlruns` folder is read with MLFLOW_ALLOW_FILE_STORE set: MLflow 3 refuses its file store otherwise, and reading a
folder of old runs is what it is for here.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ablate.spec.paths import typed_value
from ablate.store import sqlite_file
from ablate.tracking.view import SUMMARY
from ablate.transfer.runs import ImportProblem, Point, Run, Source

STATES = {"FINISHED": "done", "FAILED": "failed", "KILLED": "failed"}
PAGE = 10_000
BULK = 500
"""Runs per query of their metric histories from a database tracking store (well under SQLite's bound parameters)."""


def tracking_uri(where: str) -> str:
    """A tracking URI from what a user gives: a URI as it is (a SQLite one made absolute, as `ablate sync` spells
    it), a folder (`mlruns`) as a file URI, a file as SQLite."""
    if "://" in where or where.startswith("file:"):
        db = sqlite_file(where) if where.startswith("sqlite") else None
        return f"sqlite:///{db.resolve()}" if db is not None else where
    path = Path(where).expanduser().resolve()
    if path.is_file():
        return f"sqlite:///{path}"
    if path.is_dir():
        return path.as_uri()
    raise ImportProblem([f"{where}: no such folder or file (an MLflow tracking URI, `mlruns` folder or SQLite file)"])


def _typed(text: str) -> Any:
    try:
        return typed_value(text)
    except Exception:  # not YAML: the text itself
        return text


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)


def made_by_ablate(tags: dict[str, str], params: dict[str, str]) -> bool:
    """Whether a run is one ablate's mirror made: a trial's run (tag `trial_key`), a variant's summary run, or a
    sweep's parent run (tag `sweep`, no parameters)."""
    return "trial_key" in tags or tags.get(SUMMARY[0]) == SUMMARY[1] or ("sweep" in tags and not params)


def _histories(client: Any, listed: list[Any]) -> dict[tuple[str, str], list[Any]]:
    """Every metric history of the `listed` runs, by (run id, metric name). A database MLflow's SqlAlchemyStore
    reads (SQLite, PostgreSQL, ...) answers a query per metric and BULK runs (its `get_metric_history_bulk`, which
    its client does not offer: a call per run and metric was the whole cost of reading 10,000 runs); a server or a
    `mlruns` folder a call per run and metric."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    out: dict[tuple[str, str], list[Any]] = {}
    if not isinstance(store, SqlAlchemyStore):
        for r in listed:
            for name in r.data.metrics:
                out[r.info.run_id, name] = client.get_metric_history(r.info.run_id, name)
        return out
    for name in sorted({n for r in listed for n in r.data.metrics}):
        having = [r.info.run_id for r in listed if name in r.data.metrics]
        for i in range(0, len(having), BULK):
            for m in store.get_metric_history_bulk(having[i : i + BULK], name, max_results=2**62):  # type: ignore[no-untyped-call]
                out.setdefault((m.run_id, name), []).append(m)
    return out


def runs(where: str, experiment: str) -> tuple[list[Run], Source, list[str]]:
    """The ended runs of `experiment` (a name or an id) at `where`, their source, and notes on runs left out."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(where)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    try:
        found = client.get_experiment_by_name(experiment)
        if found is None and experiment.isdigit():
            found = client.get_experiment(experiment)
    except MlflowException as e:
        raise ImportProblem([f"{uri}: experiment {experiment!r}: {e.message}"]) from None
    if found is None:
        names = [e.name for e in client.search_experiments()]
        raise ImportProblem([f"{uri}: no experiment named {experiment!r} (experiments: {', '.join(names) or 'none'})"])
    listed, token = [], None
    while True:
        page = client.search_runs([found.experiment_id], max_results=PAGE, page_token=token)
        listed += list(page)
        token = page.token
        if not token:
            break
    out, notes = [], []
    ours = [r for r in listed if made_by_ablate(r.data.tags, r.data.params)]
    if ours:
        notes.append(f"{len(ours)} runs ablate made (a sweep's summary, its variants' or its trials' runs): left out")
    ended = []
    for r in (r for r in listed if not made_by_ablate(r.data.tags, r.data.params)):
        if r.info.status in STATES:
            ended.append(r)
        else:
            notes.append(f"run {r.info.run_id} is {r.info.status}: left out (import again once it ends)")
    points = _histories(client, ended)
    for r in ended:
        state = STATES[r.info.status]
        histories = {name: [Point(int(m.step), float(m.value), m.timestamp / 1000)
                            for m in sorted(points.get((r.info.run_id, name), []), key=lambda m: (m.step, m.timestamp))]
                     for name in sorted(r.data.metrics)}  # fmt: skip
        out.append(Run(r.info.run_id, {k: _typed(v) for k, v in r.data.params.items()}, histories,
                       {k: _typed(v) for k, v in r.data.tags.items() if not k.startswith("mlflow.")}, state,
                       _time(r.info.start_time), _time(r.info.end_time),
                       None if state == "done" else f"MLflow run {r.info.status}"))  # fmt: skip
    return out, Source("mlflow", uri, found.name), notes
