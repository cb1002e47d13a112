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

import hashlib
import json
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.tracking.names import MAX_PARAM, MAX_TAG, clip, mlflow_name
from ablate.tracking.sqlite_db import creating, fast_sqlite
from ablate.tracking.variants import VariantSummary, keep_variant_runs, variant_summaries
from ablate.tracking.view import EXPERIMENT_KIND, VIEW, VIEW_TAG, sweep_view, ui_route, view_state

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

    from ablate.store import Store
    from ablate.store.schema import SweepRecord, TrialRecord

DEFAULT_URI = "sqlite:///db/mlflow.sqlite"
#: MLflow's limits on one log_batch call: params (and tags), metrics.
PARAMS_PER_BATCH, METRICS_PER_BATCH = 100, 1000
#: MLflow run status of each trial state.
RUN_STATUS = {"pending": "SCHEDULED", "running": "RUNNING", "done": "FINISHED", "failed": "FAILED",
              "diverged": "FAILED", "interrupted": "KILLED", "preempted": "KILLED"}  # fmt: skip


def params_of(config: Mapping[str, Any], axes: Mapping[str, Any] | None = None) -> dict[str, str]:
    """MLflow params of a trial: `axis.<path>` per axis value, then the config flattened (dotted names);
    non-string values as JSON, values clipped to 6000 characters."""
    from ablate.store import flatten

    flat = {**flatten(axes or {}, "axis"), **flatten(config)}
    return {mlflow_name(k): clip(v if isinstance(v, str) else json.dumps(v), MAX_PARAM) for k, v in flat.items()}


REPORT = "report"
"""Artifact folder of a sweep's parent run holding its report (HTML, CSV, summary.json)."""
DIGEST_TAG = "report.digest"
"""Parent-run tag: the state of the sweep its summary was logged for (a summary is logged again on a change only)."""
SUMMARY_FORM = "2: variant runs"
"""What a summary holds, hashed into its digest: a sweep summarised by an earlier form (before the variants' runs)
is not in step, so its next `end_sweep` or `ablate sync` logs it again, variants' runs included."""
VOLATILE = ("lease_host", "lease_expires")
"""Trial columns that change while the sweep's results do not (leases renewed by heartbeats)."""


SEARCH_PAGE = 10_000
"""Runs one search of `_run_ids` returns (MLflow's own limit is 50,000)."""
MAX_COPIES = 20
"""Runs of one training of a trial looked at when removing copies (there should be one; a copy is rare)."""
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow client settings for a tracking server, unless the user set them (MLflow's own: 7 retries over
minutes, which would stall every write while a server is down)."""


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
    variants: dict[str, VariantSummary]
    """Per variant, what its run in the sweep's view shows (`ablate.tracking.variants`)."""


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
                       str(info["verdict"]), variant_summaries(table))  # fmt: skip


