"""The results store on real SQLite files and a real PostgreSQL server: schema and migrations, idempotent writes,
concurrency and leases, frames."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta, timezone
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from conftest import ROOT, fresh_database
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError

from ablate.config import TrialConfig
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.store import STATES, TRIAL_COLUMNS, Owner, Store, flatten
from ablate.store.database import CHUNK, now
from ablate.store.engine import make_engine, revision_number, upgrade, upsert_stmt
from ablate.store.queries import METRICS, Condition, Provenance
from ablate.store.schema import Base


def trial(seed: int, kind: str = "softmax", **axes: object) -> Trial:
    """A real planned trial (planner keys) with the given seed and attention kind."""
    cfg = TrialConfig.model_validate({"attention": {"kind": kind}, "seed": seed, "train": {"epochs": 2}})
    return Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": kind, "seed": seed, **axes})


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    """A fresh results database: a SQLite file, or a new database on the session's real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ablate.sqlite'}"
    return fresh_database(request.getfixturevalue("postgres"))


@pytest.fixture
def store(url):
    with Store(url) as s:
        yield s


def count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()


@pytest.mark.parametrize("ci", [None, "true"])
def test_without_postgresql_its_tests_skip_here_and_fail_under_ci(tmp_path, ci):
    """A test on the `postgres` fixture, run by pytest with no initdb on PATH nor in the Debian folder: it skips
    saying why, and under CI=true (which `.ci/run` sets, having installed PostgreSQL) it fails with that reason."""
    (tmp_path / "test_on_postgresql.py").write_text(
        "import conftest\nfrom conftest import postgres\n\n"
        f"conftest.POSTGRES_HOME = conftest.Path({str(tmp_path / 'none')!r})\n\n"
        "def test_store(postgres):\n    pass\n"
    )
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "initdb").exists())
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PATH": path, "PYTHONPATH": str(ROOT / "tests")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "test_on_postgresql.py"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env | ({"CI": ci} if ci else {}), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    out = done.stdout + done.stderr
    assert "PostgreSQL tests need initdb and pg_ctl" in out, out
    expected = (1, "1 error") if ci else (0, "1 skipped")  # a fixture's failure is the test's error
    assert done.returncode == expected[0] and expected[1] in out, out


# --------------------------------------------------------------------------------------- engine, schema
def test_default_url_creates_db_folder_in_wal_mode(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Store() as s:
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        monkeypatch.chdir(tmp_path.parent)  # new connections still open the same file
        s.engine.dispose()
        s.upsert_sweep("later")
        assert s.sweeps_frame()["name"].tolist() == ["later"]
    assert (tmp_path / "db" / "ablate.sqlite").is_file()


def test_migrations_build_exactly_the_orm_schema(store):
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == revision_number()


def test_old_schema_is_upgraded_on_open_keeping_its_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sweeps (name, created_at, updated_at) VALUES ('s', '2025-01-01', '2025-01-01')"))
        conn.execute(text("INSERT INTO trials (key, config, state, attempts, created_at) "
                          "VALUES ('k', '{\"seed\": 3}', 'done', 1, '2025-01-01')"))  # fmt: skip
        conn.execute(text("INSERT INTO sweep_trials (sweep, trial_key, axes, position) VALUES ('s', 'k', '{}', 0)"))
        conn.execute(text("INSERT INTO metrics (trial_key, name, step, value) VALUES ('k', 'loss', 0, 1.5)"))
        assert "peak_memory" not in {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(trials)")}
    engine.dispose()
    with Store(url) as s:
        assert s.done_keys() == {"k"}
        assert s.metrics_frame()["value"].tolist() == [1.5]
        s.finish("k", "diverged", peak_memory=123, diverged_epoch=1, diverged_step=40, resumed_from=2)
        row = s.trials_frame().iloc[0]
        assert (row.seed, row.peak_memory, row.diverged_epoch, row.diverged_step, row.resumed_from) == (
            3,
            123,
            1,
            40,
            2,
        )


def test_a_database_of_the_previous_schema_gains_code_columns_and_previous_results(url):
    """A database written at 0005 (before code fingerprints) upgrades in place: its done trial has no recorded
    code (so it is never called stale), and it can be archived and trained again like any other."""
    engine = make_engine(url)
    upgrade(engine, "0005")
    t = trial(1)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sweeps (name, created_at, updated_at) VALUES ('s', '2025-01-01', '2025-01-01')"))
        conn.execute(text("INSERT INTO trials (key, config, state, attempts, created_at, result) "
                          "VALUES (:k, :c, 'done', 1, '2025-01-01', :r)"),
                     {"k": t.key, "c": '{"seed": 1}', "r": '{"test": {"top1": 0.5}}'})  # fmt: skip
        conn.execute(
            text(f"INSERT INTO sweep_trials (sweep, trial_key, axes, position) VALUES ('s', '{t.key}', '{{}}', 0)")
        )
        conn.execute(text(f"INSERT INTO metrics (trial_key, name, step, value) VALUES ('{t.key}', 'loss', 1, 1.5)"))
    engine.dispose()
    with Store(url) as s:
        assert s.done_keys() == {t.key} and s.codes() == {}
        assert s.archive([t.key], "all") == 1
        assert s.states() == {t.key: "pending"} and s.metrics_frame().empty
        (old,) = s.previous(t.key)
        assert (old["reason"], old["state"], old["result"], old["metrics"]) == ("all", "done", {"test": {"top1": 0.5}},
                                                                               [["loss", 1, 1.5]])  # fmt: skip
        s.finish(t.key, "done", code={"components": {"loop": "x"}, "versions": {}, "digest": "abc"})
        assert s.codes() == {t.key: {"components": {"loop": "x"}, "versions": {}, "digest": "abc"}}
        assert s.trial(t.key).code_digest == "abc"
        assert s.forget([t.key]) == 1 and s.states() == {} and s.previous(t.key) == []


def test_a_store_of_0007_gains_the_index_of_finish_times_and_its_trials_are_found_by_it(url):
    """Migration 0008 on a store with finished trials: the index is built over the rows already there, and the
    look for the trials finished since a moment finds them."""
    engine = make_engine(url)
    upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO trials (key, config, state, attempts, created_at, finished_at) VALUES "
                          "('a', '{}', 'done', 1, '2025-01-01', '2025-01-03'), "
                          "('b', '{}', 'failed', 1, '2025-01-01', '2025-01-01'), "
                          "('c', '{}', 'pending', 0, '2025-01-01', NULL)"))  # fmt: skip
    engine.dispose()
    with Store(url) as s:
        with s.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert s.finished_since(datetime(2025, 1, 2, tzinfo=timezone.utc)) == {"a": "done"}
        assert s.finished_since(datetime(2024, 12, 31, tzinfo=timezone.utc)) == {"a": "done", "b": "failed"}


