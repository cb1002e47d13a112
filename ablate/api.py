"""The library API with the CLI's defaults: what `ablate launch` and `ablate report` do, from a notebook.

    import ablate
    plan = ablate.plan("experiments.yaml", overrides=["train.epochs=1"])   # the default sweep
    ablate.launch(plan)                          # Ray; db/ablate.sqlite and MLflow at db/mlflow.sqlite
    ablate.report(plan.sweep)                    # reports/<sweep>/index.html
    with ablate.Store() as store: store.runs()   # the trials, as `ablate runs --all-columns`

`ablate.execution.launcher.launch` and `ablate.reporting.report` are the engines under these: they record and read
only where they are told (no MLflow unless given a tracker), which is what tests and benchmarks want.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.execution.launcher import Cluster, LaunchResult, RunConfig
    from ablate.execution.preflight import Checks
    from ablate.execution.progress import Progress
    from ablate.execution.selection import Select
    from ablate.planning.plan import Plan
    from ablate.store import Store
    from ablate.tracking.records import Tracker

__all__ = ["launch", "report"]


@contextmanager
def _opened(store: Store | str | None) -> Iterator[Store]:
    """`store` itself (left open), or the store at a URL or the CLI's default (closed after)."""
    from ablate.store import Store

    with nullcontext(store) if isinstance(store, Store) else Store(store) as opened:
        yield opened


def launch(
    plans: Plan | Sequence[Plan],
    store: Store | str | None = None,
    tracker: Tracker | str | bool = True,
    *,
    cluster: Cluster | None = None,
    run: RunConfig | None = None,
    progress: Progress | None = None,
    choice: Select | None = None,
    checks: Checks | None = None,
) -> LaunchResult:
    """Run every unfinished trial of `plans` as `ablate launch` does: recorded to `store` (a Store, a database
    URL, or None: the CLI's db/ablate.sqlite) and to MLflow through `tracker` (a Tracker, a tracking URI,
    True: the CLI's db/mlflow.sqlite, False: no MLflow). `cluster`, `run` and `choice` as for
    `ablate.execution.launcher.launch` (default: an embedded local Ray, checkpoints in db/checkpoints, every unfinished
    trial). First the launch's pre-flight (`ablate.execution.preflight`, `checks`: by default every model and dataset to
    run): what it refuses is a PreflightError, raised before a store is created or anything is written."""
    from ablate.execution.launcher import Cluster, RunConfig
    from ablate.execution.launcher import launch as run_plans
    from ablate.execution.preflight import Checks, preflight
    from ablate.execution.selection import Select
    from ablate.planning.plan import Plan
    from ablate.store import Store, database_exists
    from ablate.tracking.records import Tracker

    plans = [plans] if isinstance(plans, Plan) else list(plans)
    cluster, run, choice = cluster or Cluster(), run or RunConfig(), choice or Select()
    preflight(plans, _done_keys(store), cluster, run, checks or Checks(), choice)
    first = not isinstance(store, Store) and not database_exists(store) and any(p.trials for p in plans)
    with _ray_first(cluster) if first else nullcontext():
        if tracker is True or isinstance(tracker, str):  # opened by the launcher where MLflow is needed, not here
            tracker = Tracker(None if tracker is True else tracker, lazy=True)
        with _opened(store) as opened:
            return run_plans(plans, opened, tracker or None, cluster=cluster, run=run, progress=progress,
                             choice=choice)  # fmt: skip


@contextmanager
def _ray_first(cluster: Cluster) -> Iterator[None]:
    """Ray started (or joined) before a first launch creates its results database: a Ray that cannot start
    (`ablate.execution.fanout.RayStartError`) leaves nothing written. The launch then finds Ray running; it is stopped
    here
    when the launch ends, if this started it."""
    from ablate.execution import fanout

    ours = fanout.connect(cluster)
    try:
        yield
    finally:
        if ours:
            fanout.shutdown()


def _done_keys(store: Store | str | None) -> set[str]:
    """The done trials of `store`, without creating a database where there is none."""
    from ablate.store import Store, database_exists

    if isinstance(store, Store):
        return store.done_keys()
    if not database_exists(store):
        return set()
    with Store(store) as opened:
        return opened.done_keys()


def report(
    sweeps: str | Iterable[str] | None = None, *, store: Store | str | None = None, **options: Any
) -> list[Path]:
    """Write the reports of `sweeps` (default: every sweep in the store) as `ablate report` does, from `store`
    (a Store, a database URL, or None: the CLI's db/ablate.sqlite); the files written. `options` as for
    `ablate.reporting.report` (out, metric, baseline, formats, ...). A database that does not exist is a
    ReportError, and is not created."""
    from ablate.reporting import ReportError
    from ablate.reporting import report as write
    from ablate.store import DEFAULT_URL, Store, database_exists

    if not isinstance(store, Store) and not database_exists(store):
        raise ReportError(f"no results database at {store or DEFAULT_URL}: launch a sweep first")
    with _opened(store) as opened:
        return write(sweeps, store=opened, **options)
