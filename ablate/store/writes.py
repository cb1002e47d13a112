"""The write side of the store, for its one writer (the launcher or its recorder actor).

Every write is one short transaction and idempotent: sweeps and trials are upserts, metrics overwrite
their (trial, name, step) row, state changes set absolute values. Opening a Store migrates the database
to the newest schema first. `Store` is in three parts: its connection (`ablate.store.database`), its leases
(`ablate.store.leases`) and, here, the rest of what its writer writes and reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func, or_, select, update

from ablate.store import dump, engine
from ablate.store.database import now
from ablate.store.dump import Added, Dump
from ablate.store.leases import Leases
from ablate.store.listing import missing
from ablate.store.queries import MEMBERS, METRICS, PREVIOUS, SWEEPS, TRIALS
from ablate.store.schema import ENDED, FINAL_STATES, Membership, SweepRecord, TrialRecord

#: Facts about a run that `finish` accepts (known once a trial has built its model).
INFO_FIELDS = frozenset({"params", "flops", "peak_memory", "environment", "host", "node_id", "device",
                         "resumed_from", "code", "code_digest", "checkpoint"})  # fmt: skip
#: What a retrained trial's row is reset to (its previous values are kept in `previous_results`).
_RESET = {"state": "pending", "started_at": None, "finished_at": None, "error": None, "traceback": None,
          "result": None, "diverged_epoch": None, "diverged_step": None, "resumed_from": None, "code": None,
          "code_digest": None, "checkpoint": None, "mlflow_run_id": None, "mlflow_step": None,
          "mlflow_state": None}  # fmt: skip
#: The columns a previous result keeps.
_KEPT = ("state", "attempts", "started_at", "finished_at", "error", "traceback", "result", "params", "flops",
         "peak_memory", "environment", "resumed_from", "code", "mlflow_run_id")  # fmt: skip
MetricRow = tuple[str, str, int, float, float | None]
"""(trial key, metric name, step, value, wall time in unix seconds or None)."""


def error_line(text: str | None) -> str | None:
    """The line that names an error: a traceback's last line (`ValueError: boom`), else the first line."""
    lines = (text or "").strip().splitlines()
    if not lines:
        return None
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


def divergence(epoch: Any, step: Any) -> str | None:
    """Where a diverged trial's loss stopped being finite, in words (`diverged at epoch 3, step 17`); None where
    the epoch was not recorded. What `launch`, `status`, `show` and the report's unfinished trials say."""
    if missing(epoch):
        return None
    return f"diverged at epoch {int(epoch)}" + ("" if missing(step) else f", step {int(step)}")


def _field(trial: Any, name: str) -> Any:
    return trial.get(name) if isinstance(trial, Mapping) else getattr(trial, name, None)


def _check_info(info: dict[str, Any]) -> dict[str, Any]:
    if unknown := set(info) - INFO_FIELDS:
        raise TypeError(f"unknown trial fields {sorted(unknown)}; expected some of {sorted(INFO_FIELDS)}")
    return info