def test_postgresql_upserts_render_on_conflict():
    sql = str(upsert_stmt("postgresql", METRICS, ["trial_key", "name", "step"], ["value"]).compile(
        dialect=postgresql.dialect()))  # fmt: skip
    assert "ON CONFLICT (trial_key, name, step) DO UPDATE SET value = excluded.value" in sql
    sql = str(upsert_stmt("postgresql", METRICS, ["trial_key", "name", "step"]).compile(dialect=postgresql.dialect()))
    assert "ON CONFLICT (trial_key, name, step) DO NOTHING" in sql
    with pytest.raises(NotImplementedError, match="mysql"):
        upsert_stmt("mysql", METRICS, ["trial_key"])


# ---------------------------------------------------------------------------------------------- writes
def test_metric_writes_are_idempotent_upserts(store):
    t = trial(0)
    store.add_trials("s", [t])
    for _ in range(2):
        for epoch in range(3):
            store.log_metrics(t.key, epoch, {"train.loss": 1.0 / (epoch + 1), "val.top1": 0.1 * epoch}, wall_time=epoch)
    assert count(store, "metrics") == 6
    store.log_metrics(t.key, 2, {"val.top1": 0.9})  # a retried epoch overwrites
    store.log_metric_rows([(t.key, "val.top1", 2, 0.95, 10.0), (t.key, "val.top1", 3, math.nan, 11.0)])
    df = store.metrics_frame(names="val.top1", wall_time=True)
    assert df["step"].tolist() == [0, 1, 2, 3]
    assert df["value"].iloc[2] == 0.95 and math.isnan(df["value"].iloc[3])
    assert df["wall_time"].tolist() == [0.0, 1.0, 10.0, 11.0]


def test_metrics_of_an_unknown_trial_are_refused(store):
    with pytest.raises(IntegrityError):  # the foreign key, on every backend
        store.log_metrics("nope", 0, {"loss": 1.0})


