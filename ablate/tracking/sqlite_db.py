"""A local MLflow store (SQLite): fast commits on every connection MLflow opens to it (`fast_sqlite`), and one
process at a time creating it (`creating`), a fresh one from a copy of an empty migrated database kept in ablate's
cache folder (`ablate.provenance.cache`), one per MLflow version: MLflow's own creation runs its fifty migrations,
about 2 s of a launch's fixed cost on 2 cores, where a copy takes milliseconds."""

from __future__ import annotations

import fcntl
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

from ablate.provenance import cache


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
            seeded = db.exists() or _seed(db)
            yield
            if not seeded:
                _keep_template(db)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def template() -> Path:
    """The empty migrated MLflow database of this MLflow version, in the cache folder."""
    import mlflow

    return cache.folder() / f"mlflow-{mlflow.__version__}.sqlite"


def _seed(db: Path) -> bool:
    """Make the fresh `db` a copy of the template, if there is one: MLflow then finds its schema current and adds
    only its default experiment (the template has none: its artifact location and time are the new store's).
    False where there is no template (or it cannot be copied): MLflow creates the database."""
    with suppress(OSError):
        _replace(db, lambda tmp: shutil.copyfile(template(), tmp))
        return True
    return False


def _keep_template(db: Path) -> None:
    """Keep the database MLflow just created (`db`: migrated, its default experiment only) as the template, without
    that experiment; a cache that cannot be written is passed over."""

    def copy(tmp: Path) -> None:
        with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(tmp)) as target:
            source.backup(target)
            target.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            target.execute("DELETE FROM experiments WHERE experiment_id = 0")
            target.commit()
            target.execute("PRAGMA journal_mode = DELETE")  # one file, copied whole

    with suppress(OSError, sqlite3.Error):
        target = template()
        target.parent.mkdir(parents=True, exist_ok=True)
        _replace(target, copy)


def _replace(path: Path, write: Any) -> None:
    """Write `path` whole through a temporary file beside it (`write(tmp)`), renamed over it: a reader never sees
    half of it."""
    tmp = path.with_name(f".{path.name}-{uuid.uuid4().hex}")  # made by `write`, so with the umask's mode
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
