"""The results schema as SQLAlchemy 2 typed ORM models (the Alembic migrations build exactly this).

Portable SQL only (SQLite file by default, PostgreSQL for a team): JSON columns, string keys, UTC
timestamps. Trial keys and variant keys are the planner's hashes; a trial belongs to any number of sweeps
through `Membership`, whose axis values may differ per sweep. `Metric` has the primary key
(trial_key, name, step), so writing the same epoch twice overwrites it instead of adding a row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, MetaData, String, Text, true
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: Every trial state. `running` trials left by a killed launcher are set to `interrupted` on the next launch;
#: `preempted`: stopped by SIGTERM or a lost worker or node, checkpointed, resumed by the next attempt.
STATES = ("pending", "running", "done", "failed", "diverged", "interrupted", "preempted")
#: States a trial ends in; `finish` accepts only these.
FINAL_STATES = ("done", "failed", "diverged", "interrupted", "preempted")
#: Final states no launch trains again unless asked to (`interrupted` and `preempted` trials resume).
ENDED = ("done", "failed", "diverged")

KEY = String(64)
NAME = String(200)


class Base(DeclarativeBase):
    # Named constraints keep migrations portable (SQLite batch mode and PostgreSQL need the names).
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True), str: Text, int: BigInteger}


class SweepRecord(Base):
    """A named set of trials, with the spec it was planned from and its MLflow parent run."""

    __tablename__ = "sweeps"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    spec_path: Mapped[str | None]
    spec: Mapped[dict[str, Any] | None]
    baseline: Mapped[Any | None] = mapped_column(JSON)
    metric: Mapped[str | None] = mapped_column(NAME)
    description: Mapped[str | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    mlflow_experiment_id: Mapped[str | None] = mapped_column(String(64))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))


class TrialRecord(Base):
    """One training run, shared by every sweep that planned the same config."""

    __tablename__ = "trials"
    __table_args__ = (
        Index("ix_trials_state_digest_key", "state", "code_digest", "key"),
        Index("ix_trials_finished_at_state_key", "finished_at", "state", "key"),
    )
    """States, code digests and keys without reading the rows (`status` and `runs` of a large sweep); the trials
    finished since a moment, with their states, likewise (`Store.finished_since`, after each trial a launcher
    settles)."""

    key: Mapped[str] = mapped_column(KEY, primary_key=True)
    variant: Mapped[str | None] = mapped_column(KEY, index=True)
    config: Mapped[dict[str, Any]]
    axes: Mapped[dict[str, Any] | None]
    """Axis values in the sweep that first planned it (per-sweep values are in `Membership`)."""
    state: Mapped[str] = mapped_column(String(16), index=True)
    attempts: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None]
    """First line of the error; the whole text is in `traceback`."""
    traceback: Mapped[str | None]
    host: Mapped[str | None] = mapped_column(NAME)
    node_id: Mapped[str | None] = mapped_column(NAME)
    device: Mapped[str | None] = mapped_column(NAME)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    params: Mapped[int | None]
    flops: Mapped[int | None]
    peak_memory: Mapped[int | None]
    """Bytes."""
    environment: Mapped[dict[str, Any] | None]
    """git sha and dirty flag, package versions, host, and `arithmetic`: what its bits depend on beyond the key
    (CPU, torch's kernels and threads, builds: `ablate.provenance.environment.Arithmetic`)."""
    result: Mapped[dict[str, Any] | None]
    """Final metrics, nested by split ({"test": {"top1": ...}}); flattened to `test.top1` in frames."""
    diverged_epoch: Mapped[int | None]
    diverged_step: Mapped[int | None]
    resumed_from: Mapped[int | None]
    """Epoch the last attempt resumed from its checkpoint (0: it trained from scratch)."""
    mlflow_step: Mapped[int | None]
    """The last metric step (epoch) MLflow has of this trial (`ablate.tracking.mirror`)."""
    mlflow_state: Mapped[str | None] = mapped_column(String(16))
    """The state MLflow's run shows; differs from `state` while MLflow lags behind."""
    lease_owner: Mapped[str | None] = mapped_column(String(64), index=True)
    """The launcher that holds the trial (see `Store.claim`); None: free to claim."""
    lease_host: Mapped[str | None] = mapped_column(NAME)
    """Where that launcher runs (user@host:pid), for `ablate status`."""
    lease_expires: Mapped[datetime | None]
    """When the lease lapses unless its owner's heartbeat renews it; after that any launcher may take it."""
    code: Mapped[dict[str, Any] | None]
    """The code the result came from (`ablate.provenance.fingerprint`): component digests, package versions, digest, and
    the git commit and dirty flag of the experiments file's repository."""
    code_digest: Mapped[str | None] = mapped_column(String(16))
    """`code["digest"]`, for comparisons: a done trial whose digest differs from the current code is stale."""
    checkpoint: Mapped[dict[str, Any] | None]
    """The trial's last checkpoint as its trial reported it: SHA-256 of the file and the code digest it was
    written with. A checkpoint file that does not match is refused
    (`ablate.training.checkpoints.Checkpointer.admit`)."""
    source: Mapped[dict[str, Any] | None]
    """Where a trial ablate did not train came from (`ablate import`: kind, uri, experiment, run id); None for the
    trials ablate trained. An imported trial is never trained again nor stale (it has no code record)."""


class Membership(Base):
    """A trial in a sweep, with its axis values there and its position in the sweep's plan."""

    __tablename__ = "sweep_trials"
    __table_args__ = (
        Index("ix_sweep_trials_sweep_position", "sweep", "position", "trial_key"),
        Index("ix_sweep_trials_trial_key_sweep", "trial_key", "sweep", "position"),
    )
    """A sweep's trials in plan order, and a trial's sweeps and positions, without reading the rows (`status`
    and `runs` of a large sweep)."""

    sweep: Mapped[str] = mapped_column(NAME, ForeignKey("sweeps.name", ondelete="CASCADE"), primary_key=True)
    trial_key: Mapped[str] = mapped_column(KEY, ForeignKey("trials.key"), primary_key=True)
    axes: Mapped[dict[str, Any] | None]
    position: Mapped[int] = mapped_column(default=0)
    planned: Mapped[bool] = mapped_column(default=True, server_default=true())
    """Whether the sweep's current plan makes this trial (its last launch's trials, and the seeds and arms its
    later rounds may add); false for trials launched before under other settings (`-s train.epochs=4`, a knob
    since renamed), which reports leave out unless asked."""


class Metric(Base):
    """One value of one metric of one trial at one step (epoch); rows are overwritten, never duplicated."""

    __tablename__ = "metrics"
    __table_args__ = {"sqlite_with_rowid": False}

    trial_key: Mapped[str] = mapped_column(KEY, ForeignKey("trials.key"), primary_key=True)
    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    step: Mapped[int] = mapped_column(primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)
    """NaN reads back as NaN (SQLite stores it as NULL)."""
    wall_time: Mapped[float | None] = mapped_column(Float)
    """Unix seconds when the value was measured."""


class PreviousResult(Base):
    """A trial's result kept when the trial is trained again (stale code, `--rerun`): the trial row as it was."""

    __tablename__ = "previous_results"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )  # SQLite numbers only INTEGER keys by itself
    trial_key: Mapped[str] = mapped_column(KEY, ForeignKey("trials.key"), index=True)
    archived_at: Mapped[datetime]
    reason: Mapped[str] = mapped_column(String(32))
    """Why it was trained again: stale, failed, diverged, all."""
    record: Mapped[dict[str, Any]]
    """The trial's columns then: state, result, code, environment, attempts, times, error and traceback."""
