"""How fast a large sweep plans: `planner.plan()` of 100,000 trials, and `ablate plan` of them as a person runs it.

    .venv/bin/python bench/plan_scale.py [--seeds 250] [--repeats 3] [--before DIR]

The sweep is bench/sweep_scale.py's (bench/report_scale.py's 400 variants x --seeds; 250: 100,000 trials),
written to a temporary file. Timed, wall clock around each whole call, the order alternated between repeats
(ABAB, BABA, ...), medians of --repeats, each side after the same untimed warm-up (which also fills the cost
cache, as any earlier plan of these models has):

  plan()       `ablate.planning.plan.plan` in this process: read, check and expand
  floor        one `TrialConfig` validation per trial (the planned configs, dumped beforehand): what any
               pydantic-based planner pays
  cli table    `ablate plan FILE` in a fresh process (the table of the first 200 rows, counts per axis, costs)
  cli csv      `ablate plan FILE --format csv`: every trial's row, costs and config (about 180 MB)
  cli json     `ablate plan FILE --format json`: the same as JSON (about 235 MB)
  cli markdown `ablate plan FILE --format markdown`: the rows without the config (about 13 MB)
  before ...   with `--before DIR`: the same four commands of the checkout in DIR (another commit's working
               tree: `git worktree add DIR COMMIT`, or `git archive COMMIT | tar -x -C DIR`), run there with
               DIR first on the import path, in the same alternation: its ratio to this checkout's is the
               change's, whatever the load
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

ROOT = Path(__file__).resolve().parents[1]
MAX = str(10**8)
FORMATS = ("table", "csv", "json", "markdown")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=250, help="seeds per variant (400 variants)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side; the median is reported")
    ap.add_argument("--csv", action="store_true", help="time the two CSV writers alone")
    ap.add_argument("--before", type=Path, help="another checkout whose `ablate plan` to time beside this one's")
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
        checkouts = {"": None, **({"before ": args.before.resolve()} if args.before else {})}
        clis = [f"{side}cli {fmt}" for side in checkouts for fmt in FORMATS]
        cpu: dict[str, list[float]] = {"plan()": [], **{name: [] for name in clis}}

        def planned() -> None:
            t0 = time.process_time()
            plan(f, "big", max_trials=10**8)
            cpu["plan()"].append(time.process_time() - t0)

        def cli(name: str, fmt: str, checkout: Path | None) -> Callable[[], Any]:
            env = {**os.environ, "COLUMNS": "160"}
            if checkout is not None:  # its ablate first: run there, as its own `ablate` would from its root
                env["PYTHONPATH"] = str(checkout)
            command = [sys.executable, "-c", "import sys; from ablate.cli import main; sys.argv[0] = 'ablate'; "
                       "sys.exit(main())", "plan", str(f), "--max-trials", MAX, "--format", fmt]  # fmt: skip

            def side() -> None:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env, cwd=checkout or ROOT)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

            return side

        sides: dict[str, Callable[[], Any]] = {
            "plan()": planned,
            "floor": lambda: [TrialConfig.model_validate(c) for c in dumped],
            **{f"{side}cli {fmt}": cli(f"{side}cli {fmt}", fmt, where) for side, where in checkouts.items()
               for fmt in FORMATS},
        }  # fmt: skip
        failed = []
        for name in ("floor", *clis):
            try:
                sides[name]()  # the same warm-up as plan()'s
            except subprocess.CalledProcessError as e:  # the checkout before: a format it could not print
                if not name.startswith("before "):
                    raise
                failed.append(f"{name.removeprefix('before cli ')} (exit {e.returncode})")
                del sides[name]
        for used in cpu.values():
            used.clear()
        gc.freeze()  # the floor's inputs stay out of the collector's passes, which would tax the other sides
        got = medians(alternate(sides, args.repeats))
    n, alone = len(dumped), got["plan()"]
    used = {name: statistics.median(t) for name, t in cpu.items() if t}
    print(
        f"trials {n}, medians of {args.repeats}, order alternated; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if failed:
        print(f"  before: {', '.join(failed)} failed")
    print(f"  plan() {alone:.2f} s ({alone / n * 1e6:.0f} us/trial, CPU {used['plan()']:.2f} s); one validation per "
          f"trial {got['floor']:.2f} s; ratio {alone / got['floor']:.2f}")  # fmt: skip
    for fmt in FORMATS:
        now, then = got[f"cli {fmt}"], got.get(f"before cli {fmt}")
        was = f" (before {then:.2f} s, CPU {used[f'before cli {fmt}']:.2f} s; after / before {now / then:.2f})" \
              if then else ""  # fmt: skip
        print(f"  ablate plan -f {fmt} {now:.2f} s (CPU {used[f'cli {fmt}']:.2f} s; ratio to plan() alone "
              f"{now / alone:.2f}){was}")  # fmt: skip


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
