"""How fast a large sweep plans: `planner.plan()` of 100,000 trials, and `ablate plan` of them as a person runs it.

    .venv/bin/python bench/plan_scale.py [--seeds 250] [--repeats 3]

The sweep is bench/sweep_scale.py's (bench/report_scale.py's 400 variants x --seeds; 250: 100,000 trials),
written to a temporary file. Timed, wall clock around each whole call, the order alternated between repeats
(ABAB, BABA, ...), medians of --repeats, each side after the same untimed warm-up (which also fills the cost
cache, as any earlier plan of these models has):

  plan()       `ablate.planning.plan.plan` in this process: read, check and expand
  floor        one `TrialConfig` validation per trial (the planned configs, dumped beforehand): what any
               pydantic-based planner pays
  cli table    `ablate plan FILE` in a fresh process (the table of the first 200 rows, counts per axis, costs)
  cli csv      `ablate plan FILE --format csv`: every trial's row, costs and config (about 180 MB)
  csv rows     in this process, the planned rows as the csv module writes whole rows, each trial's config text
               quoted (what `ablate plan -f csv` did), to /dev/null
  write_csv    the same bytes by `ablate.api.plan_rows.write_csv` (each cell's config quoted once)

`--csv` times the last two alone (their ratio is the CSV writer's saving; the rest takes minutes at load).

The CLI's figures are also given as the CPU seconds its process used (user + system), which a loaded
machine inflates far less than wall clock, and as ratios to `plan()` alone.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from report_scale import BASE, BASELINE, GRID
from timing import alternate, medians

from ablate.api.plan_rows import columns, rows, write_csv
from ablate.config import TrialConfig
from ablate.planning.plan import Plan, plan

ABLATE = str(Path(sys.executable).parent / "ablate")
MAX = str(10**8)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=250, help="seeds per variant (400 variants)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median is reported")
    ap.add_argument("--csv", action="store_true", help="time the two CSV writers alone")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big.yaml"
        big = {"base": {**BASE, "train": {"epochs": 10}}, "grid": GRID, "seeds": args.seeds, "baseline": BASELINE}
        f.write_text(yaml.safe_dump({"sweeps": {"big": big}}))
        planned = plan(f, "big", max_trials=10**8)  # plan()'s warm-up
        if args.csv:
            writers(planned, args.repeats)
            return
        dumped = [t.config.model_dump() for t in planned.trials]
        cpu: dict[str, list[float]] = {"plan()": [], "cli table": [], "cli csv": []}

        def planned() -> None:
            t0 = time.process_time()
            plan(f, "big", max_trials=10**8)
            cpu["plan()"].append(time.process_time() - t0)

        def cli(name: str, *extra: str) -> Callable[[], Any]:
            def side() -> None:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([ABLATE, "plan", str(f), "--max-trials", MAX, *extra], check=True,
                               stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "160"})  # fmt: skip
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

            return side

        sides: dict[str, Callable[[], Any]] = {
            "plan()": planned,
            "floor": lambda: [TrialConfig.model_validate(c) for c in dumped],
            "cli table": cli("cli table"),
            "cli csv": cli("cli csv", "--format", "csv"),
        }
        for name in ("floor", "cli table", "cli csv"):
            sides[name]()  # the same warm-up as plan()'s
        for used in cpu.values():
            used.clear()
        gc.freeze()  # the floor's inputs stay out of the collector's passes, which would tax the other sides
        got = medians(alternate(sides, args.repeats))
    n, alone = len(dumped), got["plan()"]
    used = {name: statistics.median(t) for name, t in cpu.items()}
    print(
        f"trials {n}, medians of {args.repeats}, order alternated; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"  plan() {alone:.2f} s ({alone / n * 1e6:.0f} us/trial, CPU {used['plan()']:.2f} s); one validation per "
          f"trial {got['floor']:.2f} s; ratio {alone / got['floor']:.2f}")  # fmt: skip
    for name in ("cli table", "cli csv"):
        print(f"  ablate plan ({name.removeprefix('cli ')}) {got[name]:.2f} s (CPU {used[name]:.2f} s); ratio to "
              f"plan() alone {got[name] / alone:.2f}")  # fmt: skip


def writers(planned: Plan, repeats: int) -> None:
    """The CSV of `planned` (no cost columns) by whole rows through the csv module and by `write_csv`: medians and
    their ratio, after one untimed run of each (which also makes every cell's text)."""
    with open(os.devnull, "w") as sink:

        def whole_rows() -> None:
            writer = csv.writer(sink, lineterminator="\n")
            writer.writerow([*columns(planned, None), "config"])
            for row, t in zip(rows(planned, None), planned.trials, strict=True):
                writer.writerow([*row.values(), t.resolved_text()])

        sides: dict[str, Callable[[], Any]] = {
            "csv rows": whole_rows,
            "write_csv": lambda: write_csv([planned], None, sink),
        }
        for side in sides.values():
            side()
        got = medians(alternate(sides, repeats))
    print(f"trials {len(planned.trials)}, medians of {repeats}, order alternated; load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"  csv rows {got['csv rows']:.2f} s; write_csv {got['write_csv']:.2f} s; ratio "
          f"{got['write_csv'] / got['csv rows']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
