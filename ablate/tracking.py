"""MLflow records of sweeps and trials, kept in step with the store (which holds every run id).

One experiment per sweep, one parent run per sweep, one nested run per trial (tags: sweep, trial_key,
variant; params: `axis.<path>` for every axis value and the resolved config flattened with dotted names).
Everything goes through one `MlflowClient` with explicit run ids (no fluent global state), so one recorder
process can feed many concurrent runs. A trial's run id is kept in the store: a resumed trial reuses its
run (set back to RUNNING, terminated again at the end), and a run created just before a crash is found
again by its `trial_key` tag, so runs are never duplicated.

    tracker = Tracker()                                # sqlite:///db/mlflow.sqlite, artifacts in db/mlartifacts
    tracker.start_sweep(store, "cpu")                 # experiment + parent run (reused on relaunch)
    run = tracker.start_trial(store, "cpu", key)      # nested run (reused on resume)
    tracker.log_metrics(run, epoch, {"val.top1": 0.6}, wall_time=t)
    tracker.end_trial(run, "done", result={"test": {"top1": 0.64}})
    tracker.end_sweep(store, "cpu")

Epoch metrics carry the wall time they were measured at as their timestamp, so sending the same record
twice does not add a point (MLflow drops exact repeats); a retried epoch with new values adds new points.
mlflow is imported when a Tracker is made (about a second), never by importing this module.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.store import Store, error_line, flatten, sqlite_file

if TYPE_CHECKING:
    from mlflow.entities import Run

DEFAULT_URI = "sqlite:///db/mlflow.sqlite"
#: MLflow's limits: name length, param value length, params/tags and metrics per log_batch call.
MAX_KEY, MAX_PARAM, MAX_TAG = 250, 6000, 8000
PARAMS_PER_BATCH, METRICS_PER_BATCH = 100, 1000
#: MLflow run status of each trial state.
RUN_STATUS = {"pending": "SCHEDULED", "running": "RUNNING", "done": "FINISHED", "failed": "FAILED",
              "diverged": "FAILED", "interrupted": "KILLED", "preempted": "KILLED"}  # fmt: skip
_BAD_CHARS = re.compile(r"[^/\w.\- ]")


def mlflow_name(name: str) -> str:
    """A valid MLflow param/metric name: odd characters become `_`; a name over 250 characters keeps its
    head and gains a hash of the whole name (so long names stay apart)."""
    clean = _BAD_CHARS.sub("_", name)
    if len(clean) <= MAX_KEY:
        return clean
    return f"{clean[: MAX_KEY - 11]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def params_of(config: Mapping[str, Any], axes: Mapping[str, Any] | None = None) -> dict[str, str]:
    """MLflow params of a trial: `axis.<path>` per axis value, then the config flattened (dotted names);
    non-string values as JSON, values clipped to 6000 characters."""
    flat = {**flatten(axes or {}, "axis"), **flatten(config)}
    return {mlflow_name(k): clip(v if isinstance(v, str) else json.dumps(v), MAX_PARAM) for k, v in flat.items()}


def _fast_sqlite(db: Path) -> None:
    """WAL + synchronous=NORMAL on every connection MLflow opens to `db`.

    MLflow commits once per call, and with SQLite's default rollback journal each commit is an fsync
    (about 4 ms here, the bulk of a trial's MLflow cost). In WAL mode with synchronous=NORMAL a commit is
    durable against a process crash, and only an OS crash can lose the last commits, which the launch
    would then re-log: the store, not MLflow, is the source of truth.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    target = str(db)

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        if not isinstance(dbapi_conn, sqlite3.Connection):  # every engine of the process passes here
            return
        row = dbapi_conn.execute("PRAGMA database_list").fetchone()
        if row is not None and row[2] == target:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    if target not in _FAST:
        _FAST.add(target)
        event.listen(Engine, "connect", on_connect)


_FAST: set[str] = set()


HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow client settings for a tracking server, unless the user set them (MLflow's own: 7 retries over
minutes, which would stall every write while a server is down)."""


@contextmanager
def _creating(db: Path | None) -> Iterator[None]:
    """Hold an exclusive lock beside a SQLite MLflow database while MLflow opens it: two launchers opening a
    fresh one at once would both run MLflow's migrations on it (one then fails)."""
    if db is None:
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Tracker:
    """MLflow writer for the recorder. `uri`: a tracking URI, by default SQLite under db/ (folder created,
    artifacts in mlartifacts/ beside it, `self.uri` made absolute), or a tracking server (`http://host:5000`,
    what a cluster uses; artifacts where the server puts them)."""

    def __init__(self, uri: str | None = None, artifact_root: str | None = None) -> None:
        from mlflow import MlflowClient

        self.uri = uri or DEFAULT_URI
        db = sqlite_file(self.uri)
        if db is not None:  # absolute, so a later chdir cannot point new connections elsewhere
            db = db.resolve()
            db.parent.mkdir(parents=True, exist_ok=True)
            self.uri = f"sqlite:///{db}"
            _fast_sqlite(db)
        else:  # a server: fail fast, so the mirror's own backoff (not minutes of client retries) handles outages
            for name, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.artifact_root = artifact_root or ((db.parent / "mlartifacts").as_uri() if db else None)
        with _creating(db):
            self.client = MlflowClient(tracking_uri=self.uri)
            if db is not None:
                self.client.search_experiments(max_results=1)  # MLflow creates (migrates) its database here

    def run_url(self, run_id: str) -> str:
        """Where a person opens the run: the server's page, or for a local store the run in `ablate ui`."""
        run = self.client.get_run(run_id)
        path = f"#/experiments/{run.info.experiment_id}/runs/{run_id}"
        if self.uri.startswith("http"):
            return f"{self.uri.rstrip('/')}/{path}"
        return f"http://127.0.0.1:5000/{path} (while `ablate ui` serves it)"

    # ------------------------------------------------------------------------------------------ sweeps
    def experiment(self, sweep: str) -> str:
        """Id of the sweep's experiment (named after it), created or restored as needed."""
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(sweep)
        if exp is None:
            try:
                return self.client.create_experiment(sweep, artifact_location=self.artifact_root,
                                                     tags={"sweep": sweep})  # fmt: skip
            except MlflowException:  # another launcher created it a moment ago
                exp = self.client.get_experiment_by_name(sweep)
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        return exp.experiment_id

    def start_sweep(self, store: Store, sweep: str) -> str:
        """The sweep's parent run id: the one in the store (set RUNNING again) or a new one, kept there."""
        return self._sweep_run(store, sweep)[1]

    def _sweep_run(self, store: Store, sweep: str) -> tuple[str, str]:
        record = store.sweep(sweep)
        if record is None:
            raise KeyError(f"no sweep {sweep!r} in the store")
        if record.mlflow_run_id and (run := self._resume(record.mlflow_run_id)):
            return run.info.experiment_id, run.info.run_id
        exp = self.experiment(sweep)
        tags = {"sweep": sweep, "mlflow.note.content": record.description or ""}
        run_id = self.client.create_run(exp, tags=tags, run_name=sweep).info.run_id
        store.set_sweep_mlflow(sweep, exp, run_id)
        return exp, run_id

    def end_sweep(self, store: Store, sweep: str, status: str = "FINISHED") -> None:
        """Terminate the sweep's parent run (KILLED after Ctrl-C, say)."""
        record = store.sweep(sweep)
        if record is not None and record.mlflow_run_id:
            self.client.set_terminated(record.mlflow_run_id, status)

    # ------------------------------------------------------------------------------------------ trials
    def start_trial(self, store: Store, sweep: str, key: str) -> str:
        """The trial's run id, nested under the sweep's parent run: reused (set RUNNING again) when the store
        or the experiment knows one, else created with its tags and params and kept in the store."""
        trial, member = store.trial(key), store.membership(sweep, key)
        if trial is None or member is None:
            raise KeyError(f"trial {key!r} is not in sweep {sweep!r}")
        run = self._resume(trial.mlflow_run_id) if trial.mlflow_run_id else None
        if run is None:
            exp, parent = self._sweep_run(store, sweep)
            retrained = len(store.previous(key))  # a trial trained again gets a run of its own each time
            query = f"tags.trial_key = '{key}'" + (f" and tags.retrained = '{retrained}'" if retrained else "")
            found = self.client.search_runs([exp], query, max_results=1)
            run = self._resume(found[0].info.run_id) if found else None
            if run is None:
                tags = {"mlflow.parentRunId": parent, "sweep": sweep, "trial_key": key, "variant": trial.variant or "",
                        "retrained": str(retrained)}  # fmt: skip
                run = self.client.create_run(exp, tags=tags, run_name=key)
            store.set_mlflow_run(key, run.info.run_id)
        self._log_params(run, params_of(trial.config, member.axes))
        return str(run.info.run_id)

    def log_metrics(self, run_id: str, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        """One step's metrics of a run, in batches."""
        self.log_metric_rows(run_id, [(name, step, value, wall_time) for name, value in values.items()])

    def log_metric_rows(self, run_id: str, rows: Iterable[tuple[str, int, float, float | None]]) -> None:
        """Many (name, step, value, wall time) rows of one run, in batches of 1000."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(mlflow_name(n), float(v), stamp if w is None else int(w * 1000), int(s))
                   for n, s, v, w in rows]  # fmt: skip
        for i in range(0, len(metrics), METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=metrics[i : i + METRICS_PER_BATCH])

    def end_trial(
        self, run_id: str, state: str, result: Mapping[str, Any] | None = None, error: str | None = None, step: int = 0
    ) -> None:
        """Log the final result (flattened, numbers only, at `step`) and terminate the run with the MLflow
        status of the trial's `state`; the line naming a failure (`error`: message or traceback) becomes
        the `error` tag."""
        numbers = [(k, step, v, None) for k, v in flatten(result or {}).items() if _is_number(v)]
        self.log_metric_rows(run_id, numbers)
        if line := error_line(error):
            self.client.set_tag(run_id, "error", clip(line, MAX_TAG))
        self.client.set_terminated(run_id, RUN_STATUS[state])

    # ----------------------------------------------------------------------------------------- helpers
    def _resume(self, run_id: str) -> Run | None:
        """The run if it exists and is not deleted, set RUNNING again (it may have ended or been killed)."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        if run.info.lifecycle_stage == "deleted":
            return None
        if run.info.status != "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        return run

    def _log_params(self, run: Run, params: Mapping[str, str]) -> None:
        """Log the params a run lacks (a param's value can never change in MLflow), 100 per batch."""
        from mlflow.entities import Param

        missing = [Param(k, v) for k, v in params.items() if k not in run.data.params]
        for i in range(0, len(missing), PARAMS_PER_BATCH):
            self.client.log_batch(run.info.run_id, params=missing[i : i + PARAMS_PER_BATCH])
