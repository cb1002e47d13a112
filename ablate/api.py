"""The library API with the CLI's defaults: what `ablate launch`, `status`, `show` and `report` do, from a notebook.

    import ablate
    plan = ablate.plan("experiments.yaml", overrides=["train.epochs=1"])   # the default sweep
    ablate.launch(plan)                          # Ray; db/ablate.sqlite and MLflow at db/mlflow.sqlite
    ablate.api.status().counts                   # trials per state per sweep, as `ablate status` prints them
    ablate.api.show("3f2a").attempts             # one trial whole, as `ablate show 3f2a`
    ablate.api.runs(where=["seed<3"]).rows       # the trials `ablate runs --where 'seed<3'` lists
    ablate.report(plan.sweep)                    # reports/<sweep>/index.html
    with ablate.Store() as store: store.runs()   # the trials, as `ablate runs --all-columns`

`ablate.execution.launcher.launch` and `ablate.reporting.report` are the engines under these: they record and read
only where they are told (no MLflow unless given a tracker), which is what tests and benchmarks want. What lives
here only composes them (the store, the planner, provenance, the tracker), which is why it lives at the top: the
CLI (`ablate.cli`) parses, calls these and formats, so a notebook gets the same facts the commands print.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.execution.launcher import Cluster, LaunchResult, RunConfig
    from ablate.execution.preflight import Checks, Workload
    from ablate.execution.progress import Display
    from ablate.execution.selection import Select, Selection
    from ablate.gpus.check import GpuCheck as GpuCheck
    from ablate.gpus.figures import Figures as Figures
    from ablate.gpus.sweep import PlannedCheck as PlannedCheck
    from ablate.planning.plan import Plan
    from ablate.planning.rounds import Rounds
    from ablate.provenance.environment import Arithmetic
    from ablate.provenance.stale import StaleCode
    from ablate.store import Listing, Store
    from ablate.store.queries import Pace, Page
    from ablate.store.schema import TrialRecord
    from ablate.tracking.tracker import Tracker

__all__ = [
    "dry_run", "forget", "gpu_check", "launch", "matching", "report", "rounds", "runs", "show", "status", "unfinished",
    "workload",
]  # fmt: skip


STORE_PATIENCE = 30.0
"""Seconds a launch waits for a database server that does not answer as it starts (one restarting), before it gives
up with exit code 3: a launcher started by a scheduler (Slurm's requeue, cron) should not fail for a restart."""


@contextmanager
def _opened(store: Store | str | None, patience: float = 0.0) -> Iterator[Store]:
    """`store` itself (left open), or the store at a URL or the CLI's default (closed after), waiting up to
    `patience` seconds for a server that does not answer yet."""
    from ablate.store import Store

    with nullcontext(store) if isinstance(store, Store) else Store(store, patience) as opened:
        yield opened


def _tracker(tracker: Tracker | str | bool, lazy: bool = False) -> Tracker | None:
    """`tracker` as a Tracker: itself, the one at a tracking URI, or the CLI's db/mlflow.sqlite (True); None for
    False. `lazy`: opened where MLflow is first needed, not here (a launch)."""
    from ablate.tracking.tracker import Tracker

    if tracker is False or isinstance(tracker, Tracker):
        return tracker or None
    return Tracker(None if tracker is True else tracker, lazy=lazy)


def launch(
    plans: Plan | Sequence[Plan] | Rounds,
    store: Store | str | None = None,
    tracker: Tracker | str | bool = True,
    *,
    cluster: Cluster | None = None,
    run: RunConfig | None = None,
    progress: Display | None = None,
    choice: Select | None = None,
    checks: Checks | None = None,
) -> LaunchResult:
    """Run every unfinished trial of `plans` as `ablate launch` does: recorded to `store` (a Store, a database
    URL, or None: the CLI's db/ablate.sqlite) and to MLflow through `tracker` (a Tracker, a tracking URI,
    True: the CLI's db/mlflow.sqlite, False: no MLflow). `cluster`, `run` and `choice` as for
    `ablate.execution.launcher.launch` (default: an embedded local Ray, checkpoints in db/checkpoints, every unfinished
    trial). First the launch's pre-flight (`ablate.execution.preflight`, `checks`: by default every model and dataset to
    run): what it refuses is a PreflightError, raised before a store is created or anything is written. A SIGINT or
    SIGTERM while Ray starts or is joined is `ablate.execution.stopped.Stopped`, also before anything is written.
    `plans` may be the `Rounds` that chose them (`rounds`): a tuned sweep's searches then go on where they went."""
    from ablate.execution.launcher import Cluster, RunConfig
    from ablate.execution.launcher import launch as run_plans
    from ablate.execution.preflight import Checks, preflight
    from ablate.execution.selection import Select
    from ablate.planning.plan import Plan
    from ablate.planning.rounds import Rounds
    from ablate.store import Store, database_exists

    chosen = plans if isinstance(plans, Rounds) else Rounds([plans] if isinstance(plans, Plan) else plans)
    cluster, run, choice = cluster or Cluster(), run or RunConfig(), choice or Select()
    preflight(chosen.plans, _done_keys(store, STORE_PATIENCE), cluster, run, checks or Checks(), choice)
    first = not isinstance(store, Store) and not database_exists(store) and any(p.trials for p in chosen.plans)
    with _ray_first(cluster) if first else nullcontext(), _opened(store, STORE_PATIENCE) as opened:
        return run_plans(chosen, opened, _tracker(tracker, lazy=True), cluster=cluster, run=run,
                         progress=progress, choice=choice)  # fmt: skip


@contextmanager
def _ray_first(cluster: Cluster) -> Iterator[None]:
    """Ray started (or joined) before a first launch creates its results database: a Ray that cannot start
    (`ablate.execution.fanout.RayStartError`) leaves nothing written. The launch then finds Ray running; it is stopped
    here when the launch ends, if this started it."""
    from ablate.execution import fanout

    ours = fanout.connect(cluster)
    try:
        yield
    finally:
        if ours:
            fanout.shutdown()


def _done_keys(store: Store | str | None, patience: float = 0.0) -> set[str]:
    """The done trials of `store`, without creating a database where there is none."""
    with _existing(store, patience) as opened:
        return opened.done_keys() if opened else set()


@contextmanager
def _existing(store: Store | str | None, patience: float = 0.0) -> Iterator[Store | None]:
    """`store` itself (left open), the store at a URL or the CLI's default where its database exists (closed
    after), else None: what only reads, or only looks before a launch, never creates a database."""
    from ablate.store import Store, database_exists

    if not isinstance(store, Store) and not database_exists(store):
        yield None
        return
    with _opened(store, patience) as opened:
        yield opened


def _missing(store: Store | str | None) -> str:
    """The one sentence for a database that is not there (`_existing` gave None)."""
    from ablate.store import DEFAULT_URL

    return f"no results database at {store or DEFAULT_URL}: launch a sweep first"


@contextmanager
def _reading(store: Store | str | None) -> Iterator[Store]:
    """The store of `_existing`; a LookupError, creating nothing, where its database does not exist."""
    with _existing(store) as opened:
        if opened is None:
            raise LookupError(_missing(store))
        yield opened


def report(
    sweeps: str | Iterable[str] | None = None, *, store: Store | str | None = None, **options: Any
) -> list[Path]:
    """Write the reports of `sweeps` (default: every sweep in the store) as `ablate report` does, from `store`
    (a Store, a database URL, or None: the CLI's db/ablate.sqlite); the files written. `options` as for
    `ablate.reporting.report` (out, metric, baseline, formats, ...). A database that does not exist is a
    ReportError, and is not created."""
    from ablate.reporting import ReportError
    from ablate.reporting import report as write

    with _existing(store) as opened:
        if opened is None:
            raise ReportError(_missing(store))
        return write(sweeps, store=opened, **options)


def rounds(plans: Sequence[Plan] | Rounds, store: Store | None = None) -> Rounds:
    """The rounds that choose `plans`' trials (`ablate.planning.rounds.Rounds`; a Rounds given is itself, its
    searches where they went), their first round chosen as far as `store`'s results go (none: the searches' first
    configurations): `.plans` holds each tuned sweep followed by its companion sweep of tuning trials
    (`ablate.planning.tuning`), other plans as they are; the tuner (optuna) is imported only for a tuned sweep.
    Passed on to `workload`, `dry_run`, `launch` and `unfinished`, it lets a launch replay each search once."""
    from ablate.planning.rounds import Rounds

    chosen = plans if isinstance(plans, Rounds) else Rounds(plans)
    chosen.first(store)
    return chosen


def workload(
    plans: Sequence[Plan] | Rounds, store: Store | str | None = None, choice: Select | None = None
) -> Workload:
    """What launching `plans` would train, as far as `store`'s results grow them, its later rounds included
    (`ablate.execution.preflight.workload`): what `ablate launch --ask-above` weighs (`Workload.asks`), as a launch's
    first look at the store, so as patient with it. Reads the store where it exists, writes nothing; a choice that
    names unknown trials is a SelectionError."""
    from ablate.execution.preflight import workload as weigh
    from ablate.execution.selection import Select

    with _existing(store, STORE_PATIENCE) as opened:
        return weigh(rounds(plans, opened).plans, opened, choice or Select())


@dataclass(frozen=True)
class DryRun:
    """What `ablate launch --dry-run` prints: the plans as far as the store grows them, and what the launch would
    do with each of their trials (`ablate.execution.selection.Selection`: states, stale ones, `action(key)`)."""

    plans: list[Plan]
    chosen: Selection
    outside: list[str] = field(default_factory=list)
    """What the launch would say of trials its sweeps hold that their plans no longer make
    (`ablate.execution.outside`)."""

    def counts(self) -> tuple[int, int, int]:
        """Planned trials the launch would run, would skip, and of those skipped the stale ones it keeps."""
        planned = [t.key for p in self.plans for t in p.trials]
        run = sum(k in self.chosen.run for k in planned)
        kept = sum(k in self.chosen.stale and k not in self.chosen.run for k in planned)
        return run, len(planned) - run, kept


def dry_run(plans: Sequence[Plan] | Rounds, store: Store | str | None = None, choice: Select | None = None) -> DryRun:
    """What a launch of `plans` with `choice` would run and skip, writing nothing (`ablate launch --dry-run`)."""
    from ablate.execution import outside
    from ablate.execution.selection import Select, select

    with _existing(store) as opened:
        grew = rounds(plans, opened).plans  # a tuned sweep's searches as the store's results take them
        earlier = [line for p in grew for line in outside.lines(p, opened)] if opened is not None else []
        return DryRun(grew, select(grew, opened, choice or Select()), earlier)


def unfinished(plans: Sequence[Plan] | Rounds, store: Store) -> Listing:
    """The trials of `plans` (a tuned sweep's as its searches went) that `store` says are not done, one row each:
    what a launch left, rather than what its launcher stopped (some never started)."""
    from ablate.planning.rounds import Rounds
    from ablate.store import STATES

    sweeps = [p.sweep for p in (plans.plans if isinstance(plans, Rounds) else plans)]
    planned = {t.key for p in rounds(plans, store).plans for t in p.trials}
    rows = store.trial_rows(sweeps, states=[s for s in STATES if s != "done"]).first_of("key")
    return rows.rows(k in planned for k in rows["key"])


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

    def total(self, *states: str) -> int:
        """Trials in any of `states` across the sweeps (a listing shows only its first rows)."""
        return sum(n[s] for n in self.counts.values() for s in states)


def status(sweeps: Sequence[str] | None = None, store: Store | str | None = None) -> Status:
    """The state of `sweeps` (default: every sweep in the store) as `ablate status` prints it, from `store` (a
    Store, a database URL, or None: the CLI's db/ablate.sqlite); a LookupError where that database does not exist
    (none is created)."""
    from ablate.provenance.stale import LISTED, StaleCode, stale_code
    from ablate.store import Listing

    chosen = list(sweeps) if sweeps else None
    with _reading(store) as opened:
        counts = opened.state_counts(chosen)
        if not counts:
            return Status({}, {}, Listing({}), Listing({}), Listing({}), StaleCode({}, 0))
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
    return Status(counts, pace, running, failed, stale, code)


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
    up in `tracker` (a Tracker, a tracking URI, True: the CLI's db/mlflow.sqlite, False: not looked up). A
    LookupError where no trial or several match, or the database does not exist. The sweeps' plugins are loaded
    (where they load) so that the modules a component covers can be named."""
    from ablate.config import TrialConfig
    from ablate.plugins import Plugins
    from ablate.provenance.environment import Arithmetic
    from ablate.provenance.fingerprint import modules_of
    from ablate.store import Listing

    with _reading(store) as opened:
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
    asked = _tracker(tracker) if trial.mlflow_run_id else None
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

    with _reading(store) as opened:
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

    with _reading(store) as opened:
        runs = [r for k in keys for r in _run_ids(opened, k)]
        n = opened.forget(keys)
    where = Storage(storage)
    for key in keys:
        where.forget(key)
    asked = _tracker(tracker) if runs else None
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


def gpu_check(
    seconds: float = 20.0,
    seeds: int = 3,
    compile: bool = True,
    keep: Path | None = None,
    dry_run: bool = False,
    console: Console | None = None,
) -> GpuCheck:
    """What `ablate gpu-check` does: a short sweep on this machine's GPUs through `launch` (`seconds` of steady
    training per trial, `seeds` per mechanism packed, the compile phase unless not `compile`, stores in `keep` or
    a temporary folder), its figures in `GpuCheck.figures`; a dry run's listing instead where asked or without a
    GPU; the reason where the driver lists GPUs this torch cannot use (`ablate.gpus.check`). Progress on
    `console` (default: stdout)."""
    from rich.console import Console

    from ablate.gpus.check import check
    from ablate.gpus.sweep import SweepSpec

    return check(SweepSpec(seconds, seeds, compile), launch, console or Console(), keep, dry_run)