def _finite(value: Any) -> Any:
    """JSON data with NaN/inf as null: JSON has no such numbers (PostgreSQL refuses them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _text(trial: Any, method: str, name: str) -> str:
    """A trial's field as kept, as JSON text: a planned Trial's own text of it (`recorded_text`: no secret
    values; `axes_text`), else the field as given, serialised."""
    made = getattr(trial, method, None)
    return str(made()) if callable(made) else json.dumps(_json(_field(trial, name)))


def _json(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


class Store(Leases):
    """The results database at `url` (default `sqlite:///db/ablate.sqlite` under the cwd; any SQLAlchemy
    URL, e.g. postgresql+psycopg://..., or a SQLite file's path). Use as a context manager or call `close()`.
    Opening it migrates the database (`Database`); leases are `Leases`; here are the writer's other writes and
    the reads it makes between them."""

    # ------------------------------------------------------------------------------------------ sweeps
    def upsert_sweep(
        self,
        name: str,
        *,
        spec_path: str | None = None,
        spec: Any = None,
        baseline: Any = None,
        metric: str | None = None,
        description: str | None = None,
    ) -> None:
        """Create a sweep or update the fields given (None leaves a field as it is)."""
        given = {"spec_path": spec_path, "spec": _json(spec), "baseline": _json(baseline), "metric": metric,
                 "description": description}  # fmt: skip
        given = {k: v for k, v in given.items() if v is not None}
        t = now()
        with self._write() as conn:
            engine.upsert(conn, SWEEPS, [{"name": name, "created_at": t, "updated_at": t, **given}], ["name"],
                       ["updated_at", *given])  # fmt: skip

    def keep_sweep_mlflow(self, name: str, experiment_id: str, run_id: str, replacing: str | None) -> str:
        """Keep `run_id` (in `experiment_id`) as the sweep's MLflow parent run, so a relaunch reuses it, if the
        store still keeps `replacing` (None: no run yet), and return the run it keeps: two launchers that start
        one sweep at once keep one parent run, the first to write (as `keep_mlflow_run` for a trial's run)."""
        return self._keep_run(SWEEPS, SWEEPS.c.name, name, run_id, replacing, mlflow_experiment_id=experiment_id)

    def add_trials(self, sweep: str, trials: Iterable[Any], plan: Iterable[str] | None = None) -> None:
        """Add planned trials to `sweep` (created if missing), in plan order.

        A trial is a `planner.Trial` or a mapping with key, config (dict or TrialConfig), axes, variant.
        New keys start `pending`; existing keys keep their state and record, and gain this membership
        (its axes and position are overwritten if the trial was in the sweep already). `plan`: the key of every
        trial the sweep's plan makes now (`trials`, and those later rounds may add): the sweep's other trials are
        marked outside its plan (`Membership.planned`), what a report leaves out unless asked; None (a caller
        that adds to a sweep) leaves the others as they are.
        """
        t = now()
        new, members = [], []
        for pos, trial in enumerate(trials):  # JSON serialised here, once per row (axes serve both tables)
            key, axes, config = (
                _field(trial, "key"),
                _text(trial, "axes_text", "axes"),
                _text(trial, "recorded_text", "config"),
            )
            new.append({"key": key, "variant": _field(trial, "variant"), "config": config, "axes": axes,
                        "state": "pending", "attempts": 0, "created_at": t})  # fmt: skip
            members.append({"sweep": sweep, "trial_key": key, "axes": axes, "position": pos, "planned": True})
        later = [] if plan is None else list(set(plan) - {m["trial_key"] for m in members})
        mine = MEMBERS.c.sweep == sweep
        with self._write() as conn:
            engine.upsert(conn, SWEEPS, [{"name": sweep, "created_at": t, "updated_at": t}], ["name"])
            # the variant is derived from the config: always current
            engine.upsert(conn, TRIALS, new, ["key"], ["variant"], serialised=["config", "axes"])
            if plan is not None:  # one transaction: a reader sees the old plan's flags or the new one's
                conn.execute(update(MEMBERS).where(mine, MEMBERS.c.planned).values(planned=False))
                if later:  # a later round's trials added before: still planned
                    among = engine.among(conn.dialect.name, MEMBERS.c.trial_key, later)
                    conn.execute(update(MEMBERS).where(mine, among).values(planned=True))
            engine.upsert(conn, MEMBERS, members, ["sweep", "trial_key"], ["axes", "position", "planned"],
                       serialised=["axes"])  # fmt: skip

    # ------------------------------------------------------------------------------------------ trials
    def mark_running(
        self,
        key: str,
        *,
        host: str | None = None,
        node_id: str | None = None,
        device: str | None = None,
        attempt: int | None = None,
    ) -> None:
        """A trial (re)starts: state running, a new start time, the last outcome cleared. `attempt` sets
        the attempt count (idempotent on a repeated message); None adds one."""
        attempts = TRIALS.c.attempts + 1 if attempt is None else attempt
        self._update(TRIALS, TRIALS.c.key == key, key, state="running", attempts=attempts, started_at=now(),
                     finished_at=None, error=None, traceback=None, result=None, diverged_epoch=None,
                     diverged_step=None, host=host, node_id=node_id, device=device)  # fmt: skip

    def finish(
        self,
        key: str,
        state: str,
        *,
        result: Mapping[str, Any] | None = None,
        error: str | None = None,
        traceback: str | None = None,
        diverged_epoch: int | None = None,
        diverged_step: int | None = None,
        **info: Any,
    ) -> None:
        """A trial ends in `state` (done | failed | diverged | interrupted) with its final result
        ({"test": {"top1": ...}}; NaN/inf kept as null) or its error (message and/or traceback; the `error`
        column keeps the line that names it); `info`: facts about the run (INFO_FIELDS). One transaction, which
        frees a done trial's lease: nobody claims a done trial, and a launcher killed before it released its leases
        leaves none on the trials it finished."""
        if state not in FINAL_STATES:
            raise ValueError(f"finish state must be one of {FINAL_STATES}, not {state!r}")
        if info.get("code"):
            info["code_digest"] = info["code"].get("digest")
        freed = dict.fromkeys(("lease_owner", "lease_host", "lease_expires")) if state == "done" else {}
        self._update(TRIALS, TRIALS.c.key == key, key, state=state, finished_at=now(), result=_finite(result),
                     error=error_line(error or traceback), traceback=traceback or error,
                     diverged_epoch=diverged_epoch, diverged_step=diverged_step, **freed,
                     **_check_info(info))  # fmt: skip

    def interrupt(self, keys: Iterable[str] | None = None, state: str = "interrupted") -> int:
        """Mark `running` trials (all, or those of `keys`) `interrupted` (after Ctrl-C, or at a launch's start
        for trials a killed launcher left running) or `preempted` (SIGTERM). Returns how many."""
        stmt = update(TRIALS).where(self._keyed(keys), TRIALS.c.state == "running")
        with self._write() as conn:
            return int(conn.execute(stmt.values(state=state, finished_at=now())).rowcount)

    def set_mirrored(self, key: str, step: int, state: str) -> bool:
        """MLflow now has the trial's metrics up to `step` and shows `state` (see `ablate.tracking.mirror`): kept
        only while the trial is in `state`, so a mirror that read the trial before it changed never marks MLflow
        in step with a state the trial has left (the trial stays unmirrored). Returns whether it was kept."""
        with self._write() as conn:
            stmt = update(TRIALS).where(TRIALS.c.key == key, TRIALS.c.state == state)
            return bool(conn.execute(stmt.values(mlflow_step=step, mlflow_state=state)).rowcount)

    def set_checkpoint(self, key: str, checkpoint: Mapping[str, Any]) -> None:
        """The trial's newest checkpoint: its SHA-256 and the code digest it was written with."""
        self._update(TRIALS, TRIALS.c.key == key, key, checkpoint=dict(checkpoint))

    def checkpoints(self, keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """The recorded last checkpoint of each trial (of `keys`, or all) that has one."""
        return self._column("checkpoint", keys)

    def keep_mlflow_run(self, key: str, run_id: str, replacing: str | None) -> str:
        """Keep `run_id` as the trial's MLflow run (so a resumed trial logs to the same run) if the store still
        keeps `replacing` (None: no run yet), and return the run it keeps: the launchers sharing a store mirror
        each other's trials, and two that create a trial's run at once keep one, the first to write."""
        return self._keep_run(TRIALS, TRIALS.c.key, key, run_id, replacing)

    def _keep_run(self, table: Any, id_col: Any, ident: str, run_id: str, replacing: str | None, **also: Any) -> str:
        """Compare-and-set of a row's `mlflow_run_id` (with `also`), returning the run the row keeps."""
        was = table.c.mlflow_run_id.is_(None) if replacing is None else table.c.mlflow_run_id == replacing
        with self._write() as conn:
            conn.execute(update(table).where(id_col == ident, was).values(mlflow_run_id=run_id, **also))
            kept = conn.execute(select(table.c.mlflow_run_id).where(id_col == ident)).scalar_one_or_none()
        if kept is None:
            raise KeyError(f"no {table.name[:-1]} {ident!r} in the store")
        return str(kept)

    def log_metrics(self, key: str, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        """Metric values of one trial at one step (epoch), in one transaction; a repeat overwrites."""
        self.log_metric_rows([(key, name, step, value, wall_time) for name, value in values.items()])

    def log_metric_rows(self, rows: Iterable[MetricRow]) -> None:
        """Many trials' metric rows in one transaction (what a recorder flushes); a repeat overwrites."""
        cols = ("trial_key", "name", "step", "value", "wall_time")
        data = [dict(zip(cols, (k, n, int(s), float(v), w))) for k, n, s, v, w in rows]
        with self._write() as conn:
            engine.upsert(conn, METRICS, data, ["trial_key", "name", "step"], ["value", "wall_time"])

    def archive(self, keys: Iterable[str], reason: str) -> int:
        """Trials to train again (stale code, `--rerun`): each one's row and epoch metrics are kept in
        `previous_results`, its metrics cleared and the row reset to pending (with no MLflow run: the new
        training gets a run of its own). One transaction; returns how many."""
        t, where = now(), self._keyed(keys)
        with self._write() as conn:
            rows = conn.execute(select(TRIALS.c.key, *(TRIALS.c[c] for c in _KEPT)).where(where)).mappings().all()
            for row in rows:
                metrics = conn.execute(select(METRICS.c.name, METRICS.c.step, METRICS.c.value)
                                       .where(METRICS.c.trial_key == row["key"])).all()  # fmt: skip
                record = {c: row[c].isoformat() if isinstance(row[c], datetime) else row[c] for c in _KEPT}
                record["metrics"] = [list(m) for m in metrics]
                conn.execute(PREVIOUS.insert().values(trial_key=row["key"], archived_at=t, reason=reason,
                                                      record=_finite(record)))  # fmt: skip
                conn.execute(METRICS.delete().where(METRICS.c.trial_key == row["key"]))
            return int(conn.execute(update(TRIALS).where(where).values(**_RESET)).rowcount)

    def forget(self, keys: Iterable[str]) -> int:
        """Delete trials whole: their rows, memberships, metrics and previous results. Returns how many."""
        where = self._keyed(keys)
        chosen = select(TRIALS.c.key).where(where).scalar_subquery()
        with self._write() as conn:
            for table, column in ((METRICS, "trial_key"), (PREVIOUS, "trial_key"), (MEMBERS, "trial_key")):
                conn.execute(table.delete().where(table.c[column].in_(chosen)))
            return int(conn.execute(TRIALS.delete().where(where)).rowcount)

    # ------------------------------------------------------------------------------------------- reads
    def done_keys(self, keys: Iterable[str] | None = None) -> set[str]:
        """Keys (of `keys`, or all) whose trial is done, whatever sweep ran it."""
        return {k for k, s in self.states(keys).items() if s == "done"}

    def states(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """State of each known trial (of `keys`, or all); unknown keys are left out."""
        with self.engine.connect() as conn:
            return dict(conn.execute(select(TRIALS.c.key, TRIALS.c.state).where(self._keyed(keys))).all())

    def finished_since(self, since: datetime) -> dict[str, str]:
        """State of each trial that ended (`ENDED`: done, failed or diverged) at or after `since` by the clock of
        the launcher that recorded it (`finish`'s finished_at), whatever its sweep: read from the index of finish
        times, so its cost follows the trials that finished since, not the size of the store or of a queue. A
        naive `since` is UTC, as SQLite gives its times back."""
        since = since.replace(tzinfo=timezone.utc) if since.tzinfo is None else since.astimezone(timezone.utc)
        # `state || ''`: no index of states can serve it, so SQLite (no statistics) ranges over the finish times
        # instead of reading the row of every ended trial; the states are in the index's entries
        ended = (TRIALS.c.state + "").in_(ENDED)
        stmt = select(TRIALS.c.key, TRIALS.c.state).where(TRIALS.c.finished_at >= since, ended)
        with self.engine.connect() as conn:
            return dict(conn.execute(stmt).all())

    def holders(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """Who holds a lease (user@host:pid) on each leased trial (of `keys`, or all), lapsed or not."""
        stmt = select(TRIALS.c.key, TRIALS.c.lease_host).where(self._keyed(keys), TRIALS.c.lease_owner.is_not(None))
        with self.engine.connect() as conn:
            return dict(conn.execute(stmt).all())

    def unmirrored(self, sweeps: Iterable[str] | None = None) -> list[str]:
        """Keys of the started trials (of `sweeps`, or all) whose MLflow run lags behind the store: another
        state, or metric steps past the last one mirrored."""
        last = select(METRICS.c.trial_key, func.max(METRICS.c.step).label("step")).group_by(METRICS.c.trial_key)
        last_step = last.subquery()
        stmt = (
            select(TRIALS.c.key)
            .outerjoin(last_step, last_step.c.trial_key == TRIALS.c.key)
            .where(
                TRIALS.c.state != "pending",
                or_(
                    TRIALS.c.mlflow_state.is_(None),
                    TRIALS.c.mlflow_state != TRIALS.c.state,
                    last_step.c.step > func.coalesce(TRIALS.c.mlflow_step, 0),
                ),
            )
        )
        if sweeps is not None:
            stmt = stmt.where(TRIALS.c.key.in_(select(MEMBERS.c.trial_key).where(MEMBERS.c.sweep.in_(list(sweeps)))))
        with self.engine.connect() as conn:
            return list(conn.execute(stmt.order_by(TRIALS.c.key)).scalars())

    def metric_rows(self, key: str, after: int = 0) -> list[tuple[str, int, float, float | None]]:
        """(name, step, value, wall time) of the trial's metrics past step `after`, by step."""
        stmt = select(METRICS.c.name, METRICS.c.step, METRICS.c.value, METRICS.c.wall_time).where(
            METRICS.c.trial_key == key, METRICS.c.step > after
        )
        with self.engine.connect() as conn:
            rows = conn.execute(stmt.order_by(METRICS.c.step, METRICS.c.name)).all()
        return [(n, int(s), math.nan if v is None else float(v), w) for n, s, v, w in rows]

    def sweeps_of(self, key: str) -> list[str]:
        """The sweeps that planned the trial, by name."""
        stmt = select(MEMBERS.c.sweep).where(MEMBERS.c.trial_key == key).order_by(MEMBERS.c.sweep)
        with self.engine.connect() as conn:
            return list(conn.execute(stmt).scalars())

    def codes(self, keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """The recorded code (`ablate.provenance.fingerprint`) of each trial (of `keys`, or all) that has one."""
        return self._column("code", keys)

    def configs(self, keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """The resolved config of each trial (of `keys`, or all)."""
        return self._column("config", keys)

    def _column(self, name: str, keys: Iterable[str] | None) -> dict[str, Any]:
        stmt = select(TRIALS.c.key, TRIALS.c[name]).where(self._keyed(keys), TRIALS.c[name].is_not(None))
        with self.engine.connect() as conn:
            return {k: v for k, v in conn.execute(stmt) if v is not None}  # a JSON null too

    def previous(self, key: str) -> list[dict[str, Any]]:
        """The trial's earlier results (oldest first): reason, archived_at and the kept columns."""
        stmt = select(PREVIOUS.c.reason, PREVIOUS.c.archived_at, PREVIOUS.c.record).where(
            PREVIOUS.c.trial_key == key).order_by(PREVIOUS.c.id)  # fmt: skip
        with self.engine.connect() as conn:
            return [{"reason": r, "archived_at": at, **rec} for r, at, rec in conn.execute(stmt)]

    def trial(self, key: str) -> TrialRecord | None:
        """The trial's full record (a detached ORM object), or None."""
        return self._get(TrialRecord, key)

    def sweep(self, name: str) -> SweepRecord | None:
        """The sweep's record (a detached ORM object), or None."""
        return self._get(SweepRecord, name)

    def dump(self, sweeps: str | Iterable[str] | None = None) -> Dump:
        """The rows of `sweeps` (None: every sweep) as they are, read in one snapshot (`ablate.store.dump`): what
        `ablate export` writes."""
        with self.engine.connect() as conn, conn.begin():
            return dump.read(conn, sweeps)

    def add_dump(self, rows: Dump) -> Added:
        """Add `rows` in one transaction: sweeps the store lacks and the trials it does not hold yet, with their
        memberships, metrics and previous results (`ablate.store.dump.write`); what `ablate import` writes."""
        with self._write() as conn:
            return dump.write(conn, rows)

    def membership(self, sweep: str, key: str) -> Membership | None:
        """The trial's place in the sweep (axes, position), or None."""
        return self._get(Membership, (sweep, key))