def test_add_trials_keeps_state_and_records_membership_per_sweep(store):
    shared, only_a, only_b = trial(0), trial(1), trial(2)
    store.upsert_sweep("a", spec_path="experiments.yaml", spec={"grid": {"seed": [0, 1]}}, metric="test.top1")
    store.add_trials("a", [shared, only_a])
    store.mark_running(shared.key, host="h1", node_id="n1", device="cpu")
    store.finish(shared.key, "done", result={"test": {"top1": 0.5}})
    store.add_trials("a", [shared, only_a])  # relaunch: nothing changes
    store.add_trials("b", [only_b, Trial(shared.key, shared.variant, shared.config, {"lr": 0.1})])

    assert store.states() == {shared.key: "done", only_a.key: "pending", only_b.key: "pending"}
    assert store.done_keys([only_b.key, shared.key, "unknown"]) == {shared.key}
    assert store.member_keys(["b"]) == sorted([only_b.key, shared.key])
    assert store.member_keys(["a", "b"]) == sorted([shared.key, only_a.key, only_b.key])
    assert count(store, "trials") == 3 and count(store, "sweep_trials") == 4
    assert store.membership("b", shared.key).axes == {"lr": 0.1}
    assert store.membership("b", shared.key).position == 1
    assert store.trial(shared.key).axes == shared.axes  # the trial keeps its first sweep's axes
    store.add_trials("b", [Trial(shared.key, "regrouped", shared.config, shared.axes)])
    assert store.trial(shared.key).variant == "regrouped"  # a variant is derived: the newest plan's wins
    assert store.states([shared.key]) == {shared.key: "done"}
    status = store.status()
    assert status.loc["a", "done"] == 1 and status.loc["a", "pending"] == 1 and status.loc["b", "total"] == 2
    assert list(status.columns) == [*STATES, "total"]
    assert store.sweep("a").metric == "test.top1" and store.sweep("b").spec is None


def test_upsert_sweep_updates_only_given_fields(store):
    store.upsert_sweep("s", spec_path="a.yaml", metric="test.top1", baseline={"attention.kind": "softmax"})
    created = store.sweep("s").created_at
    store.upsert_sweep("s", description="now with a description")
    assert store.keep_sweep_mlflow("s", "7", "run123", None) == "run123"
    assert store.keep_sweep_mlflow("s", "8", "run456", None) == "run123"  # another launcher's run came first
    s = store.sweep("s")
    assert (s.spec_path, s.metric, s.baseline, s.description) == (
        "a.yaml", "test.top1", {"attention.kind": "softmax"}, "now with a description")  # fmt: skip
    assert (s.mlflow_experiment_id, s.mlflow_run_id, s.created_at) == ("7", "run123", created)
    assert s.updated_at > created


def test_trial_lifecycle(store):
    t1, t2, t3 = trial(0), trial(1), trial(2)
    store.add_trials("s", [t1, t2, t3])
    store.mark_running(t1.key, host="h", device="cpu")
    store.mark_running(t1.key, host="h", device="cpu")
    store.mark_running(t2.key, attempt=3)
    store.mark_running(t2.key, attempt=3)
    assert (store.trial(t1.key).attempts, store.trial(t2.key).attempts) == (2, 3)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n'
    store.finish(t1.key, "failed", traceback=tb, params=1000, flops=2 * 10**12, environment={"git_sha": "abc"})
    rec = store.trial(t1.key)
    assert (rec.state, rec.error, rec.traceback) == ("failed", "ValueError: boom", tb)
    assert (rec.params, rec.flops, rec.environment) == (1000, 2 * 10**12, {"git_sha": "abc"})
    store.finish(t3.key, "failed", error="first line\nsecond")
    assert store.trial(t3.key).error == "first line"
    assert store.interrupt() == 1 and store.states([t2.key]) == {t2.key: "interrupted"}
    store.mark_running(t1.key)  # a retry clears the old outcome
    assert (store.trial(t1.key).error, store.trial(t1.key).finished_at) == (None, None)
    with pytest.raises(KeyError, match="no trial"):
        store.mark_running("missing")
    with pytest.raises(ValueError, match="finish state"):
        store.finish(t1.key, "running")
    with pytest.raises(TypeError, match="unknown trial fields"):
        store.finish(t1.key, "done", colour="red")


# ----------------------------------------------------------------------------------------- concurrency
def _hammer(url: str, keys: list[str], worker: int, rounds: int) -> int:
    """One writer of a concurrent test: interleaved state changes and metric batches."""
    with Store(url) as s:
        for r in range(rounds):
            for key in keys:
                s.mark_running(key, host=f"w{worker}", attempt=r + 1)
                s.log_metrics(key, r, {f"w{worker}.loss": float(r), f"w{worker}.acc": 0.5})
                s.finish(key, "done", params=r)
        return rounds * len(keys) * 2


@pytest.fixture(scope="module")
def pool():
    """Three spawned writer processes, shared by the concurrency tests (spawning costs seconds)."""
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as executor:
        yield executor


def _open(url: str, at: float) -> list[str]:
    time.sleep(max(0.0, at - time.time()))
    with Store(url) as s, s.engine.connect() as conn:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()


def test_processes_opening_a_fresh_database_at_once_migrate_it_once(url, pool, tmp_path):
    """Three processes open one new database at the same moment and each finds it at the newest schema. SQLite:
    twelve new files in turn, as the race there (two connections switching a new file to WAL mode, which SQLite
    refuses at once rather than waiting) was lost about one time in four."""
    fresh = [f"sqlite:///{tmp_path / f'fresh{i}.sqlite'}" for i in range(12)] if url.startswith("sqlite") else [url]
    for i, new in enumerate(fresh):
        at = time.time() + (2 if i == 0 else 0.5)  # the first round waits for the spawned workers' imports
        assert list(pool.map(_open, [new] * 3, [at] * 3, timeout=120)) == [[revision_number()]] * 3


