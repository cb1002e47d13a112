"""The trials a store holds, as the commands that read or delete them show them: their states (`status`), a
listing (`runs`, `matching`), one whole (`show`) and their deletion (`forget`), each a typed result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.api.stores import reading
from ablate.api.tracking import tracker_of

if TYPE_CHECKING:
    from ablate.execution.slurm import JobState
    from ablate.provenance.environment import Arithmetic
    from ablate.provenance.stale import StaleCode
    from ablate.store import Listing, Store
    from ablate.store.queries import Pace, Page
    from ablate.store.schema import TrialRecord
    from ablate.tracking.tracker import Tracker


@dataclass(frozen=True)
class Status:
    """What `ablate status` prints: per sweep its trials per state and the pace of the unfinished ones; the first
    rows (`ablate.provenance.stale.LISTED`) of the running, failed or diverged, and stale trials; and which done
    trials could not be checked for staleness."""

    counts: dict[str, dict[str, int]]
    """Sweep -> trials in each of `ablate.store.STATES`, and `total` (`Store.state_counts`)."""
    pace: dict[str, Pace]
    """Sweep -> epochs left, seconds per epoch and ETA of its unfinished trials (none where all are done)."""
    running: Listing
    failed: Listing
    """Failed and diverged trials, with the first line of their error."""
    stale: Listing
    """Stale trials: sweep, key, and what `changed` since they ran (component names, `torch 2.4 -> 2.5`)."""
    code: StaleCode
    """The stale digests and how many trials they hold; `code.unchecked()`: the line on unchecked ones."""
    jobs: tuple[JobState, ...] = ()
    """The latest Slurm jobs `ablate slurm submit` recorded for the sweeps, and what Slurm says of each now."""

    def total(self, *states: str) -> int:
        """Trials in any of `states` across the sweeps (a listing shows only its first rows)."""
        return sum(n[s] for n in self.counts.values() for s in states)


def status(sweeps: Sequence[str] | None = None, store: Store | str | None = None) -> Status:
    """The state of `sweeps` (default: every sweep in the store) as `ablate status` prints it, from `store` (a
    Store, a database URL, or None: the CLI's db/ablate.sqlite), with the Slurm jobs submitted for them; a
    LookupError where that database does not exist (none is created) and no job was submitted."""
    from ablate.api.stores import absent
    from ablate.execution.slurm import state, submitted
    from ablate.provenance.stale import LISTED, StaleCode, stale_code
    from ablate.store import Listing, Store

    chosen = list(sweeps) if sweeps else None
    jobs = tuple(map(state, submitted(store.url if isinstance(store, Store) else store, chosen)))
    nothing = Status({}, {}, Listing({}), Listing({}), Listing({}), StaleCode({}, 0), jobs)
    if jobs and absent(store):  # a job still waiting to start its launch
        return nothing
    with reading(store) as opened:
        counts = opened.state_counts(chosen)
        if not counts:
            return nothing
        pace = opened.progress(chosen)
        running = opened.trial_rows(chosen, states=("running",), limit=LISTED)
        failed = opened.trial_rows(chosen, states=("failed", "diverged"), limit=LISTED)
        code = stale_code(opened, chosen)
        rows = opened.with_code(code.changed, chosen, limit=LISTED) if code.changed else None
    stale = Listing({"sweep": [], "key": [], "changed": []})
    if rows is not None:
        stale = Listing(
            {"sweep": rows["sweep"], "key": rows["key"], "changed": [code.changed[d] for d in rows["digest"]]}
        )
    return Status(counts, pace, running, failed, stale, code, jobs)


@dataclass(frozen=True)
class Attempt:
    """One result of a trial: a previous one kept when it was retrained (with the `reason`), or its latest."""

    state: str
    finished_at: Any
    result: Any
    traceback: str | None
    arithmetic: Arithmetic | None
    """What its bits depended on beyond the key (None: recorded before ablate kept it)."""
    kept: bool = False
    """A previous result, kept when the trial was retrained for `reason`."""
    reason: str | None = None


@dataclass(frozen=True)
class MlflowRun:
    """A trial's MLflow run: its id, the tracking store asked, and where to open it (None: not in that store)."""

    run_id: str
    uri: str
    url: str | None


@dataclass(frozen=True)
class Shown:
    """One trial whole, as `ablate show` prints it."""

    trial: TrialRecord
    """The store's record: key, state, attempts, config, code (digest, git, versions, components)..."""
    sweeps: list[str]
    """Every sweep that planned it."""
    covered: dict[str, list[str]]
    """Component -> the modules its recorded digest covers (from the trial's config, as planned now)."""
    attempts: list[Attempt]
    """Previous results first, the latest last."""
    metrics: Listing
    """Per metric name: steps recorded and the last value."""
    mlflow: MlflowRun | None
    """None where the trial has no MLflow run or no tracker was asked."""


def show(key: str, store: Store | str | None = None, tracker: Tracker | str | bool = True) -> Shown:
    """The trial whose key is `key` or starts with it, whole, from `store` (as for `status`), its MLflow run looked
    up in `tracker` (a Tracker, a tracking URI, True: the CLI's db/mlflow.sqlite, False: not looked up) once a
    launch's closing that writes to it has ended (as `sync` waits: right after a launch its trials' runs may still
    be in the making). A LookupError where no trial or several match, or the database does not exist. The sweeps'
    plugins are loaded (where they load) so that the modules a component covers can be named."""
    from ablate.config import TrialConfig
    from ablate.plugins import Plugins
    from ablate.provenance.environment import Arithmetic
    from ablate.provenance.fingerprint import modules_of
    from ablate.store import Listing
    from ablate.tracking.closing import waited

    asked = tracker_of(tracker, lazy=True)
    if asked is not None:  # a launch's closing may still be making the trial's run (`ablate.tracking.closing`)
        waited(asked)
    with reading(store) as opened:
        keys = [k for k in opened.states() if k.startswith(key)]
        if len(keys) != 1:
            raise LookupError(f"{key!r} matches {len(keys)} trials" + (": give more of the key" if keys else ""))
        trial, sweeps = opened.trial(keys[0]), opened.sweeps_of(keys[0])
        previous = opened.previous(keys[0])
        metrics = opened.metrics_frame(keys=[keys[0]])
        for name in sweeps:
            record = opened.sweep(name)
            Plugins.from_json((record.spec or {}).get("plugins") if record else None).load(strict=False)
    assert trial is not None
    try:
        covered = modules_of(TrialConfig.model_validate(trial.config))
    except ValueError:
        covered = {}
    attempts = [Attempt(p["state"], p["finished_at"], p["result"], p.get("traceback"),
                        Arithmetic.of_record(p.get("environment")), True, p["reason"]) for p in previous]  # fmt: skip
    attempts.append(Attempt(trial.state, trial.finished_at, trial.result, trial.traceback,
                            Arithmetic.of_record(trial.environment)))  # fmt: skip
    last = Listing({})
    if len(metrics):
        frame = metrics.groupby("name", observed=True).agg(steps=("step", "count"), last=("value", "last"))
        last = Listing.of_frame(frame.reset_index())
    run = None
    if asked is not None and trial.mlflow_run_id:
        run = MlflowRun(trial.mlflow_run_id, asked.uri, asked.run_url(trial.mlflow_run_id))
    return Shown(trial, sweeps, covered, attempts, last, run)


@dataclass(frozen=True)
class Forgotten:
    """What `forget` deleted: trials and MLflow runs (their checkpoints went with the trials)."""

    trials: int
    runs: int


class UnknownColumn(KeyError):
    """A column `runs` cannot find, named in `given`: "where" (a condition's path) or "columns"."""

    def __init__(self, given: str, message: str) -> None:
        super().__init__(message)
        self.given = given


@dataclass(frozen=True)
class Runs:
    """What `ablate runs` prints: the matching trials in plan order (their first `limit`), stale ones marked with
    what changed, in the columns asked for; and how many match in all."""

    rows: Listing
    total: int


def matching(
    store: Store, sweeps: Sequence[str] | None = None, state: str | None = None, where: Sequence[str] = (),
    limit: int | None = None,
) -> Page:  # fmt: skip
    """The store's trials of `sweeps` (default: all) in `state` where every `where` condition (`PATH OP VALUE`,
    `ablate.store.queries.Condition`) holds, the first `limit` (None: all), and how many match: what `runs` and
    `forget` choose. A ValueError names a malformed condition, an `UnknownColumn` a path no trial has."""
    from ablate.store.queries import Condition

    conditions = [Condition.parse(w) for w in where]
    try:
        return store.page({"state": state} if state else None, list(sweeps) if sweeps else None, where=conditions,
                          limit=limit)  # fmt: skip
    except KeyError as e:
        raise UnknownColumn("where", e.args[0]) from None


def runs(
    sweeps: Sequence[str] | None = None,
    store: Store | str | None = None,
    *,
    state: str | None = None,
    where: Sequence[str] = (),
    columns: Sequence[str] | None = None,
    every_column: bool = False,
    limit: int | None = None,
) -> Runs:
    """The trials `ablate runs` lists (`matching`), with a `stale` column saying what changed in a done trial's code
    since it ran; in `columns` (axis paths, results, any column), else every column with `every_column`, else
    sweep, key, state, the axes, stale and each sweep's metric. A LookupError where the database does not exist;
    a ValueError or `UnknownColumn` names what it cannot read."""
    from ablate.provenance.stale import stale_in_store
    from ablate.store import Listing
    from ablate.store.queries import column_of

    with reading(store) as opened:
        page = matching(opened, sweeps, state, where, limit)
        rows = page.rows
        part = rows["key"] if len(rows) < page.total else None  # a page: its own trials' code
        stale = stale_in_store(opened, list(sweeps) if sweeps else None, part) if len(rows) else {}
        names = rows.names
        rows = Listing({**rows.select(names[:2]).columns, "stale": [", ".join(stale.get(k, [])) for k in rows["key"]],
                        **rows.select(names[2:]).columns})  # fmt: skip
        if columns:
            try:
                rows = rows.select([column_of(rows, c) for c in columns])
            except KeyError as e:
                raise UnknownColumn("columns", e.args[0]) from None
        elif not every_column:
            rows = rows.select(opened.shown_columns(rows))
    return Runs(rows, page.total)


def forget(
    keys: Sequence[str],
    store: Store | str | None = None,
    storage: str = "db/checkpoints",
    tracker: Tracker | str | bool = True,
) -> Forgotten:
    """Delete the trials `keys` whole, as `ablate forget` does (after it listed them and asked): store rows,
    metrics and previous results, their checkpoints under `storage` and, through `tracker` (as for `show`), their
    MLflow runs and those of their previous results. A LookupError where the database does not exist."""
    from ablate.training.checkpoint_storage import Storage

    with reading(store) as opened:
        runs = [r for k in keys for r in _run_ids(opened, k)]
        n = opened.forget(keys)
    where = Storage(storage)
    for key in keys:
        where.forget(key)
    asked = tracker_of(tracker) if runs else None
    if asked is None:
        return Forgotten(n, 0)
    for run_id in runs:
        asked.client.delete_run(run_id)
    return Forgotten(n, len(runs))


def _run_ids(store: Store, key: str) -> list[str]:
    """MLflow runs of a trial: its own and those of its previous results."""
    trial = store.trial(key)
    ids = [trial.mlflow_run_id if trial else None] + [p.get("mlflow_run_id") for p in store.previous(key)]
    return [i for i in ids if i]
