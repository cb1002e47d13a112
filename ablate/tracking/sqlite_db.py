"""A local MLflow store (SQLite): fast commits on every connection MLflow opens to it (`fast_sqlite`), and one
process at a time creating it (`creating`)."""

from __future__ import annotations

import fcntl
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def fast_sqlite(db: Path) -> None:
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


@contextmanager
def creating(db: Path | None) -> Iterator[None]:
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