def test_a_postgresql_migration_waits_for_the_migrator_holding_the_lock(postgres):
    """The test holds the migration lock as another migrator would: a Store opening the fresh database waits on
    it (PostgreSQL shows the wait) and creates nothing until the lock is released, then migrates."""
    from gate import wait_for

    from ablate.store.engine import MIGRATION_LOCK

    url = fresh_database(postgres)
    holder = make_engine(url)
    opened: list[Store] = []
    with holder.connect() as conn:
        conn.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK})")
        thread = threading.Thread(target=lambda: opened.append(Store(url)))
        thread.start()
        waiting = (
            f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {MIGRATION_LOCK} AND NOT granted"
        )
        wait_for(lambda: conn.exec_driver_sql(waiting).scalar_one() == 1, timeout=60)
        assert conn.exec_driver_sql("SELECT to_regclass('alembic_version')").scalar_one() is None
        conn.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})")
        thread.join(timeout=60)
    holder.dispose()
    with opened[0] as s, s.engine.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [revision_number()]


def test_concurrent_writers_never_see_database_is_locked(tmp_path, pool):
    """Three processes and two threads write one file at once (the design has one writer; this is the
    guard: WAL, BEGIN IMMEDIATE and the busy timeout). Without the busy timeout most writers fail."""
    url = f"sqlite:///{tmp_path / 'busy.sqlite'}"
    trials = [trial(i) for i in range(4)]
    keys = [t.key for t in trials]
    with Store(url) as s:
        s.add_trials("s", trials)
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            _hammer(url, keys, worker, 15)
        except BaseException as exc:
            errors.append(exc)

    procs = [pool.submit(_hammer, url, keys, w, 15) for w in range(3)]
    threads = [threading.Thread(target=run, args=(w,)) for w in (3, 4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    written = sum(p.result(timeout=120) for p in procs)
    assert errors == []
    with sqlite3.connect(tmp_path / "busy.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM metrics").fetchone()[0] == written + 2 * 15 * 4 * 2


# ---------------------------------------------------------------------------------------------- leases
def test_a_lease_is_exclusive_until_it_lapses_and_then_anyone_may_take_it(store):
    trials = [trial(i) for i in range(5)]
    keys = [t.key for t in trials]
    store.add_trials("s", trials)
    a, b = Owner("a" * 32, "alice@h1:1", 60), Owner("b" * 32, "bob@h2:2", 60)
    assert store.claim(keys, a, limit=2) == set(keys[:2])  # the first two, in the order given
    assert store.claim(keys, b) == set(keys[2:])  # what a holds is not b's to take
    assert store.claim(keys, a) == set(keys[:2]) and store.renew(b) == set(keys[2:])
    assert store.holders(keys) == {**dict.fromkeys(keys[:2], "alice@h1:1"), **dict.fromkeys(keys[2:], "bob@h2:2")}
    store.finish(keys[4], "done")
    store.release(b, [keys[4]])
    assert store.claim(keys, a) == set(keys[:2])  # a done trial is never claimed again
    store.renew(Owner(a.id, a.host, -1))  # a's heartbeat stopped a second ago: its leases lapsed
    assert store.claim(keys, b) == set(keys[:4]) and store.renew(a) == set()  # b took them over; a knows
    store.release(b)
    assert store.holders() == {} and store.claim(keys, a) == set(keys[:4])


def test_a_done_trial_holds_no_lease_even_when_its_launcher_never_released_it(store):
    """Found by the chaos soak (bench/soak.py, seed 7): a launcher SIGKILLed after recording a trial done, before it
    released its leases, left the done trial leased for good (`ablate status` named a dead holder). Recording a
    trial done frees its lease; a failed one keeps it, for its launcher's retries."""
    trials = [trial(i) for i in range(2)]
    keys = [t.key for t in trials]
    store.add_trials("s", trials)
    a = Owner("a" * 32, "alice@h1:1", 60)
    assert store.claim(keys, a) == set(keys)
    store.finish(keys[0], "done", result={"test": {"top1": 0.5}})
    store.finish(keys[1], "failed", error="boom")
    assert store.holders(keys) == {keys[1]: "alice@h1:1"} and store.renew(a) == {keys[1]}


def test_a_claim_reads_the_queue_only_as_far_as_its_limit_needs_and_past_what_others_hold(store):
    """The queue is read in chunks, in its order, stopping once `limit` trials are won (a launcher claims a slot's
    worth at a time from a queue of thousands): trials another launcher holds are passed over, across chunks."""
    trials = [trial(i) for i in range(2 * CHUNK + 10)]
    keys = [t.key for t in trials]
    store.add_trials("s", trials)
    a, b = Owner("a" * 32, "alice@h1:1", 60), Owner("b" * 32, "bob@h2:2", 60)
    assert store.claim(keys, b, limit=CHUNK + 3) == set(keys[: CHUNK + 3])
    assert store.claim(keys, a, limit=2) == set(keys[CHUNK + 3 : CHUNK + 5])  # the first free ones, past a chunk
    assert store.claim(keys, a) == set(keys[CHUNK + 3 :])  # no limit: the rest of the queue


def test_a_claim_of_a_few_trials_from_a_long_queue_binds_a_few_keys_not_a_chunk(store):
    """A launcher claims a wave's few trials at a time from a queue of thousands (bench/launch_scale.py, 10,000
    trials on PostgreSQL): its reads bind about twice the limit's keys, not a chunk of the queue (CHUNK keys per
    wave made a claim grow with the sweep up to CHUNK), and still pass over trials another launcher holds."""
    trials = [trial(i) for i in range(CHUNK + 10)]
    keys = [t.key for t in trials]
    store.add_trials("s", trials)
    a, b = Owner("a" * 32, "alice@h1:1", 60), Owner("b" * 32, "bob@h2:2", 60)
    bound: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if statement.lstrip().startswith("SELECT"):
            bound.append(len(params))

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        assert store.claim(keys, a, limit=3) == set(keys[:3])
        assert bound and max(bound) <= 2 * 3 + 3, bound  # the keys, and the claimable test's state, owner and time
        bound.clear()
        assert store.claim(keys, b, limit=3) == set(keys[3:6])  # past a's: the next chunk, twice as long
        assert max(bound) <= 4 * 3 + 3, bound
    finally:
        event.remove(store.engine, "before_cursor_execute", count)


def test_a_claim_refuses_a_trial_that_failed_or_diverged_since_the_launch_chose_it(store):
    """A launch chose five trials: two pending, one failed and one diverged to train again (`retry`), one failed
    that it did not choose to retry. Then, before its claim, another launcher fails a pending one and fails the
    diverged one again: the claim takes only the untouched pending trial and the retry that ended before the
    choice. Without `chosen_at` a claim takes any trial that is not done, as before."""
    trials = [trial(i) for i in range(5)]
    pending, failed_since, retried, retried_again, failed = keys = [t.key for t in trials]
    store.add_trials("s", trials)
    store.finish(retried, "failed", error="boom")
    store.finish(retried_again, "diverged")
    store.finish(failed, "failed", error="boom")
    chosen_at = now()
    store.mark_running(failed_since)
    store.finish(failed_since, "failed", error="elsewhere")
    store.mark_running(retried_again)
    store.finish(retried_again, "failed", error="elsewhere")
    a, b = Owner("a" * 32, "alice@h1:1", 60), Owner("b" * 32, "bob@h2:2", 60)
    assert store.claim(keys, a, chosen_at=chosen_at, retry={retried, retried_again}) == {pending, retried}
    assert store.claim(keys, b) == {failed_since, retried_again, failed}


def test_finished_since_is_the_trials_that_ended_from_a_moment_on(store):
    """What a launcher asks after each trial it settles: the trials done, failed or diverged at or after a moment
    (the recording launcher's clock), whatever their sweep; interrupted and preempted ones are to resume, and a
    trial archived to train again is pending."""
    trials = [trial(i) for i in range(6)]
    keys = [t.key for t in trials]
    store.add_trials("s", trials[:4])
    store.add_trials("other", trials[4:])
    store.finish(keys[0], "done")
    moment = now()
    store.finish(keys[1], "failed", error="boom")
    store.finish(keys[2], "diverged")
    store.mark_running(keys[3])
    store.interrupt([keys[3]])
    store.finish(keys[4], "done")
    store.finish(keys[5], "preempted")
    assert store.finished_since(moment) == {keys[1]: "failed", keys[2]: "diverged", keys[4]: "done"}
    at = store.trial(keys[1]).finished_at  # naive UTC from SQLite, aware from PostgreSQL
    assert keys[1] in store.finished_since(at) and keys[1] not in store.finished_since(at + timedelta(microseconds=1))
    assert store.finished_since(moment.astimezone(timezone(timedelta(hours=5)))) == store.finished_since(moment)
    store.archive([keys[2]], "all")
    assert store.finished_since(moment) == {keys[1]: "failed", keys[4]: "done"}


def test_finished_since_reads_the_index_of_finish_times_not_the_rows_of_ended_trials(tmp_path):
    """SQLite plans without statistics: the look must range over the finish times (the states are in the index's
    entries) rather than take the index of states and read the row of every trial that ever ended."""
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as s:
        sent: list[tuple[str, Any]] = []
        event.listen(s.engine, "before_cursor_execute", lambda _c, _k, sql, params, *_: sent.append((sql, params)))
        s.finished_since(now())
        with s.engine.connect() as conn:
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sent[-1][0]}", sent[-1][1]).all()
    (step,) = [row[-1] for row in plan]
    assert step == "SEARCH trials USING COVERING INDEX ix_trials_finished_at_state_key (finished_at>?)"


def _claim_all(url: str, keys: list[str], at: float) -> list[str]:
    """One launcher of the race: claim one trial at a time, as the launcher does, until none is left."""
    time.sleep(max(0.0, at - time.time()))
    owner, won = Owner.new(60), []
    with Store(url) as s:
        while got := s.claim([k for k in keys if k not in won], owner, limit=1):
            won += sorted(got)
    return won


def test_launchers_claiming_at_once_each_win_different_trials(url, pool):
    trials = [trial(i) for i in range(30)]
    with Store(url) as s:
        s.add_trials("s", trials)
    keys, at = [t.key for t in trials], time.time() + 2
    won = list(pool.map(_claim_all, [url] * 3, [keys] * 3, [at] * 3, timeout=120))
    assert sorted(k for w in won for k in w) == sorted(keys)  # every trial claimed, none twice


# ---------------------------------------------------------------------------------------------- frames
@pytest.fixture
def filled(store):
    trials = [trial(s, kind) for kind in ("softmax", "csan") for s in (0, 1)]
    store.upsert_sweep("s", metric="test.top1")
    store.add_trials("s", trials)
    for i, t in enumerate(trials):
        store.mark_running(t.key, host="h", device="cpu")
        store.log_metric_rows([(t.key, n, e, e * i, None) for e in range(5) for n in ("train.loss", "val.top1")])
        result = {"test": {"top1": 0.1 * i, "loss": math.inf if i == 3 else 1.0}, "throughput": 100}
        store.finish(t.key, "done", result=result, params=10)
    store.add_trials("other", trials[:1])
    return store, trials


def test_trials_frame_one_row_per_trial_and_sweep(filled):
    store, trials = filled
    df = store.trials_frame()
    assert list(df.columns[: len(TRIAL_COLUMNS)]) == TRIAL_COLUMNS
    assert {"axis.attention.kind", "axis.seed", "test.top1", "test.loss", "throughput"} <= set(df.columns)
    assert len(df) == 5 and df["sweep"].value_counts().to_dict() == {"s": 4, "other": 1}
    s = store.trials_frame("s")
    assert s["key"].tolist() == [t.key for t in trials] and s["position"].tolist() == [0, 1, 2, 3]
    assert s["axis.attention.kind"].tolist() == ["softmax", "softmax", "csan", "csan"]
    assert s["test.top1"].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert s["test.loss"].isna().tolist() == [False, False, False, True]  # inf: JSON has no such number
    assert s["seed"].tolist() == [0, 1, 0, 1] and str(s["params"].dtype) == "Int64"
    assert (s["duration_s"] >= 0).all() and str(s["finished_at"].dt.tz) == "UTC"
    wide = store.trials_frame("s", expand=["config", "environment"])
    assert (wide["config.train.epochs"] == 2).all() and wide["config.model.depths"].iloc[0] == "[12]"
    empty = store.trials_frame("nothing")
    assert empty.empty and list(empty.columns) == TRIAL_COLUMNS


def test_trials_frame_of_some_states_is_those_rows_of_the_whole_frame(filled):
    """`status` reads only the states it shows (`states`, filtered in SQL): the same rows, columns and order."""
    store, trials = filled
    store.finish(trials[1].key, "failed", error="RuntimeError: boom")
    store.mark_running(trials[2].key)
    whole = store.trials_frame("s")
    some = store.trials_frame("s", states=("running", "failed"))
    assert some["key"].tolist() == [trials[1].key, trials[2].key]
    cols = ["sweep", "key", "state", "error", "host", "started_at", "lease_host", "lease_expires"]
    expected = whole[whole["state"].isin(["running", "failed"])][cols].reset_index(drop=True)
    assert some[cols].equals(expected)
    assert store.trials_frame("s", states=()).empty


def test_progress_reads_each_trials_epochs_and_cooldown_from_its_config(store):
    """Epochs left are the config's train.epochs plus train.cooldown_epochs (read in SQL) less those recorded."""
    cfg = TrialConfig.model_validate({"attention": {"kind": "softmax"}, "train": {"epochs": 3, "cooldown_epochs": 2}})
    cooled = Trial(trial_key(cfg), variant_key(cfg), cfg, {"seed": 0})
    plain = trial(1)  # 2 epochs, no cooldown
    store.add_trials("s", [cooled, plain])
    store.log_metric_rows([(cooled.key, "val.top1", 1, 0.5, 100.0), (cooled.key, "val.top1", 2, 0.6, 110.0)])
    pace = store.progress("s")["s"]
    assert (pace.epochs_left, pace.epoch_s) == (3 + 2 + 2 - 2, 10.0)


def test_metrics_frame_filters_and_dtypes(filled):
    store, trials = filled
    df = store.metrics_frame()
    assert list(df.columns) == ["key", "name", "step", "value"] and len(df) == 4 * 5 * 2
    assert (str(df["key"].dtype), str(df["name"].dtype), str(df["step"].dtype)) == ("category", "category", "int64")
    assert len(store.metrics_frame("other")) == 10
    assert len(store.metrics_frame(["s", "other"], names=["val.top1"])) == 20
    one = store.metrics_frame(keys=[trials[3].key], names="val.top1")
    assert one["value"].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert store.metrics_frame("nothing").empty


def test_runs_filters_by_value_or_text(filled):
    store, trials = filled
    assert len(store.runs({"axis.attention.kind": "csan"}, sweeps="s")) == 2
    assert store.runs({"axis.seed": "1", "sweep": "s"})["key"].tolist() == [trials[1].key, trials[3].key]
    assert len(store.runs({"state": ["done", "failed"]})) == 5
    assert len(store.runs({"axis.attention.kind": "CSAN", "sweep": "s"})) == 2
    with pytest.raises(KeyError, match="no column 'colour'"):
        store.runs({"colour": "red"})


def epochs_trial(seed: int, epochs: int) -> Trial:
    cfg = TrialConfig.model_validate({"attention": {"kind": "softmax"}, "seed": seed, "train": {"epochs": epochs}})
    return Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": "softmax", "seed": seed})


def test_a_launch_of_another_plan_marks_the_sweeps_earlier_trials_outside_it(store):
    """Launched again under `-s train.epochs=5`, the sweep keeps its epochs-4 trials (the store never forgets by
    itself) but they are outside its plan: the planned frame holds the new plan's trials, `outside_plan` names
    the others; a seed a later round may add and that was added before stays planned; a caller that adds
    without a plan changes no flag."""
    four, five = [epochs_trial(s, 4) for s in range(3)], [epochs_trial(s, 5) for s in range(3)]
    store.add_trials("s", four, plan=[t.key for t in four])
    assert store.outside_plan("s") == [] and len(store.trials_frame("s", planned=True)) == 3
    store.add_trials("s", five[:2], plan=[t.key for t in five])  # seed 2: the reserve of a later round
    assert store.outside_plan("s") == sorted(t.key for t in four)
    assert store.trials_frame("s", planned=True)["key"].tolist() == [t.key for t in five[:2]]
    assert len(store.trials_frame("s")) == 5
    store.add_trials("s", five)  # a later round adds seed 2
    store.add_trials("s", five[:2], plan=[t.key for t in five])  # the next launch starts from the first look
    assert sorted(store.trials_frame("s", planned=True)["key"]) == sorted(t.key for t in five)
    store.add_trials("s", four[:1])
    assert store.outside_plan("s") == sorted(t.key for t in four[1:])


def test_where_reaches_config_paths_no_axis_varies(store):
    """`--where train.epochs=4` where no axis varies the epochs: the trials' configs are read for it, `==` is
    `=`, and a path neither a column nor in any config names what there is."""
    store.add_trials("s", [epochs_trial(s, e) for e in (4, 5) for s in range(2)])
    four = [epochs_trial(s, 4).key for s in range(2)]
    for written in ("train.epochs=4", "train.epochs==4", "train.epochs<5"):
        assert store.page(sweeps="s", where=[Condition.parse(written)]).rows["key"] == four
    with pytest.raises(KeyError, match=r"no column or config path 'train\.epoch'"):
        store.page(sweeps="s", where=[Condition.parse("train.epoch=4")])


def test_sweeps_frame_and_flatten(filled):
    store, _ = filled
    df = store.sweeps_frame()
    assert df.set_index("name")["trials"].to_dict() == {"other": 1, "s": 4}
    assert flatten({"a": {"b": 1, "c": {"d": [2]}}, "e": {}}, "x") == {"x.a.b": 1, "x.a.c.d": [2], "x.e": {}}


def test_a_trials_mlflow_run_is_kept_by_the_first_launcher_to_write_it(store):
    """Two launchers mirroring one trial at once both create its run; the store keeps the first written and
    tells the second, which reads it back (one MLflow run per trial); a run kept already is replaced only by
    whoever read it."""
    t = trial(0)
    store.upsert_sweep("s", spec_path="e.yaml", spec={}, metric="test.top1")
    store.add_trials("s", [t])
    assert store.keep_mlflow_run(t.key, "run-a", None) == "run-a"
    assert store.keep_mlflow_run(t.key, "run-b", None) == "run-a"  # the second read no run, wrote too late
    assert store.keep_mlflow_run(t.key, "run-c", "run-a") == "run-c"  # the first run was gone: replaced
    assert store.trial(t.key).mlflow_run_id == "run-c"
    with pytest.raises(KeyError):
        store.keep_mlflow_run("no-such-key", "run-d", None)


def test_code_digests_count_each_done_trial_of_the_sweeps_once(store):
    """Per recorded code digest, the done trials of the named sweeps (a trial in two of them once) and one of
    them to read that code from; trials of other sweeps, and unfinished ones, are not counted."""
    a, b, c, d = (trial(s) for s in range(4))
    store.add_trials("one", [a, b, c])
    store.add_trials("two", [a, d])
    for t, digest in ((a, "old"), (b, "old"), (c, "new"), (d, "new")):
        store.mark_running(t.key)
        store.finish(t.key, "done", code={"digest": digest})
    store.add_trials("one", [trial(9)])  # pending: no code yet
    digests = store.code_digests(["one", "two"])
    assert {k: v.trials for k, v in digests.items()} == {"new": 2, "old": 2}
    assert digests["old"].sample == min(a.key, b.key)
    assert {k: v.trials for k, v in store.code_digests("two").items()} == {"new": 1, "old": 1}
    assert {k: v.trials for k, v in store.code_digests().items()} == {"new": 2, "old": 2}


def test_provenance_groups_the_trials_by_their_recorded_code_and_environment(store):
    """The trials asked for, grouped by code digest, git state, device, CPU and versions (read from the JSON records
    in SQL, on SQLite and PostgreSQL alike), the most trials first; a trial recorded without them is a group of
    Nones."""
    ts = [trial(s) for s in range(6)]
    store.add_trials("one", ts)
    env = {"python": "3.12.7", "packages": {"torch": "2.5.1", "ablate": "0.9"}, "device": "cuda:NVIDIA H200",
           "arithmetic": {"device": "NVIDIA H200", "cpu": "Xeon"}}  # fmt: skip
    for i, t in enumerate(ts):
        store.mark_running(t.key)
        recorded = {"code": {"digest": "abc", "git": {"sha": "f00", "dirty": i == 0}}, "environment": env}
        store.finish(t.key, "done", **(recorded if i < 4 else {}))
    got = store.provenance([t.key for t in ts[:5]])
    known = ("abc", "f00", False, "NVIDIA H200", "Xeon", "cuda:NVIDIA H200", "3.12.7", "2.5.1", "0.9")
    assert got == [Provenance(*known, trials=3), Provenance("abc", "f00", True, *known[3:], trials=1),
                   Provenance(*(None,) * 9, trials=1)]  # fmt: skip


def test_keys_are_one_parameter_of_one_statement_however_many(store):
    """A read or write of the trials of given keys is one statement, its keys bound as one parameter: 40,000 keys
    are past SQLite's limit of bound parameters (32,766), and an IN list rendered per key was most of a
    10,000-trial report's metrics read on PostgreSQL (0.22 s of 0.23 s; bench/launch_scale.py)."""
    ts = [trial(s) for s in range(3)]
    store.add_trials("one", ts)
    store.log_metrics(ts[0].key, 1, {"val.top1": 0.5})
    store.finish(ts[1].key, "failed", error="boom")
    keys = [t.key for t in ts] + [f"absent{i}" for i in range(40_000)]
    bound: list[int] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: bound.append(len(a[3])))
    assert store.states(keys) == {ts[0].key: "pending", ts[1].key: "failed", ts[2].key: "pending"}
    assert store.metrics_frame(keys=keys)["value"].tolist() == [0.5]
    assert [p.trials for p in store.provenance(keys)] == [3]
    assert store.forget(keys[1:]) == 2 and store.states(keys) == {ts[0].key: "pending"}
    assert max(bound) < 20, bound  # the keys, and the provenance's JSON paths (16)


def test_a_batch_is_one_transaction_of_this_threads_writes(tmp_path: Path) -> None:
    """Writes inside `Store.batch` commit together at its end, or none if it raises; another thread's writes
    meanwhile are their own (the heartbeat's renewals do not wait for, or join, the launch loop's batch)."""
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", [trial(0), trial(1)])
        a, b = (t.key for t in (trial(0), trial(1)))
        with pytest.raises(RuntimeError), store.batch():
            store.mark_running(a)
            store.finish(b, "failed", error="boom")
            raise RuntimeError("the launcher fails mid-wave")
        assert store.states() == {a: "pending", b: "pending"}
        with store.batch():
            store.mark_running(a)
            with store.batch():  # inside a batch: the outer one
                store.finish(b, "done", result={"test": {"top1": 1.0}})
            assert store.states() == {a: "pending", b: "pending"}  # read apart: not committed before the end
        assert store.states() == {a: "running", b: "done"}
