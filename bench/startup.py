"""Start-up times of the `ablate` command against the issue 17 budget, each as a ratio to `import ablate`.

    .venv/bin/python bench/startup.py [--repeats 5] [--launch-repeats 5] [--skip-epoch]

What is timed (wall clock around a whole fresh process, from outside; the median of --repeats):
  import      `python -c "import ablate"`: the floor every command pays (the ratios' baseline)
  --help      `ablate --help`                                         (budget 0.5 s)
  plan        `ablate plan experiments.yaml cpu` (costs on: params and GFLOPs per trial), cost cache warm
              (one untimed run first), and once more with an empty cache (`plan cold`)  (budget 2 s)
  idle launch `ablate launch experiments.yaml cpu` into a store where every trial is done with today's code
              (MLflow on, the pre-launch check on, as a user runs it)  (budget 3 s)
  first epoch `ablate launch experiments.yaml cpu` into an empty store and a fresh checkpoint folder: seconds
              from the process start to the first trial's `started_at` and to its first epoch's metrics
              (`wall_time` in the store, read after the run), then the launch is stopped with SIGINT; the median
              of --launch-repeats  (budget 15 s to the first epoch)
The sides run in turn (ABAB, BABA, ...) so drifting load hits every side alike. The embedded Ray, the store,
MLflow and the cost cache live in a temp folder; nothing outside it is written.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from timing import alternate, medians

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "experiments.yaml"
SWEEP = "cpu"
ABLATE = [str(Path(sys.executable).parent / "ablate")]
BUDGET = {"--help": 0.5, "plan": 2.0, "plan cold": None, "idle launch": 3.0}


def run(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


def done_store(db: Path) -> str:
    """A store where every trial of the sweep is done with today's code (no training: results written)."""
    from ablate.planning.plan import plan
    from ablate.provenance.fingerprint import fingerprints
    from ablate.store import Store

    url = f"sqlite:///{db}"
    p = plan(FILE, SWEEP)
    with Store(url) as store:
        store.upsert_sweep(p.sweep, spec_path=p.file, metric=p.metric, baseline=p.baseline,
                           description=p.description, spec={"axes": p.axes})  # fmt: skip
        store.add_trials(p.sweep, p.trials)
        for t, code in zip(p.trials, fingerprints([t.config for t in p.trials]), strict=True):
            store.mark_running(t.key, host="bench")
            store.finish(t.key, "done", result={p.metric: 50.0}, code=code.to_json())
    return url


def first_epoch(folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from `ablate launch` to the first trial's start and to its first epoch's metrics."""
    folder.mkdir()
    db = folder / "r.sqlite"
    args = [*ABLATE, "launch", str(FILE), SWEEP, "--plain", "--db", f"sqlite:///{db}",
            "--mlflow-uri", f"sqlite:///{folder}/m.sqlite", "--storage", str(folder / "ck")]  # fmt: skip
    t0 = time.time()
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None and _first_metric(db) is None:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    metric = _first_metric(db)
    if metric is None:
        raise SystemExit(f"the launch ended (exit {proc.returncode}) before any epoch:\n{stderr}")
    with sqlite3.connect(db) as conn:
        (started,) = conn.execute("SELECT min(started_at) FROM trials").fetchone()
    start = datetime.fromisoformat(started).replace(tzinfo=UTC).timestamp()
    return start - t0, metric - t0


def _first_metric(db: Path) -> float | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (first,) = conn.execute("SELECT min(wall_time) FROM metrics").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return None
    return float(first) if first is not None else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="runs of each command; the median is reported")
    ap.add_argument("--launch-repeats", type=int, default=5, help="launches timed to their first epoch")
    ap.add_argument("--skip-epoch", action="store_true", help="leave out the first-epoch part (minutes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "XDG_CACHE_HOME": str(tmp / "cache"), "COLUMNS": "200"}
        db = done_store(tmp / "done.sqlite")
        idle = [*ABLATE, "launch", str(FILE), SWEEP, "--plain", "--db", db,
                "--mlflow-uri", f"sqlite:///{tmp}/m.sqlite", "--storage", str(tmp / "ck")]  # fmt: skip
        sides = {
            "import": lambda: run([sys.executable, "-c", "import ablate"], env),
            "--help": lambda: run([*ABLATE, "--help"], env),
            "plan": lambda: run([*ABLATE, "plan", str(FILE), SWEEP], env),
            "idle launch": lambda: run(idle, env),
        }
        for side in sides.values():  # warm-up alike: the OS file cache, the cost cache, the pre-launch check
            side()
        cold_cache = {**env, "XDG_CACHE_HOME": str(tmp / "empty")}
        cold = alternate({"plan cold": lambda: run([*ABLATE, "plan", str(FILE), SWEEP], cold_cache)}, 1)
        times = medians(alternate(sides, args.repeats)) | medians(cold)
        base = times["import"]
        print(f"start-up, median of {args.repeats} fresh processes (plan cold: 1), order alternated:")
        for name, seconds in times.items():
            budget = f"  (budget {BUDGET[name]} s)" if BUDGET.get(name) else ""
            print(f"  {name:12s} {seconds:6.2f} s  {seconds / base:5.1f}x import{budget}")
        if args.skip_epoch:
            return
        starts, epochs = [], []
        for r in range(args.launch_repeats):
            start, epoch = first_epoch(tmp / f"launch-{r}", env)
            starts.append(start)
            epochs.append(epoch)
        print(f"launch of `{SWEEP}` (fresh store and checkpoints), median of {args.launch_repeats}: first trial "
              f"started {statistics.median(starts):.1f} s, first epoch recorded {statistics.median(epochs):.1f} s "
              f"after the command (budget 15 s); all: {', '.join(f'{e:.1f}' for e in epochs)}")  # fmt: skip


if __name__ == "__main__":
    main()
