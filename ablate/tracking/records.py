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
mlflow is imported when a Tracker is made (about a second; `lazy=True`: when its client is first used, or
`open` is called), the store when it is used: importing this module costs nothing, so `ablate ui` starts its
server before paying for either. Ending a sweep that MLflow already shows as ended, with the summary of the
sweep as it is, changes nothing, and for a SQLite MLflow store it is told without mlflow (`in_step`): a
relaunch with nothing to do never imports it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

    from ablate.store import Store
    from ablate.store.schema import SweepRecord

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
    from ablate.store import flatten

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


EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
"""Experiment tag that makes MLflow 3's UI, before 3.17, open an experiment on its runs (without it: on an empty
traces page)."""
TRAINING_VIEW = "workflowType=machine_learning"
"""Query of every MLflow UI address ablate gives: from MLflow 3.17 the UI shows every experiment as its global
workflow type says (this query, else the browser's last choice, GenAI at first: traces, prompts, judges),
whatever the experiment's kind tag; its own links keep the query."""
VIEW = "ablate"
"""Share key of the view of a sweep's runs page that the tracker keeps on the sweep's experiment (`sweep_view`, in the
experiment tag `VIEW_TAG`) and `ablate ui` opens (`LANDING`)."""
VIEW_TAG = f"mlflow.sharedViewState.{VIEW}"
"""Experiment tag where MLflow's UI (3.17) looks up a view by its share key (`viewStateShareKey` in the address)."""
LANDING = f"viewStateShareKey={VIEW}&compareRunsMode=CHART"
"""Query of the page `ablate ui` opens: the sweep's view, in the chart view of its runs."""
REPORT = "report"
"""Artifact folder of a sweep's parent run holding its report (HTML, CSV, summary.json)."""
DIGEST_TAG = "report.digest"
"""Parent-run tag: the state of the sweep its summary was logged for (a summary is logged again on a change only)."""
VOLATILE = ("lease_host", "lease_expires")
"""Trial columns that change while the sweep's results do not (leases renewed by heartbeats)."""
UI_GRACE = 30.0
"""Seconds `ablate ui` waits for the MLflow server after forwarding a stop signal, before killing its group."""


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


def sweep_view(axes: list[str], metric: str | None) -> dict[str, Any]:
    """What a newcomer should see of a sweep in MLflow's UI, as the state of a saved view of its runs page: the trials
    grouped by variant (their axes that are not replicates), best first by the sweep's metric, with the axis values
    and the metric as the table's columns; first in the chart view a section comparing the trials in variant order,
    the metric of each as a bar and parallel coordinates from the variant's axis values to the metric. MLflow's
    own defaults would show one collapsed parent row, no param or metric column and only the first 10 runs in
    charts. `axes`: the sweep's axis paths (the seed is one for every trial)."""
    from ablate.config import REPLICATES
    from ablate.spec.metrics import higher_is_better

    varied = [mlflow_name(f"axis.{a}") for a in axes if a not in REPLICATES]
    columns = [f"params.`{mlflow_name(f'axis.{a}')}`" for a in dict.fromkeys([*axes, "seed"])]
    state: dict[str, Any] = {
        "selectedColumns": columns, "runsHiddenMode": "SHOW_ALL", "useGroupedValuesInCharts": False,
        "groupBy": {"aggregateFunction": "average",
                    "groupByKeys": [{"mode": "param", "groupByData": a} for a in varied]} if varied else None,
    }  # fmt: skip
    if metric is None:
        return state
    name, section = mlflow_name(metric), f"{VIEW}-variants"
    card = {"runsCountToCompare": 1000, "metricSectionId": section, "deleted": False, "isGenerated": False}
    charts = [{**card, "uuid": f"{VIEW}-bar", "type": "BAR", "metricKey": name, "displayName": f"{name} of each trial"}]
    if varied:
        charts.append({**card, "uuid": f"{VIEW}-parallel", "type": "PARALLEL", "selectedParams": varied,
                       "selectedMetrics": [name], "showAllRuns": True})  # fmt: skip
    sections = [{"uuid": section, "name": "Variants compared", "display": True, "isReordered": True, "deleted": False,
                 "isGenerated": False}]  # fmt: skip
    return {**state, "orderByKey": f"metrics.`{name}`", "orderByAsc": not higher_is_better(metric),
            "selectedColumns": [*columns, f"metrics.`{name}`"], "compareRunCharts": charts,
            "compareRunSections": sections, "isAccordionReordered": True}  # fmt: skip


