"""The results store: the source of truth of every sweep, trial and per-epoch metric.

    from ablate.store import Store
    with Store() as store:                          # sqlite:///db/ablate.sqlite, migrated to the newest schema
        store.upsert_sweep("cpu", spec_path="experiments.yaml", metric="test.top1", baseline=plan.baseline)
        store.add_trials("cpu", plan.trials)       # new keys pending; known keys keep their state
        done = store.done_keys(t.key for t in plan.trials)   # done in any sweep: never trained twice
        store.mark_running(key, host=..., node_id=..., device=...)
        store.log_metrics(key, epoch, {"train.loss": 0.7, "val.top1": 0.61}, wall_time=time.time())
        store.finish(key, "done", result={"test": {"top1": 0.64}}, params=..., flops=...)
        store.trials_frame("cpu"); store.metrics_frame("cpu", names=["val.top1"]); store.status()

Writes (one writer: the launcher or its recorder actor): upsert_sweep, keep_sweep_mlflow, add_trials,
mark_running, log_metrics, log_metric_rows, finish, interrupt, keep_mlflow_run; and the trial leases every
launcher takes before it runs a trial (claim, renew, release), so launchers sharing a store train each
trial once.
Reads: done_keys, states, finished_since, trial, sweep, membership, and the frames sweeps_frame, trials_frame,
metrics_frame, status, runs (the only way reports read the store).
PostgreSQL needs its driver (`pip install "ablate[postgres]"`, psycopg 3); concurrent first opens of a new
database migrate it once on both backends (SQLite's write lock, PostgreSQL's advisory lock).
Modules: `schema` (ORM models), `engine` (SQLite WAL + busy timeout, Alembic upgrade, upserts),
`queries` (frames and listings), `listing` (rows without pandas), `writes` (the write side), `dump` (rows out and in,
for export and import), `migrations/`
(Alembic scripts).
"""

from ablate.spec.paths import flatten
from ablate.store.engine import DEFAULT_URL, database_exists, sqlite_file
from ablate.store.leases import Owner
from ablate.store.listing import Listing
from ablate.store.queries import TRIAL_COLUMNS
from ablate.store.schema import ENDED, FINAL_STATES, STATES
from ablate.store.writes import MetricRow, Store, divergence, error_line

__all__ = [
    "DEFAULT_URL",
    "ENDED",
    "FINAL_STATES",
    "STATES",
    "TRIAL_COLUMNS",
    "Listing",
    "MetricRow",
    "Owner",
    "Store",
    "database_exists",
    "divergence",
    "error_line",
    "flatten",
    "sqlite_file",
]
