"""The launch loop's own cost before and after a change, in one run on one machine state.

    .venv/bin/python bench/launch_ab.py [--baseline b001b75] [--trials 64] [--work 2.0] [--repeats 3]

The baseline commit's tree is exported (`git archive`) to a temporary folder; each timed unit runs in a fresh
process (`bench/launch_overhead.py --once`, this tree's script, on a fresh Ray) that imports ablate from one tree or
the other (PYTHONPATH), the two sides alternating (ABAB, BABA, ...). Units: a launch of --trials no-op trials (store
and MLflow, as `ablate launch`: its wall time, and the CPU time of the launching process, every thread, which others'
load changes less), then `ablate launch` of that finished sweep (nothing to run, a fresh CLI process); the same
launch without MLflow on warm workers (the loop alone); 8 trials of --work CPU seconds on 1 and on 2 CPUs (parallel
efficiency t(1) / (2 t(2))), then on 1 and on 2 cores (everything pinned: `launch_overhead.py`'s efficiency
part). Prints medians and the ratios after/before: on a machine others load, the ratios within a run are the figures
to compare, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def unit(tree: Path, what: str, trials: int, work: float) -> list[float]:
    """The seconds `launch_overhead.py --once what` prints, with ablate imported from `tree`."""
    cmd = [sys.executable, str(ROOT / "bench" / "launch_overhead.py"), "--once", what, "--trials", str(trials),
           "--work", str(work)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, check=False)
    if out.returncode:
        raise RuntimeError(f"{what} in {tree} failed:\n{out.stdout}\n{out.stderr}")
    return [float(x) for x in out.stdout.strip().splitlines()[-1].split()]  # seconds, CPU seconds[, relaunch]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="b001b75", help="the commit before the change")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--work", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-efficiency", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        before = Path(d)
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        trees = {"before": before, "after": ROOT}
        units = ["noop", "loop"] + ([] if args.skip_efficiency else ["busy1", "busy2", "pinned1", "pinned2"])
        times: dict[tuple[str, str], list[list[float]]] = {(s, u): [] for s in trees for u in units}
        for r in range(args.repeats):
            for side in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                for u in units:
                    times[side, u].append(unit(trees[side], u, args.trials, args.work))

    def med(side: str, u: str, i: int = 0) -> float:
        return statistics.median(t[i] for t in times[side, u])

    n = args.trials
    print(f"median of {args.repeats}, fresh process and Ray per unit, sides alternated; before = {args.baseline}")
    launch = {s: med(s, "noop") for s in trees}
    cpu = {s: med(s, "noop", 1) for s in trees}
    again = {s: med(s, "noop", 2) for s in trees}
    print(
        f"  launch of {n} no-op trials: before {launch['before'] / n * 1e3:.1f} ms/trial, after "
        f"{launch['after'] / n * 1e3:.1f} ms/trial, ratio after/before {launch['after'] / launch['before']:.2f}"
    )
    print(
        f"  CPU of the launching process in it: before {cpu['before'] / n * 1e3:.1f} ms/trial, after "
        f"{cpu['after'] / n * 1e3:.1f} ms/trial, ratio after/before {cpu['after'] / cpu['before']:.2f}"
    )
    loop = {s: med(s, "loop") for s in trees}
    loop_cpu = {s: med(s, "loop", 1) for s in trees}
    print(
        f"  the loop alone (no MLflow, warm workers): before {loop['before'] / n * 1e3:.1f} ms/trial "
        f"({loop_cpu['before'] / n * 1e3:.1f} ms CPU), after {loop['after'] / n * 1e3:.1f} ms/trial "
        f"({loop_cpu['after'] / n * 1e3:.1f} ms CPU), ratios {loop['after'] / loop['before']:.2f} "
        f"({loop_cpu['after'] / loop_cpu['before']:.2f} CPU)"
    )
    print(f"  ablate launch of the finished sweep: before {again['before']:.2f} s, after {again['after']:.2f} s, "
          f"ratio {again['after'] / again['before']:.2f}")  # fmt: skip
    if not args.skip_efficiency:
        for kind, where in (("busy", "1 vs 2 CPUs of Ray"), ("pinned", "1 vs 2 cores, pinned")):
            eff = {s: med(s, f"{kind}1") / (2 * med(s, f"{kind}2")) for s in trees}
            secs = {s: f"{med(s, f'{kind}1'):.2f} s / {med(s, f'{kind}2'):.2f} s" for s in trees}
            print(f"  parallel efficiency, 8 trials x {args.work:.1f} CPU s, {where}: before {eff['before']:.2f} "
                  f"({secs['before']}), after {eff['after']:.2f} ({secs['after']})")  # fmt: skip


if __name__ == "__main__":
    main()
