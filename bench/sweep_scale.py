"""A sweep of 100,000 trials (issue 29 item 3): the first launch's store work, `ablate status`, `ablate runs`
and the report, each beside a floor measured in the same run.

    .venv/bin/python bench/sweep_scale.py [--db PATH] [--seeds 250] [--epochs 10] [--repeats 3] [--skip-report]

--db defaults to ablate-sweep-scale.sqlite in the system's temporary folder.

The store is bench/report_scale.py's sweep (400 variants x --seeds; 250: 100,000 trials, 1% failed / 1% diverged
/ 1% pending, 8 metrics per epoch) written once through the Store API into --db (an existing --db is reused:
building it is not measured). Its done trials then carry a code record as a launch leaves them: today's
fingerprint, and for about 1% of them one with another training loop (stale), rewritten whenever today's code
differs from the one recorded. Then, each side timed as wall clock around the whole call, the order alternated
between repeats (ABAB, BABA, ...), medians of --repeats:

  launch     what `ablate launch` does with the store before and around Ray's start, into a fresh store per
             repeat: `selection.select` (fingerprints, states), `upsert_sweep` + `add_trials` of the 100,000
             planned trials, `holders`; floor: the same trial and membership rows inserted with the driver's
             `executemany` alone (the rows serialised beforehand), the least any store write of them costs
  relaunch   `add_trials` of the same plan into the built store, where every key is there already (upserts)
  status     `ablate status --db` (all sweeps, and `big`) and `ablate runs --db` as a person runs them: the
  runs       first page (all sweeps, `big`, `--state failed`), and `--format csv` of every trial; fresh
             processes; floor: `ablate --help` (interpreter, imports, typer), the start-up every command pays;
             beside them `ablate status` of a one-trial store: what any command reading a store pays (pandas,
             SQLAlchemy, the schema check), whatever its size; each also as the CPU seconds the process used
             (user + system), which a loaded machine inflates far less than wall clock
  report     `ablate.report` of the sweep in process (all formats); floor: `Store.trials_frame` of it
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from report_scale import BASE, BASELINE, GRID, generate, report_sides
from timing import alternate, medians

from ablate.execution.selection import Select, select
from ablate.planning.plan import Plan, plan
from ablate.provenance.fingerprint import Fingerprint, fingerprint, record
from ablate.store import Store

ABLATE = str(Path(sys.executable).parent / "ablate")
TARGETS = {"status": 1.0, "runs": 1.0, "report": 10.0}
"""Seconds beyond the start-up floor (`ablate --help`) each view may take at 100,000 trials (issue 29 item 3)."""


def load() -> str:
    """The machine's load averages, said beside every figure (the cores are shared)."""
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def planned(seeds: int, epochs: int, folder: Path) -> Plan:
    """The built store's plan (the same spec as `report_scale.generate`), planned in a fresh file."""
    f = folder / "big.yaml"
    big = {"description": "report scale bench", "base": {**BASE, "train": {"epochs": epochs}}, "grid": GRID,
           "seeds": seeds, "baseline": BASELINE}  # fmt: skip
    f.write_text(yaml.safe_dump({"sweeps": {"big": big}}))
    return plan(f, "big", max_trials=10**8)


def dress(db: Path, p: Plan) -> str:
    """Record a code fingerprint on the built store's done trials, as a launch does (today's code; about 1% of
    them, keys from 00 to 02, with another training loop: stale); a no-op when today's code is recorded there
    already. Written with SQL at once: 97,000 `Store.finish` calls would be minutes of set-up."""
    now = fingerprint(p.trials[0].config)
    old = Fingerprint({**now.components, "loop": "0" * 16}, now.versions)
    with sqlite3.connect(db) as conn:
        if conn.execute("SELECT 1 FROM trials WHERE code_digest = ? LIMIT 1", (now.digest,)).fetchone() is None:
            done = "UPDATE trials SET code = ?, code_digest = ? WHERE state = 'done'"
            conn.execute(done, (json.dumps(record(now, p.file)), now.digest))
            conn.execute(done + " AND substr(key, 1, 2) < '03'", (json.dumps(record(old, p.file)), old.digest))
        stale = conn.execute("SELECT count(*) FROM trials WHERE code_digest = ?", (old.digest,)).fetchone()[0]
    return f"done trials recorded with today's code, {stale} of them with another loop (stale)"


def first_launch(p: Plan, store: Store) -> None:
    """A first launch's store work before its trials are submitted (`ablate.execution.launcher._record`, no Ray)."""
    chosen = select([p], store, Select())
    store.upsert_sweep(p.sweep, spec_path=p.file, metric=p.metric, baseline=p.baseline, description=p.description,
                       spec={"axes": p.axes, "plugins": p.plugins.to_json()})  # fmt: skip
    store.add_trials(p.sweep, p.trials)
    store.holders(chosen.run)


def driver_floor(p: Plan) -> Callable[[Path], None]:
    """Insert the plan's trial and membership rows with sqlite3's executemany alone (rows serialised first)."""
    trials = [(t.key, t.variant, json.dumps(t.recorded()), json.dumps(t.axes)) for t in p.trials]
    members = [(t.key, json.dumps(t.axes), i) for i, t in enumerate(p.trials)]

    def insert(db: Path) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("INSERT INTO sweeps (name, created_at, updated_at) VALUES ('big', 0, 0)")
            conn.executemany("INSERT INTO trials (key, variant, config, axes, state, attempts, created_at) "
                             "VALUES (?, ?, ?, ?, 'pending', 0, 0)", trials)  # fmt: skip
            conn.executemany("INSERT INTO sweep_trials (sweep, trial_key, axes, position) VALUES ('big', ?, ?, ?)",
                             members)  # fmt: skip

    return insert