def view_state(tag: str | None) -> dict[str, Any] | None:
    """The state a view's experiment tag holds (MLflow's envelope: name, times, the state as JSON text); None where
    there is none or it is not one ablate could have written."""
    try:
        state = json.loads(json.loads(tag)["state"]) if tag else None
    except (ValueError, KeyError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SweepReport:
    """What a sweep's parent run shows of its report. Per variant (by key): its label, the mean of the headline
    metric over replicates and the paired delta to its reference (NaN where not measured)."""

    folder: Path
    """The sweep's report files."""
    metric: str
    labels: dict[str, str]
    means: dict[str, float]
    deltas: dict[str, float]
    baseline: str | None
    best: str
    """The report's verdict in words: "best: X (mean)", or "tied: X (mean) / Y (mean)" where no variant is
    significantly better than the others (`ablate.evidence.verdict`); per group where the sweep has several."""


def sweep_report(store: Store, sweep: str, out: Path, formats: tuple[str, ...] = ("csv",)) -> SweepReport | None:
    """Write the sweep's report under `out` and read back what MLflow shows of it (variants.csv, summary.json):
    the one place that depends on `ablate.reporting`. None when the sweep has no report (no trials, or a
    metric its results lack)."""
    import pandas as pd

    from ablate.reporting import ReportError, folder, report

    try:
        report(sweep, store=store, out=out, formats=formats)
    except ReportError:
        return None
    where = out / folder(sweep)
    table = pd.read_csv(where / "variants.csv", index_col="variant", dtype={"variant": str, "label": str})
    info = json.loads((where / "summary.json").read_text())
    baseline = table.index[table["is_baseline"].astype(bool)]
    labels = {str(k): v for k, v in table["label"].items() if isinstance(v, str) and v}  # none: an empty cell
    return SweepReport(where, str(info["metric"]), labels, table["mean"].astype(float).to_dict(),
                       table["delta"].astype(float).to_dict(), str(baseline[0]) if len(baseline) else None,
                       str(info["verdict"]))  # fmt: skip


def _axes(record: SweepRecord) -> list[str]:
    """The sweep's axis paths as its launch recorded them (none for a sweep recorded without its spec)."""
    return list((record.spec or {}).get("axes") or [])


def _digest(store: Store, sweep: str) -> str:
    """The sweep's state as its report reads it: trials (states, results, run ids) and the sweep's settings."""
    trials = store.trials_frame(sweep)
    record = store.sweep(sweep)
    settings = json.dumps([record.metric, record.baseline, record.description, record.spec] if record else None,
                          sort_keys=True, default=str)  # fmt: skip
    text = trials.drop(columns=[c for c in VOLATILE if c in trials]).to_csv(index=False) + settings
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Tracker:
    """MLflow writer for the recorder. `uri`: a tracking URI, by default SQLite under db/ (folder created,
    artifacts in mlartifacts/ beside it, `self.uri` made absolute), or a tracking server (`http://host:5000`,
    what a cluster uses; artifacts where the server puts them). `lazy`: the client (and a SQLite store's
    database) is made on first use or by `open`, not here."""

    def __init__(self, uri: str | None = None, artifact_root: str | None = None, *, lazy: bool = False) -> None:
        from ablate.store import sqlite_file

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
        self._labels: dict[tuple[str, str], dict[str, str]] = {}
        """Variant labels per (store, sweep), for run names; `_unlabelled`: variants looked up already."""
        self._unlabelled: set[tuple[str, str, str | None]] = set()
        self._viewed: set[tuple[str, str]] = set()
        """(experiment id, view state) pairs written or found in this process (`_keep_view`)."""
        self.artifact_root = artifact_root or ((db.parent / "mlartifacts").as_uri() if db else None)
        self.db = db
        """The SQLite file of a local store (None: a server)."""
        self._client: MlflowClient | None = None
        self._opening = threading.Lock()
        if not lazy:
            self.open()

    def open(self) -> Tracker:
        """Make the MLflow client (creating and migrating a SQLite store's database) unless it is made already;
        safe from several threads (the launcher opens it in one while Ray starts). MLflow's errors propagate."""
        with self._opening:
            if self._client is None:
                from mlflow import MlflowClient

                with _creating(self.db):
                    client = MlflowClient(tracking_uri=self.uri)
                    if self.db is not None:
                        client.search_experiments(max_results=1)  # MLflow creates (migrates) its database here
                self._client = client
        return self

    @property
    def client(self) -> MlflowClient:
        client = self._client or self.open()._client
        assert client is not None
        return client

    def run_url(self, run_id: str) -> str | None:
        """Where a person opens the run: the server's page, or for a local store the run in `ablate ui`; None
        when this tracking store does not hold the run (the launch logged to another `--mlflow-uri`)."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        path = ui_route(f"experiments/{run.info.experiment_id}/runs/{run_id}")
        if self.uri.startswith("http"):
            return f"{self.uri.rstrip('/')}/{path}"
        return f"http://127.0.0.1:5000/{path} (while `ablate ui` serves it)"

    # ------------------------------------------------------------------------------------------ sweeps
    def experiment(self, sweep: str) -> str:
        """Id of the sweep's experiment (named after it), created or restored as needed; tagged as model
        training (`EXPERIMENT_KIND`)."""
        from mlflow.exceptions import MlflowException

        kind, value = EXPERIMENT_KIND
        exp = self.client.get_experiment_by_name(sweep)
        if exp is None:
            try:
                return self.client.create_experiment(sweep, artifact_location=self.artifact_root,
                                                     tags={"sweep": sweep, kind: value})  # fmt: skip
            except MlflowException:  # another launcher created it a moment ago
                exp = self.client.get_experiment_by_name(sweep)
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        if kind not in exp.tags:  # made by an earlier version
            self.client.set_experiment_tag(exp.experiment_id, kind, value)
        return exp.experiment_id

    def start_sweep(self, store: Store, sweep: str) -> str:
        """The sweep's parent run id: the one in the store (set RUNNING again) or a new one, kept there."""
        return self._sweep_run(store, sweep)[1]

    def _sweep_run(self, store: Store, sweep: str, resume: bool = True) -> tuple[str, str]:
        """(experiment id, parent run id) of the sweep, the run created if missing. `resume=False` leaves an
        existing run's status alone and ends a new one at once (it holds a summary; nothing runs under it)."""
        record = store.sweep(sweep)
        if record is None:
            raise KeyError(f"no sweep {sweep!r} in the store")
        if record.mlflow_run_id and (run := self._resume(record.mlflow_run_id, running=resume)):
            self._keep_view(run.info.experiment_id, record)
            return run.info.experiment_id, run.info.run_id
        exp = self.experiment(sweep)
        self._keep_view(exp, record)
        tags = {"sweep": sweep, "mlflow.note.content": record.description or ""}
        run_id = self.client.create_run(exp, tags=tags, run_name=sweep).info.run_id
        kept = store.keep_sweep_mlflow(sweep, exp, run_id, record.mlflow_run_id)
        if kept != run_id and (theirs := self._resume(kept, running=resume)) is not None:
            self.client.delete_run(run_id)  # another launcher made the sweep's parent run meanwhile: one per sweep
            return theirs.info.experiment_id, kept
        if not resume:
            self.client.set_terminated(run_id, "FINISHED")
        return exp, run_id

    def end_sweep(self, store: Store, sweep: str, status: str = "FINISHED") -> None:
        """Terminate the sweep's parent run (KILLED after Ctrl-C, say), then bring its summary up to date
        (`summarise`). A sweep whose trials all ran in other sweeps gets its experiment and parent run here."""
        if store.sweep(sweep) is None or self.in_step(store, sweep, status):
            return
        self.client.set_terminated(self._sweep_run(store, sweep, resume=False)[1], status)
        self.summarise(store, sweep)

    def _keep_view(self, exp: str, record: SweepRecord) -> None:
        """Keep the sweep's view (`sweep_view`) on its experiment, written where it lacks one or holds another (the
        sweep's axes or metric changed, or an earlier version wrote it); MLflow is asked once per process."""
        state = sweep_view(_axes(record), record.metric)
        seen = (exp, json.dumps(state, sort_keys=True))
        if seen in self._viewed:
            return
        if view_state(self.client.get_experiment(exp).tags.get(VIEW_TAG)) != state:
            now = int(time.time() * 1000)
            envelope = {"name": f"{VIEW}: variants compared", "createdAt": now, "updatedAt": now,
                        "state": json.dumps(state)}  # fmt: skip
            self.client.set_experiment_tag(exp, VIEW_TAG, json.dumps(envelope))
        self._viewed.add(seen)

    def in_step(self, store: Store, sweep: str, status: str = "FINISHED") -> bool:
        """Whether MLflow shows the sweep's parent run as `end_sweep` would leave it: there (not deleted, in an
        experiment that is not), ended with `status`, its summary that of the sweep as the store has it now, the
        experiment holding the sweep's view (`sweep_view`). Told by reading a SQLite store's tables, without mlflow;
        False for a server, or whatever cannot be read (then `end_sweep` asks MLflow)."""
        record = store.sweep(sweep)
        if self.db is None or record is None or not record.mlflow_run_id or not self.db.exists():
            return False
        query = ("SELECT r.status, r.lifecycle_stage, e.lifecycle_stage, t.value, v.value FROM runs r "
                 "JOIN experiments e ON e.experiment_id = r.experiment_id "
                 "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
                 "LEFT JOIN experiment_tags v ON v.experiment_id = r.experiment_id AND v.key = ? "
                 "WHERE r.run_uuid = ?")  # fmt: skip
        try:
            with closing(sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True, timeout=5)) as conn:
                row = conn.execute(query, (DIGEST_TAG, VIEW_TAG, record.mlflow_run_id)).fetchone()
        except sqlite3.Error:  # not MLflow's tables (another version), locked, unreadable: ask MLflow
            return False
        return (row is not None and tuple(row[:3]) == (status, "active", "active") and row[3] == _digest(store, sweep)
                and view_state(row[4]) == sweep_view(_axes(record), record.metric))  # fmt: skip

    def summarise(self, store: Store, sweep: str) -> bool:
        """Put the sweep's summary on its parent run, unless the sweep is as it was at the last summary: per
        variant the mean of the headline metric and the paired delta to its reference as metrics
        (`<metric>/mean/<label>`, `<metric>/delta/<label>`), the report (HTML, CSV) as artifacts under
        `report/`, and links to the sweep's trial runs held by other sweeps' experiments (each gets the tag
        `sweep.<name>`: the parent run; the parent's note links them). Returns whether it logged anything."""
        exp, parent = self._sweep_run(store, sweep, resume=False)
        digest = _digest(store, sweep)
        if self.client.get_run(parent).data.tags.get(DIGEST_TAG) == digest:
            return False
        self._link(store, sweep, exp, parent)
        with tempfile.TemporaryDirectory(prefix="ablate-report-") as tmp:
            summary = sweep_report(store, sweep, Path(tmp), ("html", "csv"))
            if summary is not None:
                self._log_summary(parent, summary)
                self.client.log_artifacts(parent, str(summary.folder), REPORT)
        self.client.set_tag(parent, DIGEST_TAG, digest)
        return True

    def _log_summary(self, parent: str, summary: SweepReport) -> None:
        names: dict[str, str] = {}
        for variant in summary.means:  # labels in plain words: "CSaN (tau, mu), attn-FFN" -> "CSaN tau mu attn-FFN"
            name = mlflow_name(" ".join(re.sub(r"[^\w.\- ]+", " ", summary.labels.get(variant, variant)).split()))
            names[variant] = f"{name} {variant[:8]}" if name in names.values() else name  # labels that clean alike
        rows = [(f"{summary.metric}/{what}/{names[v]}", 0, value, None)
                for what, values in (("mean", summary.means), ("delta", summary.deltas))
                for v, value in values.items() if value == value]  # fmt: skip
        self.log_metric_rows(parent, rows)
        tags = {"report.metric": summary.metric, "report.baseline": summary.labels.get(summary.baseline or "", ""),
                "report.best": summary.best}  # fmt: skip
        for key, value in tags.items():
            self.client.set_tag(parent, key, clip(value, MAX_TAG))

    def _link(self, store: Store, sweep: str, exp: str, parent: str) -> None:
        """Tag the sweep's trial runs that live in other sweeps' experiments with `sweep.<name>` (the parent run
        id) and list them, linked, in the parent's note after the sweep's description."""
        from mlflow.exceptions import MlflowException

        tag, links = mlflow_name(f"sweep.{sweep}"), []
        for run_id in store.trials_frame(sweep)["mlflow_run_id"].dropna():
            try:
                run = self.client.get_run(run_id)
            except MlflowException:  # deleted by hand: `ablate sync` makes it again
                continue
            if run.info.experiment_id == exp:
                continue
            if run.data.tags.get(tag) != parent:
                self.client.set_tag(run_id, tag, parent)
            links.append(f"[{run.info.run_name}]({ui_route(f'experiments/{run.info.experiment_id}/runs/{run_id}')})")
        record = store.sweep(sweep)
        note = (record.description or "") if record else ""
        if links:
            note += (f"\n\n{len(links)} of its trials ran in other sweeps' experiments (their runs carry the tag "
                     f"`{tag}`): " + ", ".join(links))  # fmt: skip
        self.client.set_tag(parent, "mlflow.note.content", clip(note.strip(), MAX_TAG))

    # ------------------------------------------------------------------------------------------ trials
    def start_trial(self, store: Store, sweep: str, key: str) -> str:
        """The trial's run id, nested under the sweep's parent run: reused (set RUNNING again) when the store
        or the experiment knows one, else created with its tags and params and kept in the store. The run is
        named by its variant's label and replicate (`run_name`) in the sweep whose experiment holds it."""
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
            created = run is None
            if run is None:
                tags = {"mlflow.parentRunId": parent, "sweep": sweep, "trial_key": key, "variant": trial.variant or "",
                        "retrained": str(retrained)}  # fmt: skip
                run = self.client.create_run(exp, tags=tags, run_name=self.run_name(store, sweep, key))
            kept = store.keep_mlflow_run(key, run.info.run_id, trial.mlflow_run_id)
            if kept != run.info.run_id and (theirs := self._resume(kept)) is not None:
                if created:  # another launcher's mirror made the trial's run meanwhile: one run per trial
                    self.client.delete_run(run.info.run_id)
                run = theirs
        home = store.membership(run.data.tags.get("sweep", sweep), key) or member  # the experiment's sweep
        name = self.run_name(store, home.sweep, key)
        if run.info.run_name != name:  # named by an earlier version, or the sweep's labels changed
            self.client.update_run(run.info.run_id, name=name)
        self._log_params(run, params_of(trial.config, home.axes))
        return str(run.info.run_id)

    def run_name(self, store: Store, sweep: str, key: str) -> str:
        """A trial run's name: its variant's label in the sweep's report, then its replicate (`seed 3`, and the
        split or fold where the sweep varies them); the trial key where the sweep has no report."""
        from ablate.config import REPLICATES
        from ablate.store import flatten

        trial, member = store.trial(key), store.membership(sweep, key)
        if trial is None or member is None:
            return key
        labels = self._labels.setdefault((store.url, sweep), {})
        if trial.variant not in labels and (store.url, sweep, trial.variant) not in self._unlabelled:
            with tempfile.TemporaryDirectory(prefix="ablate-labels-") as tmp:
                summary = sweep_report(store, sweep, Path(tmp))
            labels.update(summary.labels if summary else {})
            self._unlabelled.add((store.url, sweep, trial.variant))
        label = labels.get(trial.variant or "")
        if label is None:
            return key
        config, axes = flatten(trial.config), member.axes or {}
        words = [f"{path.rsplit('.', 1)[-1].replace('_seed', '')} {config[path]}" for path in REPLICATES
                 if path in config and (path == "seed" or path in axes)]  # fmt: skip
        return " · ".join([label, *words])

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
        from ablate.store import error_line, flatten

        numbers = [(k, step, v, None) for k, v in flatten(result or {}).items() if _is_number(v)]
        self.log_metric_rows(run_id, numbers)
        if line := error_line(error):
            self.client.set_tag(run_id, "error", clip(line, MAX_TAG))
        self.client.set_terminated(run_id, RUN_STATUS[state])

    # ----------------------------------------------------------------------------------------- helpers
    def _resume(self, run_id: str, running: bool = True) -> Run | None:
        """The run if it exists and is not deleted, set RUNNING again (it may have ended or been killed)
        unless `running` is False."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        if run.info.lifecycle_stage == "deleted":
            return None
        if running and run.info.status != "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        return run

    def _log_params(self, run: Run, params: Mapping[str, str]) -> None:
        """Log the params a run lacks (a param's value can never change in MLflow), 100 per batch."""
        from mlflow.entities import Param

        missing = [Param(k, v) for k, v in params.items() if k not in run.data.params]
        for i in range(0, len(missing), PARAMS_PER_BATCH):
            self.client.log_batch(run.info.run_id, params=missing[i : i + PARAMS_PER_BATCH])


# ------------------------------------------------------------------------------------------------ the UI
def sweep_page(base: str, store: Store | None, sweep: str | None = None) -> str:
    """The address of the runs page of `sweep`'s experiment in the MLflow UI at `base` (default: the sweep
    planned or launched last among those with an experiment), in the sweep's view (`LANDING`); the UI's experiment
    list where the store knows none. LookupError for a sweep the store lacks or that has no experiment yet."""
    frame = store.sweeps_frame() if store is not None else None
    if sweep is not None:
        if frame is None or sweep not in set(frame["name"]):
            names = ", ".join(frame["name"]) if frame is not None else ""
            raise LookupError(f"no sweep {sweep!r} in the results database (sweeps there: {names or 'none'})")
        exp = frame.set_index("name").at[sweep, "mlflow_experiment_id"]
        if not isinstance(exp, str):
            raise LookupError(f"sweep {sweep!r} has no MLflow experiment yet: `ablate sync` makes it")
    else:
        known = frame.dropna(subset=["mlflow_experiment_id"]) if frame is not None else None
        if known is None or known.empty:
            return f"{base}/{ui_route('experiments')}"
        exp = known.sort_values("updated_at").iloc[-1]["mlflow_experiment_id"]
    return f"{base}/{ui_route(f'experiments/{exp}/runs', LANDING)}"


def ui_route(path: str, query: str = "") -> str:
    """The MLflow UI's address of `path` (`experiments/1/runs`) in its model-training view (`TRAINING_VIEW`), with
    `query` (`LANDING`) after it."""
    return f"#/{path}?{TRAINING_VIEW}" + (f"&{query}" if query else "")


def _die_with(parent: int) -> None:
    """In the forked server, before it runs: ask Linux to send it SIGTERM when `parent` (`ablate ui`) dies, even
    by SIGKILL, which no handler of ours sees; elsewhere nothing. A parent already gone ends it at once."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:
            os._exit(1)


class UiServer:
    """`mlflow server` on a tracking store for `ablate ui`, run until it exits or this process gets SIGTERM or
    SIGINT. The signal is forwarded to it once (it runs in a process group of its own, out of the terminal's
    reach) and waited for, at most `UI_GRACE` seconds before its whole group is killed: no server or worker
    outlives the command. One worker and no job runner, the least there is to start.

        with UiServer(uri, "127.0.0.1", 5000) as server:
            seconds = server.ready()     # None: it exited, or was told to stop, before serving
            code = server.wait()
    """

    def __init__(self, uri: str, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", host,
                    "--port", str(port), "--workers", "1"]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping: float | None = None
        """When the first stop signal came (monotonic seconds)."""
        self.started = 0.0
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> UiServer:
        for sig in (signal.SIGTERM, signal.SIGINT):  # before the server exists: no signal can orphan it
            self._saved[sig] = signal.signal(sig, self._forward)
        self.started = time.monotonic()
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        parent = os.getpid()
        self.proc = subprocess.Popen(self.cmd, env=env, start_new_session=True,
                                     preexec_fn=lambda: _die_with(parent))  # fmt: skip
        if self.stopping is not None:
            self.proc.terminate()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.stopping = self.stopping or time.monotonic()
                self.proc.terminate()
            self.wait()
        finally:
            for sig, handler in self._saved.items():
                signal.signal(sig, handler)

    def _forward(self, signum: int, _frame: Any) -> None:
        self.stopping = self.stopping or time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def ready(self) -> float | None:
        """Seconds from the start until the server accepts connections; None if it exited or was told to
        stop first."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        while self.proc is not None and self.proc.poll() is None and self.stopping is None:
            try:
                with socket.create_connection((host, self.port), timeout=1):
                    return time.monotonic() - self.started
            except OSError:
                time.sleep(0.1)
        return None

    def wait(self) -> int:
        """Wait for the server to exit (its group killed `UI_GRACE` seconds after a stop signal); its exit code,
        128 + N after death by signal N."""
        if self.proc is None:
            return 0
        while True:
            try:
                code = self.proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stopping is not None and time.monotonic() - self.stopping > UI_GRACE:
                    self._kill_group()
        self._kill_group()  # whatever of its group is left (a worker whose parent went first)
        return code if code >= 0 else 128 - code

    def _kill_group(self) -> None:
        if self.proc is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
