"""How fast a large store is reported: seconds to write the report of 10,000 trials x 100 epochs.

    .venv/bin/python bench/report_scale.py [--seeds 25] [--epochs 100] [--db big.sqlite] [--repeats 3] [--before DIR]

Generates (once; an existing --db is reused, generation is not the measured part) a sweep of 400
variants (the four CSaN switches x beta x lr) x 25 seeds with known effects through the store's write
API, 8 metrics per epoch, 1% failed / 1% diverged / 1% pending trials. Then times `ablate.report` into
a fresh temporary folder (all formats) against the floor in the same run: reading the trials frame
through the store's query API (`Store.trials_frame`), the one read no report can skip.

How: wall clock around each whole call, from outside, on the same open store; both get the same
warm-up (one untimed call of each, so neither is timed cold: SQLite pages and compiled queries are warm
for both); then the order alternates between repeats (ABAB, BABA, ...) and the medians of --repeats
runs are compared (ratio = report / floor). The report's median process CPU time and the load average
are printed beside it: on a shared machine the wall clock also counts the time other processes held
the cores.

With `--before DIR` (another commit's working tree: `git worktree add DIR COMMIT`), the report is also timed in two
child processes, this checkout's and DIR's (DIR first on the import path), each with the store open and warmed
once, called in the same alternation: their ratio (CPU and wall, medians) is the change's, whatever the load.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from timing import alternate

from ablate.planning.plan import plan
from ablate.reporting import report
from ablate.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic-store filler
from synthetic import fill

ROOT = Path(__file__).resolve().parents[1]

GRID = {
    "attention.tau": [True, False], "attention.mu": [True, False], "attention.kappa_pub": ["unit", "off"],
    "attention.kappa_priv": [True, False], "attention.beta": [0.1, 0.25, 0.5, 1.0, 2.0],
    "train.lr": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3],
}  # fmt: skip
BASE = {"model": {"backbone": "vit", "embed_dim": 32, "depths": [2], "num_heads": [2], "stack": "pure"},
        "attention": {"kind": "csan"}, "train": {"epochs": 100}}  # fmt: skip
BASELINE = {"attention.tau": False, "attention.mu": False, "attention.kappa_pub": "off", "attention.kappa_priv": False,
            "attention.beta": 0.25, "train.lr": 3e-3}  # fmt: skip


def value(t) -> float:
    """Known effects: tau +2, mu +1, public +1.5, private +3, tau x mu +0.5, lr off 3e-3 costs; seed noise."""
    a = t.axes
    seed = a["seed"]
    tau, mu, pub, priv = (
        a["attention.tau"],
        a["attention.mu"],
        a["attention.kappa_pub"] == "unit",
        a["attention.kappa_priv"],
    )
    noise = math.sin(7.1 * seed) + 0.3 * math.sin(13.7 * seed + int(t.variant[:6], 16) % 97)
    return 60 + 2 * tau + mu + 1.5 * pub + 3 * priv + 0.5 * tau * mu - 2 * abs(math.log(a["train.lr"] / 3e-3)) + noise


def state(t) -> str:
    h = int(t.key[:6], 16) % 100
    return {0: "failed", 1: "diverged", 2: "pending"}.get(h, "done")


def cost(t) -> tuple[int, int]:
    a = t.axes
    params = 1_000_000 + 20_000 * (a["attention.tau"] + a["attention.mu"] + a["attention.kappa_priv"])
    params += 40_000 * (a["attention.kappa_pub"] == "unit")
    return params, 2 * 90 * params


def generate(db: Path, seeds: int, epochs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big.yaml"
        base = {**BASE, "train": {"epochs": epochs}}
        big = {"description": "report scale bench", "base": base, "grid": GRID, "seeds": seeds, "baseline": BASELINE}
        f.write_text(yaml.safe_dump({"sweeps": {"big": big}}))
        p = plan(f, "big", max_trials=10**8)  # --seeds 250: 100,000 trials (bench/sweep_scale.py)
    with Store(f"sqlite:///{db}") as store:
        fill(store, p, value, state=state, cost=cost, epochs=epochs)


def report_sides(store: Store, out: Path, cpu: list[float] | None = None) -> dict[str, Callable[[], Any]]:
    """The two timed sides: the report of the sweep into a fresh folder under `out` per call (its first call
    writes `out/0`; each call's process CPU time is appended to `cpu`, if given), and its floor, the trials
    frame (also what bench/sweep_scale.py times)."""
    runs = itertools.count()

    def write() -> list[Path]:
        start = time.process_time()
        files = report("big", store=store, out=out / str(next(runs)))
        if cpu is not None:
            cpu.append(time.process_time() - start)
        return files

    return {"report": write, "floor": lambda: store.trials_frame("big")}


def prepared(db: str, epochs: int) -> argparse.Namespace:
    """The options of a bench on this sweep (--seeds, --epochs, --db under the temporary folder by default,
    --repeats), its store generated at --db first where it is not there (generation is not the measured part):
    what bench/report_scale.py and bench/bootstrap_cost.py both set up."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / db)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median is reported")
    ap.add_argument("--before", type=Path, help="another checkout whose report to time beside this one's")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child of --before
    args = ap.parse_args()
    if not args.db.exists():
        t0 = time.perf_counter()
        generate(args.db, args.seeds, args.epochs)
        print(f"generated {args.db} in {time.perf_counter() - t0:.0f} s (not measured)")
    return args


