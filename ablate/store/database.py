"""The store's connection for its one writer: open and migrate the database, translate its faults, retry while its
server restarts, one short transaction per write (`Database`, which `ablate.store.Store` extends with its writes)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import Connection, event, update
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DatabaseError, DataError, IntegrityError, ProgrammingError
from sqlalchemy.orm import Session

from ablate.patience import patiently
from ablate.store import engine
from ablate.store.faults import StoreUnavailable, explain, restarting
from ablate.store.queries import TRIALS, Queries
from ablate.store.schema import Base

#: Bound parameters per IN (...) query; below every backend's limit.
CHUNK = 500

R = TypeVar("R", bound=Base)
T = TypeVar("T")
D = TypeVar("D", bound="Database")


def now() -> datetime:
    return datetime.now(timezone.utc)


class Database(Queries):
    """The connection a `Store` writes through: the database at `url` migrated to the newest schema when opened,
    its faults raised as StoreUnavailable, calls retried while its server restarts, one transaction per write."""

    def __init__(self, url: str | None = None, patience: float = 0.0) -> None:
        """`patience`: seconds to wait for a database server that does not answer yet (one restarting: a launch
        waits, as the launcher it replaces may be gone; a report or `status` says so at once)."""
        self.url = engine.database_url(url)
        try:
            self.engine = engine.make_engine(self.url)
        except OSError as e:  # the database's folder cannot be made
            raise explain(self.url, e) from e
        event.listen(self.engine, "handle_error", self._unavailable)
        self._writer = self.engine.execution_options(**engine.WRITE)
        self._batch = threading.local()
        """This thread's open `batch` transaction, as `conn` (absent or None: none)."""
        self.patience = patience
        self.patiently(lambda: engine.upgrade(self.engine))

    def patiently(self, call: Callable[[], T]) -> T:
        """`call` (this store's reads or writes), tried again while its database server restarts, for up to the
        `patience` this store was opened with: a launch's set-up writes it between Ray's start and its loop."""
        return patiently(call, restarting, self._waiting, self.patience)

    def _waiting(self, error: Exception, pause: float) -> None:
        print(f"ablate: {error} Trying again in {pause:.1f} s.", file=sys.stderr, flush=True)

    def _unavailable(self, context: ExceptionContext) -> StoreUnavailable | None:
        """A database fault (full disk, read-only, locked or corrupt file, a server that is down or restarting)
        as StoreUnavailable (`ablate.store.faults`), from every statement and connection, reads as much as writes:
        a launch goes on without the store and journals what it refuses, whichever call met the fault first.
        Constraint and programming errors stay themselves; a failed pre-ping is the pool's to mend (it reconnects)."""
        error = context.sqlalchemy_exception
        if context.is_pre_ping or not isinstance(error, DatabaseError):
            return None
        return None if isinstance(error, (IntegrityError, ProgrammingError, DataError)) else explain(self.url, error)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self: D) -> D:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Every write this thread makes inside is one transaction, committed as the block ends, or none of them if
        it raises: a launch records a wave of trials (their starts, epochs and results) in one transaction, not one
        per record. Other threads' writes (the heartbeat, the MLflow mirror) keep transactions of their own; a batch
        inside a batch is the outer one. Keep it short: on SQLite it holds the write lock."""
        if getattr(self._batch, "conn", None) is not None:
            yield
            return
        with self._writer.begin() as conn:
            self._batch.conn = conn
            try:
                yield
            finally:
                self._batch.conn = None

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction, or this thread's `batch` (a database fault raises StoreUnavailable:
        `_unavailable`)."""
        conn = getattr(self._batch, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._writer.begin() as conn:
            yield conn

    def _update(self, table: Any, where: Any, key: str, **values: Any) -> None:
        with self._write() as conn:
            if conn.execute(update(table).where(where).values(**values)).rowcount == 0:
                raise KeyError(f"no {table.name[:-1]} {key!r} in the store")

    def _get(self, model: type[R], ident: Any) -> R | None:
        with Session(self.engine, expire_on_commit=False) as session:
            return session.get(model, ident)

    def _keyed(self, keys: Iterable[str] | None) -> Any:
        """The trials of `keys` (None: every trial)."""
        return TRIALS.c.key.is_not(None) if keys is None else engine.among(self.engine.dialect.name, TRIALS.c.key, keys)