def _digest(store: Store, sweep: str) -> str:
    """The sweep's state as its report reads it: trials (states, results, run ids) and the sweep's settings; and
    the form of the summary (`SUMMARY_FORM`)."""
    trials = store.trials_frame(sweep)
    record = store.sweep(sweep)
    settings = json.dumps([record.metric, record.baseline, record.description, record.spec] if record else None,
                          sort_keys=True, default=str)  # fmt: skip
    text = trials.drop(columns=[c for c in VOLATILE if c in trials]).to_csv(index=False) + settings + SUMMARY_FORM
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
            fast_sqlite(db)
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

                with creating(self.db):
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
        sweep's metric changed, or an earlier version wrote it); MLflow is asked once per process."""
        state = sweep_view(record.metric)
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
                and view_state(row[4]) == sweep_view(record.metric))  # fmt: skip

    def summarise(self, store: Store, sweep: str) -> bool:
        """Put the sweep's summary on its parent run, unless the sweep is as it was at the last summary: per
        variant the mean of the headline metric and the paired delta to its reference as metrics
        (`<metric>/mean/<label>`, `<metric>/delta/<label>`), the report (HTML, CSV) as artifacts under
        `report/`, links to the sweep's trial runs held by other sweeps' experiments (each gets the tag
        `sweep.<name>`: the parent run; the parent's note links them), and the run of each variant the sweep's
        view shows (`ablate.tracking.variants`; none without a report). Returns whether it logged anything."""
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
            keep_variant_runs(self.client, exp, sweep, summary.variants if summary is not None else {})
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
        home = self._run_ids(exp)  # one search for the runs in the sweep's experiment (was a get_run per trial)
        for run_id in store.trials_frame(sweep)["mlflow_run_id"].dropna():
            if run_id in home:
                continue
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

    def _run_ids(self, exp: str) -> set[str]:
        """The ids of every run in experiment `exp`, a page of searches at a time."""
        ids: set[str] = set()
        token = None
        while True:
            page = self.client.search_runs([exp], max_results=SEARCH_PAGE, page_token=token)
            ids.update(run.info.run_id for run in page)
            token = page.token
            if not token:
                return ids

    # ------------------------------------------------------------------------------------------ trials
    def start_trial(self, store: Store, sweep: str, key: str, running: bool = True) -> str:
        """The trial's run id, nested under the sweep's parent run: reused (set RUNNING again, unless `running`
        is False: the mirror sets the status itself, `show`) when the store or the experiment knows one, else
        created with its tags and params and kept in the store. The run is named by its variant's label and
        replicate (`run_name`) in the sweep whose experiment holds it."""
        trial, member = store.trial(key), store.membership(sweep, key)
        if trial is None or member is None:
            raise KeyError(f"trial {key!r} is not in sweep {sweep!r}")
        run = self._resume(trial.mlflow_run_id, running) if trial.mlflow_run_id else None
        if run is None:
            exp, parent = self._sweep_run(store, sweep)
            retrained = len(store.previous(key))  # a trial trained again gets a run of its own each time
            query = f"tags.trial_key = '{key}'" + (f" and tags.retrained = '{retrained}'" if retrained else "")
            experiments = self._experiments(store, key, exp)
            found = self.client.search_runs(experiments, query, max_results=1)
            run = self._resume(found[0].info.run_id, running) if found else None
            if run is None:
                tags = {"mlflow.parentRunId": parent, "sweep": sweep, "trial_key": key, "variant": trial.variant or "",
                        "retrained": str(retrained)}  # fmt: skip
                run = self.client.create_run(exp, tags=tags, run_name=self.run_name(store, sweep, key))
            kept = store.keep_mlflow_run(key, run.info.run_id, trial.mlflow_run_id)
            if kept != run.info.run_id and (theirs := self._resume(kept, running)) is not None:
                run = theirs  # another launcher's mirror made the trial's run meanwhile
            same = f"tags.trial_key = '{key}' and tags.retrained = '{retrained}'"  # not its earlier trainings' runs
            for copy in self.client.search_runs(experiments, same, max_results=MAX_COPIES):
                if copy.info.run_id != run.info.run_id:  # one run per trial: ours if we lost, or a create
                    self.client.delete_run(copy.info.run_id)  # MLflow's client retried after it had gone through
        home = store.membership(run.data.tags.get("sweep", sweep), key) or member  # the experiment's sweep
        name = self.run_name(store, home.sweep, key)
        if run.info.run_name != name:  # named by an earlier version, or the sweep's labels changed
            self.client.update_run(run.info.run_id, name=name)
        self._log_params(run, params_of(trial.config, home.axes))
        return str(run.info.run_id)

    def _experiments(self, store: Store, key: str, exp: str) -> list[str]:
        """`exp` and the experiments of the other sweeps that hold the trial: its run may be in any of them (made
        by a launcher of another sweep that could not keep its id in the store, say while PostgreSQL restarted)."""
        theirs = {r.mlflow_experiment_id for s in store.sweeps_of(key) if (r := store.sweep(s)) is not None}
        return [exp, *sorted(e for e in theirs if e and e != exp)]

    def run_name(self, store: Store, sweep: str, key: str) -> str:
        """A trial run's name: its variant's label in the sweep's report, then its replicate (`seed 3`, and the
        split or fold where the sweep varies them); the trial key where the sweep has no report."""
        from ablate import reporting
        from ablate.config import REPLICATES
        from ablate.store import flatten

        trial, member = store.trial(key), store.membership(sweep, key)
        if trial is None or member is None:
            return key
        labels = self._labels.setdefault((store.url, sweep), {})
        if trial.variant not in labels and (store.url, sweep, trial.variant) not in self._unlabelled:
            with suppress(reporting.ReportError):  # a sweep with no report (no trials, or a metric its results lack)
                labels.update(reporting.labels(store, sweep))
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

    def show(self, run_id: str, trial: TrialRecord, step: int = 0) -> None:
        """Set the run's status to the trial's state's: ended with its result (`end_trial`) where final."""
        if RUN_STATUS[trial.state] in ("RUNNING", "SCHEDULED"):
            self.client.update_run(run_id, status=RUN_STATUS[trial.state])
        else:
            self.end_trial(run_id, trial.state, result=trial.result, error=trial.traceback, step=step)

    # ----------------------------------------------------------------------------------------- helpers
    def _resume(self, run_id: str, running: bool = True) -> Run | None:
        """The run if it exists and is not deleted, set RUNNING again (it may have ended or been killed)
        unless `running` is False. Only MLflow's "does not exist" means gone: any other failure (its database
        down a moment) is raised, or the caller would make the trial a second run."""
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

        try:
            run = self.client.get_run(run_id)
        except MlflowException as e:
            if e.error_code != ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                raise
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
