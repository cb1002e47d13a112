"""Opening a results database: the engine (SQLite in WAL mode with a busy timeout), the Alembic upgrade
to the newest schema, and the dialect-aware pieces the store's statements share: the upsert every write goes
through, and the test of a column against a list of keys.

SQLite transactions: pysqlite's own BEGIN handling is switched off and SQLAlchemy emits it: writes begin
with BEGIN IMMEDIATE, so a writer takes the file's write lock first and waits (busy timeout) instead of
failing when another process commits between its read and its write; reads begin a plain deferred BEGIN
and never block writers (WAL).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    Engine,
    Table,
    Text,
    bindparam,
    cast,
    create_engine,
    event,
    func,
    inspect,
    literal,
    make_url,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

DEFAULT_URL = "sqlite:///db/ablate.sqlite"
BUSY_TIMEOUT_MS = 60_000
SWITCH_PAUSE = 0.01
"""Seconds between tries of the switch to WAL mode that another connection's lock refused."""
MIGRATIONS = Path(__file__).with_name("migrations")
#: Execution option that marks a connection as a writer (BEGIN IMMEDIATE on SQLite).
WRITER_OPTION = "ablate_write"
WRITE = {WRITER_OPTION: True}
MIGRATION_LOCK = 71582026
"""PostgreSQL advisory lock id held while a process migrates the schema."""


def database_url(db: str | None = None) -> str:
    """The URL of a results database given as a URL or as a SQLite file's path (`--db results.sqlite`, which a
    URL parser rejects); None: the default."""
    if not db:
        return DEFAULT_URL
    return db if "://" in db else f"sqlite:///{Path(db).expanduser().resolve()}"


def sqlite_file(url: str) -> Path | None:
    """The database file of a `sqlite:///` URL or a path, None for anything else (a server, memory)."""
    url = database_url(url)
    if not url.startswith("sqlite"):
        return None
    db = make_url(url).database
    return Path(db) if db and db != ":memory:" else None


def database_exists(url: str | None = None) -> bool:
    """False only for a SQLite file that is not there (so reading commands need not create one)."""
    path = sqlite_file(database_url(url))
    return path is None or path.exists()


def make_engine(url: str | None = None) -> Engine:
    """An engine for `url`, a URL or a SQLite file's path (default: db/ablate.sqlite under the cwd; its folder is
    created)."""
    sa_url = make_url(database_url(url))
    if sa_url.get_backend_name() != "sqlite":
        return create_engine(sa_url, pool_pre_ping=True)
    db = sa_url.database
    if db and db != ":memory:" and not db.startswith("file:"):
        path = Path(db).resolve()  # absolute, so a later chdir cannot point new connections elsewhere
        path.parent.mkdir(parents=True, exist_ok=True)
        sa_url = sa_url.set(database=str(path))
    engine = create_engine(sa_url)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _write_ahead(cur)
        cur.execute("PRAGMA synchronous = NORMAL")  # WAL: never corrupts; a power cut may drop the last commits
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITER_OPTION) else "BEGIN")

    return engine


def _write_ahead(cur: Any) -> None:
    """Put the file in WAL mode (it stays so; a no-op once set). SQLite answers a switch that meets another
    connection's lock with "database is locked" at once, without waiting its busy timeout, so processes opening
    a new database together would fail: the switch is tried again within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(SWITCH_PAUSE)


def _alembic() -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def revision_number(revision: str = "head") -> str:
    """The migration id `revision` names (`head`: the newest schema's)."""
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(_alembic()).as_revision_number(revision))


def head() -> str:
    """The newest schema's migration id, read from the migration files' names (`0010_source.py`: "0010") without
    alembic, whose import is most of a launch's start when the database is up to date already."""
    return max(p.name.partition("_")[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def at(engine: Engine, revision: str) -> bool:
    """Whether the database's schema is at `revision`, read without alembic (False for a new database)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return False
        return list(conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars()) == [revision]


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database to `revision` (default: the newest schema); a no-op when it is there already."""
    if revision == "head" and at(engine, head()):
        return
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _alembic()
    target = revision_number(revision)
    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        if conn.dialect.name == "postgresql":  # one migrator at a time (SQLite's BEGIN IMMEDIATE does this there)
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        if set(MigrationContext.configure(conn).get_current_heads()) == {target}:
            return
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def upsert_stmt(
    dialect: str, table: Table, keys: Iterable[str], update: Iterable[str] = (), serialised: Iterable[str] = ()
) -> Any:
    """INSERT ... ON CONFLICT (keys): overwrite the `update` columns, or with none keep the old row. The
    `serialised` JSON columns take their values as JSON text already (bound as text, not serialised again)."""
    if dialect not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"upserts are written for sqlite and postgresql, not {dialect}")
    stmt = (sqlite if dialect == "sqlite" else postgresql).insert(table)
    if serialised := list(serialised):  # PostgreSQL takes text into a json column only by an explicit cast
        text = {c: bindparam(c, type_=Text()) for c in serialised}
        stmt = stmt.values({c: cast(v, JSON) if dialect == "postgresql" else v for c, v in text.items()})
    if update := list(update):
        return stmt.on_conflict_do_update(index_elements=list(keys), set_={c: stmt.excluded[c] for c in update})
    return stmt.on_conflict_do_nothing(index_elements=list(keys))


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    keys: Iterable[str],
    update: Iterable[str] = (),
    serialised: Iterable[str] = (),
) -> None:
    """Insert `rows` (one executemany); duplicates of `keys` overwrite the `update` columns or are skipped.
    `serialised`: JSON columns whose values are JSON text already (see `upsert_stmt`)."""
    if rows:
        conn.execute(upsert_stmt(conn.dialect.name, table, keys, update, serialised), list(rows))


def among(dialect: str, column: ColumnElement[str], keys: Iterable[str]) -> ColumnElement[bool]:
    """`column` is one of `keys`, however many, bound as one JSON parameter and read back as a table. An IN list
    binds one parameter per key, so it was read in chunks below SQLite's limit, and rendering the list was most
    of the read: a 10,000-trial report's metrics frame took 0.22 s on PostgreSQL, 0.04 s this way."""
    listed = list(keys)
    if dialect == "postgresql":
        table = func.jsonb_array_elements_text(literal(listed, postgresql.JSONB)).table_valued("value")
    else:
        table = func.json_each(json.dumps(listed)).table_valued("value")
    return column.in_(select(table.c.value))