def fresh_stores(folder: Path, n: int) -> Callable[[], str]:
    """`n` empty, migrated stores made beforehand (migrating is not what is timed); each call hands out the next."""
    urls = []
    for i in range(n):
        url = f"sqlite:///{folder / f'fresh{i}.sqlite'}"
        Store(url).close()
        urls.append(url)
    return iter(urls).__next__


def launch_figures(p: Plan, built: Path, folder: Path, repeats: int) -> None:
    stores, floors = fresh_stores(folder / "a", repeats + 2), fresh_stores(folder / "b", repeats + 1)
    insert = driver_floor(p)

    def ours() -> None:
        with Store(stores()) as store:
            first_launch(p, store)

    def floor() -> None:
        insert(Path(floors().removeprefix("sqlite:///")))

    sides: dict[str, Callable[[], Any]] = {"launch": ours, "floor": floor}
    ours()  # the same untimed warm-up for both
    floor()
    got = medians(alternate(sides, repeats))
    print(f"first launch of {len(p.trials)} trials (select + upsert_sweep + add_trials + holders, SQLite): "
          f"{got['launch']:.2f} s; the rows by executemany alone {got['floor']:.2f} s; "
          f"ratio {got['launch'] / got['floor']:.2f}; {load()}")  # fmt: skip
    with Store(stores()) as store:  # where the first launch's time goes
        steps = {
            "select": lambda: select([p], store, Select()),
            "add_trials": lambda: store.add_trials("big", p.trials),
        }
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            print(f"  {name} {time.perf_counter() - t0:.2f} s")
    with Store(f"sqlite:///{built}") as store:
        again = statistics.median(_seconds(lambda: store.add_trials("big", p.trials)) for _ in range(repeats))
    print(f"relaunch: add_trials of the same {len(p.trials)} trials into the built store {again:.2f} s; {load()}")


def _seconds(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def cli_figures(db: Path, folder: Path, repeats: int) -> None:
    url, small = f"sqlite:///{db}", f"sqlite:///{folder / 'small.sqlite'}"
    with Store(small) as store:  # one sweep of one pending trial
        store.add_trials("one", [{"key": "k", "variant": "v", "config": {}, "axes": {}}])
    views = {"status": ["status"], "status big": ["status", "big"], "runs": ["runs"], "runs big": ["runs", "big"],
             "runs --state failed": ["runs", "--state", "failed"]}  # fmt: skip
    commands = {"--help": ["--help"], "status (1 trial)": ["status", "--db", small],
                **{name: [*args, "--db", url] for name, args in views.items()},
                "runs --format csv": ["runs", "--format", "csv", "--db", url]}  # fmt: skip
    env = {**os.environ, "COLUMNS": "160"}
    cpu: dict[str, list[float]] = {name: [] for name in commands}

    def run(name: str) -> Callable[[], Any]:
        def side() -> None:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([ABLATE, *commands[name]], check=True, stdout=subprocess.DEVNULL, env=env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

        return side

    sides = {name: run(name) for name in commands}
    for side in sides.values():
        side()  # the same untimed warm-up for each (OS page cache, .pyc)
    got = medians(alternate(sides, repeats))
    used = {name: statistics.median(t[1:]) for name, t in cpu.items()}  # the warm-up's left out
    floor = got.pop("--help")
    print(f"start-up floor `ablate --help` {floor:.2f} s ({used['--help']:.2f} s CPU); {load()}")
    for name, took in got.items():
        target = f"; target < {TARGETS[name.split()[0]]:.0f} s beyond" if name in views else ""
        print(f"  ablate {name} {took:.2f} s: {took - floor:.2f} s beyond the floor, ratio {took / floor:.2f}; CPU "
              f"{used[name]:.2f} s, {used[name] - used['--help']:.2f} s beyond{target}")  # fmt: skip


def report_figures(db: Path, repeats: int) -> None:
    with Store(f"sqlite:///{db}") as store, tempfile.TemporaryDirectory() as out:
        sides = report_sides(store, Path(out))
        for side in sides.values():
            side()  # the same untimed warm-up for both
        got = medians(alternate(sides, repeats))
    print(f"report {got['report']:.2f} s (in process, all formats); trials frame alone {got['floor']:.2f} s; "
          f"ratio {got['report'] / got['floor']:.2f}; target < {TARGETS['report']:.0f} s; {load()}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / "ablate-sweep-scale.sqlite")
    ap.add_argument("--seeds", type=int, default=250)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median is reported")
    ap.add_argument("--skip-report", action="store_true")
    ap.add_argument("--skip-launch", action="store_true", help="time only the views (and the report)")
    args = ap.parse_args()
    if not args.db.exists():
        took = _seconds(lambda: generate(args.db, args.seeds, args.epochs))
        print(f"built {args.db} in {took:.0f} s (not measured)")
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        for side in "ab":
            (folder / side).mkdir()
        t0 = time.perf_counter()
        p = planned(args.seeds, args.epochs, folder)
        print(f"plan {len(p.trials)} trials {time.perf_counter() - t0:.2f} s (bench/plan_scale.py times it)")
        with Store(f"sqlite:///{args.db}") as store:  # migrates an older store (not measured)
            counts = store.status("big").iloc[0]
        print(f"store {args.db}: {counts['total']} trials, {counts['done']} done, {args.epochs} epochs, "
              f"{dress(args.db, p)}; {load()}")  # fmt: skip
        if not args.skip_launch:
            launch_figures(p, args.db, folder, args.repeats)
        cli_figures(args.db, folder, args.repeats)
    if not args.skip_report:
        report_figures(args.db, args.repeats)


if __name__ == "__main__":
    main()
