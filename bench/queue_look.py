"""One look at the queued trials another launcher finished, as the launch loop takes it after each finished trial
(issue 29 item 3): the state of every queued trial (`Store.states(queue)`, what the loop read until migration
0008) against the trials finished since its last look (`Store.finished_since`, a lease back), on a SQLite file
and on a throwaway PostgreSQL server (initdb + pg_ctl in a temporary folder, as bench/launchers_pg.py starts it).

    .venv/bin/python bench/queue_look.py [--trials 10000] [--recent 600] [--repeats 20]

The store holds --trials trials with configs of about 400 bytes; --recent of them finished within the last
minute (what finishes store-wide within a launcher's lease), a third of all of them an hour ago, the rest
queued. Printed per backend: the median of --repeats of each read, their ratio and the rows each returned.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, update
from sweep_scale import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the server the tests start
from conftest import free_port, fresh_database, postgres_binary
from procs import Postgres

from ablate.store import Store
from ablate.store.database import now
from ablate.store.queries import TRIALS

LEASE = 60.0
"""The launcher's default lease (`RunConfig.lease`): how far before its last look it looks."""


def median(read: Callable[[], Any], repeats: int) -> float:
    """Median seconds of `read` over `repeats` calls, after one to warm the connection and caches."""
    read()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        read()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(url: str, trials: int, recent: int, repeats: int) -> str:
    """Fill a fresh store at `url` and time both reads; one line of figures."""
    with Store(url) as store:
        keys = [f"{i:064x}" for i in range(trials)]
        store.add_trials("s", [{"key": k, "config": {"seed": i, "pad": "x" * 400}, "axes": {"seed": i},
                                "variant": "v"} for i, k in enumerate(keys)])  # fmt: skip
        t, old = now(), recent + trials // 3
        done = update(TRIALS).where(TRIALS.c.key == bindparam("k")).values(state="done", finished_at=bindparam("at"))
        with store.engine.begin() as conn:
            conn.execute(done, [{"k": k, "at": t - timedelta(seconds=i * LEASE / recent)}
                                for i, k in enumerate(keys[:recent])])  # fmt: skip
            conn.execute(done, [{"k": k, "at": t - timedelta(hours=1)} for k in keys[recent:old]])
            if store.engine.dialect.name == "postgresql":
                conn.exec_driver_sql("ANALYZE trials")
        queue, since = keys[old:], t - timedelta(seconds=LEASE)
        whole = median(lambda: store.states(queue), repeats)
        look = median(lambda: store.finished_since(since), repeats)
        rows = len(store.finished_since(since))
    return (f"  {store.engine.dialect.name}: {trials} trials, {len(queue)} queued: states(queue) {whole * 1e3:.1f} ms "
            f"({len(queue)} rows), finished_since(a lease back) {look * 1e3:.1f} ms ({rows} rows), ratio "
            f"{whole / look:.0f}; {load()}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--recent", type=int, default=600, help="trials finished within the last lease")
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    print(f"queue_look: {a.trials} trials, {a.recent} finished in the last {LEASE:g} s; {load()}", flush=True)
    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="ablate-ql-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        print(measure(f"sqlite:///{work / 'r.sqlite'}", a.trials, a.recent, a.repeats), flush=True)
        initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
        if not (initdb and pg_ctl):
            print("  postgresql: skipped, needs initdb and pg_ctl (Debian: apt-get install postgresql)")
            return
        root = Path(tempfile.mkdtemp(prefix="ablate-ql-server-"))  # its own: the server's user must reach it
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        pg = Postgres.create(root, initdb, pg_ctl, free_port())
        stack.callback(pg.stop, "immediate")
        print(measure(fresh_database(pg.url), a.trials, a.recent, a.repeats), flush=True)


if __name__ == "__main__":
    main()
