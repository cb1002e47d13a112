"""The launch loop's cost per trial from 100 to 10,000 no-op trials on a three-node loopback cluster with a
PostgreSQL store, beside Ray Tune's Tuner on the same trials; then `ablate status` and `ablate report` of the
largest store (issue 58 item 5).

    .venv/bin/python bench/launch_scale.py [--sizes 100 1000 10000] [--tune-budget 600] [--keep]

The team set-up on loopback (tests/procs.py, as bench/cluster_overhead.py starts it): a throwaway PostgreSQL
server (initdb + pg_ctl in a temporary folder), a Ray head and two worker nodes (`ray start`, each on a loopback
address of its own with 1 CPU: three trial slots). Per sweep size N, in a fresh database of that server and a
fresh process each (the CLI's way, no MLflow):

  ablate     `ablate.launch` of N no-op trials (bench/launch_overhead.py's `noop`: report one metric, return;
             10 grid cells x N/10 seeds, 1 CPU each) on the cluster's address; the launch call's wall clock and
             its process's CPU time (user + system, every thread), each per trial; beside them the store's SQL,
             per statement shape: count and seconds per trial (what grows with N is named below the table)
  Ray Tune   `Tuner.fit` of N trials with the same body on the same cluster (launch_overhead's `run_tune`:
             a grid of N configs, 1 CPU each, Tune's default loggers); run at a size only while the last size's
             seconds per trial x N fit in --tune-budget seconds: where it stops is printed, with the projection

Printed: per size and tool, wall and CPU ms per trial; ablate's ratio to its own 100-trial figure (flat: 1.0)
and to Tune's at the same size; the marginal cost per trial between sizes ((wall(N2) - wall(N1)) / (N2 - N1)),
which leaves the fixed cost (Ray connect, pre-flight) out. Then `ablate status --db` and `ablate report --db` of
the largest store, fresh processes, wall and CPU seconds (goal: each under 2 s). The plot, cost per trial
against sweep size for both tools, is written to bench/launch_scale.png. Every process the bench started is
stopped by its pid (and what it started); --keep leaves the PostgreSQL server running (its URL and pg_ctl
command printed) for profiling the largest store's views.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import launch_overhead
import yaml
from cluster_overhead import start_cluster
from launch_overhead import BASE, noop, run_tune
from sweep_scale import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the servers the team test starts
from conftest import free_port, fresh_database, postgres_binary
from procs import Launcher, Postgres, leftovers

ABLATE = str(Path(sys.executable).with_name("ablate"))
SWEEP = "scale"
CELLS = 10
"""Grid cells of the ablate sweep: N trials are CELLS cells x N / CELLS seeds (a report's shape, not N variants)."""
PLOT = Path(__file__).with_name("launch_scale.png")


def shape(statement: str) -> str:
    """A SQL statement's shape: its first words, whitespace collapsed, parameter lists cut (a batched INSERT's
    text changes with its batch size)."""
    text = re.sub(r"\s+", " ", statement).strip()
    return re.sub(r"\(%\(.*|VALUES .*|IN \(.*", "...", text)[:100]


def sql_counter() -> dict[str, list[float]]:
    """Every SQL statement this process runs from now on, by shape: [count, seconds] (SQLAlchemy's cursor
    events, about a microsecond each)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    @event.listens_for(Engine, "before_cursor_execute")
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["began"] = time.perf_counter()

    @event.listens_for(Engine, "after_cursor_execute")
    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        s = stats[shape(statement)]
        s[0] += 1
        s[1] += time.perf_counter() - conn.info.pop("began")

    return stats


def child_ablate(folder: Path, n: int, address: str, db: str) -> dict[str, Any]:
    """`ablate.launch` of the sweep of `n` no-op trials (this process alone: what a person's launch is)."""
    import ablate
    from ablate.execution.launcher import Cluster, RunConfig
    from ablate.execution.progress import Display
    from ablate.planning.plan import plan

    f = folder / "e.yaml"
    grid = {"train.weight_decay": [round(0.001 * i, 6) for i in range(CELLS)]}
    f.write_text(yaml.safe_dump({"sweeps": {SWEEP: {"base": BASE, "grid": grid, "seeds": n // CELLS}}}))
    stats = sql_counter()
    trials = plan(f, SWEEP)
    cpu, t0 = time.process_time(), time.perf_counter()
    result = ablate.launch(trials, db, False, cluster=Cluster(address), run=RunConfig(folder / "ck", runner=noop),
                           progress=Display(live=False))  # fmt: skip
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
    assert result.counts["done"] == n, result.counts
    return {"wall": wall, "cpu": cpu, "sql": dict(stats)}


def child_tune(folder: Path, n: int, address: str) -> dict[str, Any]:
    """Ray Tune's `Tuner.fit` of `n` trials with the same body, its driver joined to the cluster."""
    import ray

    ray.init(address=address, log_to_driver=False, configure_logging=False)
    cpu, t0 = time.process_time(), time.perf_counter()
    run_tune(folder, n)
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - cpu}


@dataclass(frozen=True)
class Run:
    """One tool's launch of one size: wall and CPU seconds of the launch call, its SQL (ablate's)."""

    tool: str
    n: int
    wall: float
    cpu: float
    sql: dict[str, list[float]]

    def ms(self, seconds: float) -> float:
        return seconds / self.n * 1e3


def measured(tool: str, n: int, work: Path, env: dict[str, str], *extra: str) -> Run:
    """`tool`'s launch of `n` trials in a process of its own, stopped by its pid if the bench stops first."""
    folder = work / f"{tool}-{n}"
    folder.mkdir()
    argv = [sys.executable, __file__, "--child", tool, "--trials", str(n), "--folder", str(folder), *extra]
    launcher = Launcher(tool, argv, env, folder, folder / "out.log")
    try:
        code = launcher.proc.wait()
    finally:
        launcher.kill()
    if code:
        raise SystemExit(f"{tool} of {n} trials failed ({code}):\n{launcher.text()[-3000:]}")
    out = json.loads((folder / "run.json").read_text())
    shutil.rmtree(folder / "ck", ignore_errors=True)
    return Run(tool, n, out["wall"], out["cpu"], out.get("sql", {}))


def view(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the process and its children) of one CLI command."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(argv[:2])} failed:\n{proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime


def growth(runs: list[Run]) -> None:
    """ablate's SQL statements by shape: count and ms per trial at each size, the ones whose time per trial grows
    most from the smallest size to the largest first."""
    first, last = runs[0], runs[-1]
    per = lambda r, s, i: r.sql.get(s, [0, 0.0])[i] / r.n  # noqa: E731
    shapes = sorted(last.sql, key=lambda s: per(last, s, 1) - per(first, s, 1), reverse=True)
    print("  ablate's SQL per trial by statement (count, ms), largest growth first:")
    for s in shapes[:8]:
        cells = "  ".join(f"{per(r, s, 0):6.3f} {per(r, s, 1) * 1e3:6.2f}" for r in runs)
        print(f"    {cells}  {s[:70]}")


def plot(ablate: list[Run], tune: list[Run], stopped: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for runs, label in ((ablate, "ablate launch"), (tune, "Ray Tune Tuner.fit")):
        if runs:
            ax.plot([r.n for r in runs], [r.ms(r.wall) for r in runs], marker="o", label=f"{label}, wall")
            ax.plot([r.n for r in runs], [r.ms(r.cpu) for r in runs], marker="x", ls="--", label=f"{label}, driver CPU")
    ax.set(xscale="log", yscale="log", xlabel="sweep size (no-op trials)", ylabel="ms per trial",
           title="Launch cost per trial, 3 loopback nodes x 1 CPU, PostgreSQL")  # fmt: skip
    if stopped:
        ax.annotate(stopped, (0.02, 0.02), xycoords="axes fraction", fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument(
        "--tune-budget", type=float, default=600.0, help="seconds a Tune run may be projected to take (0: none)"
    )
    ap.add_argument("--keep", action="store_true", help="leave the PostgreSQL server running")
    ap.add_argument("--child", choices=("ablate", "tune"), help=argparse.SUPPRESS)
    ap.add_argument("--trials", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(launch_overhead)  # the workers cannot import bench/
        out = (child_ablate(a.folder, a.trials, a.address, a.db) if a.child == "ablate"
               else child_tune(a.folder, a.trials, a.address))  # fmt: skip
        (a.folder / "run.json").write_text(json.dumps(out))
        return
    work = Path(tempfile.mkdtemp(prefix="ablate-ls-"))  # short: Ray's socket paths live under it
    print(f"launch_scale: sizes {a.sizes}, 3 loopback nodes x 1 CPU, PostgreSQL, {os.cpu_count()} cores; {load()}",
          flush=True)  # fmt: skip
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "", "RAY_TMPDIR": str(work / "ray")}
    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    assert initdb and pg_ctl, "needs PostgreSQL's initdb and pg_ctl"
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        root = Path(tempfile.mkdtemp(prefix="ablate-ls-server-"))  # its own: the server's user must reach it
        server = Postgres.create(root, initdb, pg_ctl, free_port())
        if a.keep:
            print(f"  PostgreSQL kept: {server.url}; stop: {pg_ctl} -D {server.data} -m fast stop")
        else:
            stack.callback(shutil.rmtree, root, ignore_errors=True)
            stack.callback(server.stop)
        stack.callback(lambda: print(f"  cleaned up; {len(leftovers(work / 'ray'))} processes left behind"))
        address = start_cluster(stack, work, env)
        ablate: list[Run] = []
        tune: list[Run] = []
        stopped = "Tune not run (--tune-budget 0)" if a.tune_budget <= 0 else ""
        for n in a.sizes:
            if not stopped:
                projected = tune[-1].wall / tune[-1].n * n if tune else 0.0
                if projected > a.tune_budget:
                    stopped = (f"Tune not run from {n} trials: projected {projected:.0f} s at its {tune[-1].n}-trial "
                               f"pace, over --tune-budget {a.tune_budget:.0f} s")  # fmt: skip
                else:
                    tune.append(measured("tune", n, work, env, "--address", address))
                    print(f"  tune {n}: {tune[-1].wall:.1f} s; {load()}", flush=True)
            db = fresh_database(server.url)
            ablate.append(measured("ablate", n, work, env, "--address", address, "--db", db))
            print(f"  ablate {n}: {ablate[-1].wall:.1f} s ({db}); {load()}", flush=True)
        print("cost per trial (launch call, ms): wall / driver CPU")
        base = ablate[0]
        for r in ablate:
            t = next((t for t in tune if t.n == r.n), None)
            vs = f"; Tune {t.ms(t.wall):7.1f} / {t.ms(t.cpu):6.1f}, ablate/Tune {r.wall / t.wall:.3f}" if t else ""
            print(f"  {r.n:6d} trials: ablate {r.ms(r.wall):6.1f} / {r.ms(r.cpu):5.1f}, vs its {base.n}: "
                  f"{r.ms(r.wall) / base.ms(base.wall):.2f} / {r.ms(r.cpu) / base.ms(base.cpu):.2f}{vs}")  # fmt: skip
        for x, y in itertools.pairwise(ablate):
            print(f"  marginal {x.n}->{y.n}: ablate {(y.wall - x.wall) / (y.n - x.n) * 1e3:.1f} ms wall, "
                  f"{(y.cpu - x.cpu) / (y.n - x.n) * 1e3:.1f} ms CPU per trial")  # fmt: skip
        if stopped:
            print(f"  {stopped}")
        growth(ablate)
        plot(ablate, tune, stopped)
        print(f"  plot: {PLOT}")
        for name, argv in (("status", [ABLATE, "status", "--db", db]),
                           ("report", [ABLATE, "report", "--db", db, "--out", str(work / "reports")])):  # fmt: skip
            wall, cpu = view(argv, env, work)
            print(f"  ablate {name} of the {ablate[-1].n}-trial store: {wall:.2f} s wall, {cpu:.2f} s CPU "
                  f"(goal < 2 s); {load()}")  # fmt: skip


if __name__ == "__main__":
    main()
