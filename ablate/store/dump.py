"""The store's rows as they are, out and in: what `ablate export` writes and what `ablate import` adds (`Dump`).

Rows are plain dicts of column values (JSON columns as Python data, times as datetimes). `read` takes a sweep's (or
every sweep's) rows in one snapshot; `write` adds rows in one transaction, and only the trials the store does not
hold yet (with their memberships and metrics): a second import of the same rows adds nothing, and a failure leaves
nothing half-written. What a store keeps only for its own launchers and MLflow (leases, the mirror's progress, its
MLflow run ids) is neither read nor written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Connection, func, select

from ablate.store import engine
from ablate.store.queries import MEMBERS, METRICS, PREVIOUS, SWEEPS, TRIALS, as_list

LOCAL = frozenset({"lease_owner", "lease_host", "lease_expires", "mlflow_run_id", "mlflow_step", "mlflow_state",
                   "mlflow_experiment_id"})  # fmt: skip
"""Columns a store keeps for its own launchers and its own MLflow: another store's values mean nothing there."""
SWEEP_COLUMNS = [c.name for c in SWEEPS.c if c.name not in LOCAL]
TRIAL_COLUMNS = [c.name for c in TRIALS.c if c.name not in LOCAL]
MEMBER_COLUMNS = [c.name for c in MEMBERS.c]
METRIC_COLUMNS = [c.name for c in METRICS.c]
PREVIOUS_COLUMNS = [c.name for c in PREVIOUS.c if c.name != "id"]
TRIAL_JSON = [c for c in TRIAL_COLUMNS if isinstance(TRIALS.c[c].type, JSON)]


@dataclass
class Dump:
    """Rows of the store's tables: sweeps, trials, memberships (`members`), per-epoch metrics and the results
    retrained trials had before (`previous`)."""

    sweeps: list[dict[str, Any]] = field(default_factory=list)
    trials: list[dict[str, Any]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    previous: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Added:
    """What `write` added: the trials new to the store and the keys it already held (left as they were)."""

    new: list[str]
    known: list[str]


def read(conn: Connection, sweeps: str | Iterable[str] | None = None) -> Dump:
    """The rows of `sweeps` (None: the whole store): their records, their trials and memberships, the trials'
    metrics and previous results."""
    wanted = as_list(sweeps)
    keys = select(MEMBERS.c.trial_key).where(MEMBERS.c.sweep.in_(wanted)) if wanted is not None else None

    def rows(table: Any, columns: list[str], where: Any, order: list[Any]) -> list[dict[str, Any]]:
        stmt = select(*(table.c[c] for c in columns))
        if where is not None:
            stmt = stmt.where(where)
        return [dict(r) for r in conn.execute(stmt.order_by(*order)).mappings()]

    return Dump(
        rows(SWEEPS, SWEEP_COLUMNS, None if wanted is None else SWEEPS.c.name.in_(wanted), [SWEEPS.c.name]),
        rows(TRIALS, TRIAL_COLUMNS, None if keys is None else TRIALS.c.key.in_(keys), [TRIALS.c.key]),
        rows(
            MEMBERS,
            MEMBER_COLUMNS,
            None if wanted is None else MEMBERS.c.sweep.in_(wanted),
            [MEMBERS.c.sweep, MEMBERS.c.position, MEMBERS.c.trial_key],
        ),
        rows(
            METRICS,
            METRIC_COLUMNS,
            None if keys is None else METRICS.c.trial_key.in_(keys),
            [METRICS.c.trial_key, METRICS.c.name, METRICS.c.step],
        ),
        rows(PREVIOUS, PREVIOUS_COLUMNS, None if keys is None else PREVIOUS.c.trial_key.in_(keys), [PREVIOUS.c.id]),
    )


def known_keys(conn: Connection, keys: Iterable[str]) -> set[str]:
    """Which of `keys` the store holds."""
    return set(conn.execute(select(TRIALS.c.key).where(engine.among(conn.dialect.name, TRIALS.c.key, keys))).scalars())


def write(conn: Connection, dump: Dump) -> Added:
    """Add `dump`'s rows in the transaction of `conn`: its sweeps where the store lacks them (a sweep there keeps
    its record), and its trials the store does not hold, with their memberships, metrics and previous results; a
    membership of a new trial in a sweep that has trials already comes after them (its position shifted)."""
    known = known_keys(conn, (t["key"] for t in dump.trials))
    new = [t for t in dump.trials if t["key"] not in known]
    fresh = {t["key"] for t in new}
    engine.upsert(conn, SWEEPS, dump.sweeps, ["name"])
    engine.upsert(conn, TRIALS, _as_text(new, TRIAL_JSON), ["key"], serialised=TRIAL_JSON)
    members = [m for m in dump.members if m["trial_key"] in fresh]
    after = _last_positions(conn, {m["sweep"] for m in members})
    members = [{**m, "position": m["position"] + after[m["sweep"]], "axes": _text(m["axes"])} for m in members]
    engine.upsert(conn, MEMBERS, members, ["sweep", "trial_key"], serialised=["axes"])
    engine.upsert(conn, METRICS, [m for m in dump.metrics if m["trial_key"] in fresh], ["trial_key", "name", "step"])
    previous = [p for p in dump.previous if p["trial_key"] in fresh]
    if previous:
        conn.execute(PREVIOUS.insert(), previous)
    return Added([t["key"] for t in new], sorted(known))


def _text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _as_text(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """`rows` with their JSON `columns` as JSON text, serialised here once (SQLAlchemy's JSON type would serialise
    each value again on its way to the driver: a third of an import of 100,000 runs)."""
    return [{**r, **{c: _text(r[c]) for c in columns}} for r in rows]


def _last_positions(conn: Connection, sweeps: set[str]) -> dict[str, int]:
    """Per sweep, the position after its last membership (0 for a sweep without any)."""
    stmt = select(MEMBERS.c.sweep, func.max(MEMBERS.c.position)).where(MEMBERS.c.sweep.in_(list(sweeps)))
    found = dict(conn.execute(stmt.group_by(MEMBERS.c.sweep)).all())
    return {s: 0 if found.get(s) is None else int(found[s]) + 1 for s in sweeps}