def served(db: Path, checkout: Path, cpu: list[float]) -> tuple[subprocess.Popen[str], Callable[[], None]]:
    """A child process that reports the sweep of `db` with `checkout`'s ablate (first on its import path, run there)
    once per call, after one untimed warm-up: the process and its side (each call's CPU seconds, the child's own,
    appended to `cpu`)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", "--db", str(db)], env=env,
                             cwd=checkout, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    def call() -> None:
        stdin.write("\n")
        stdin.flush()
        cpu.append(float(stdout.readline()))

    call()  # the warm-up, as the in-process side's
    cpu.clear()
    return child, call


def serve(db: Path) -> None:
    """`--serve`: a report of the sweep into a fresh folder per line read, its CPU seconds written back."""
    with Store(f"sqlite:///{db}") as store, tempfile.TemporaryDirectory() as out:
        sides = report_sides(store, Path(out), spent := [])
        for _ in sys.stdin:
            sides["report"]()
            print(spent[-1], flush=True)


def main() -> None:
    args = prepared("ablate-report-scale.sqlite", epochs=100)
    if args.serve:
        serve(args.db)
        return
    size = sum(p.stat().st_size for p in args.db.parent.glob(args.db.name + "*"))
    with Store(f"sqlite:///{args.db}") as store, tempfile.TemporaryDirectory() as out:
        counts = store.status("big")
        rows = len(store.metrics_frame("big", names="samples_per_s"))
        cpu: list[float] = []
        sides = report_sides(store, Path(out), cpu)
        files = sides["report"]()  # the same untimed warm-up for both
        sides["floor"]()
        cpu.clear()
        children, used = [], {"now": [], "before": []}
        for side, checkout in (("now", ROOT), ("before", args.before)) if args.before else ():
            child, sides[side] = served(args.db, checkout.resolve(), used[side])
            children.append(child)
        times = alternate(sides, args.repeats)
        for child in children:
            child.communicate("")  # end of its input: it exits
        html = (Path(out) / "0" / "big" / "index.html").stat().st_size
    took, floor = statistics.median(times["report"]), statistics.median(times["floor"])
    print(f"store {size / 2**20:.0f} MiB: {int(counts['total'].iloc[0])} trials, {rows} epoch rows per metric name")
    print(
        f"report {took:.2f} s (CPU {statistics.median(cpu):.2f} s; {len(files)} files, index.html "
        f"{html / 2**10:.0f} KiB); reading the trials frame alone {floor:.2f} s; medians of {args.repeats}, warm, "
        f"order alternated; ratio {took / floor:.2f}; target < 2 s; load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )
    if args.before:
        (now, then), (cpu_now, cpu_then) = ([statistics.median(t[k]) for k in ("now", "before")] for t in (times, used))
        print(f"in child processes: this checkout {now:.2f} s (CPU {cpu_now:.2f} s), {args.before} {then:.2f} s (CPU "
              f"{cpu_then:.2f} s); after / before: wall {now / then:.2f}, CPU {cpu_now / cpu_then:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
