"""Where a launch's fixed cost goes: one launch of no-op trials, each step stamped from `launch`'s call.

    .venv/bin/python bench/launch_timeline.py [--trials 16] [--wait 0]

The set-up of `bench/launch_overhead.py` (a fresh local Ray with 2 CPUs started first, the store and MLflow in a
temporary folder, MLflow's closing detached as `ablate launch` leaves it), with the launcher's steps wrapped to
record when each began and ended (seconds from `launch`'s call; a step called many times: its first start, last end
and total) and each trial's body writing the time it began. --wait: seconds between Ray's start and the launch
(Ray prestarts a worker per CPU meanwhile). One run, on whatever else the machine is doing: the steps' order and
their shares are the figures, not the seconds.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import launch_overhead as bench
import ray

from ablate.execution import fanout, launcher, recorder
from ablate.store import Store
from ablate.tracking import closing, mirror
from ablate.training.messages import TrialResult

START = [0.0]
STEPS: list[tuple[str, float, float]] = []
BODIES = tempfile.mkdtemp(prefix="ablate-bodies-")


def stamped(owner: Any, name: str, label: str) -> None:
    """Replace `owner.name` with a wrapper recording (label, start, end) per call."""
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            STEPS.append((label, began - START[0], time.time() - START[0]))

    setattr(owner, name, wrapper)


def body(cfg: Any, report: Any, checkpoint_dir: Any) -> TrialResult:
    """A no-op trial that writes when it began (defined here: pickled by value, the workers need not import this)."""
    Path(BODIES, f"{os.getpid()}-{time.time_ns()}").write_text(repr(time.time()))
    report(1, {"val.top1": 1.0})
    return TrialResult("done", 1, {"test.top1": 1.0})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--wait", type=float, default=0.0)
    args = ap.parse_args()
    for name in ("select", "_record", "_begin", "_mirror", "_close"):
        stamped(launcher, name, name.lstrip("_"))
    stamped(fanout.Fanout, "loop", "the loop")
    stamped(fanout.Fanout, "fill", "claim and submit")
    stamped(fanout.Fanout, "finished", "wait for tasks")
    stamped(recorder.Recorder, "record", "record messages")
    stamped(mirror, "sync_trial", "MLflow: one trial (mirror thread)")
    stamped(mirror.Mirror, "stop", "MLflow: stop the mirror")
    stamped(mirror, "prepare", "MLflow: import the report's modules (mirror thread)")
    stamped(closing.Closing, "start", "MLflow: start the closing process")
    stamped(Store, "unmirrored", "store: what MLflow lacks")
    timed = launcher.launch

    def launch(*a: Any, **k: Any) -> Any:
        START[0] = time.time()
        stamped_launch = timed(*a, **k)
        STEPS.append(("launch", 0.0, time.time() - START[0]))
        return stamped_launch

    bench.launch = launch
    with tempfile.TemporaryDirectory() as d:
        bench.fresh_ray(2)
        time.sleep(args.wait)
        try:
            bench.run_ablate(Path(d), args.trials, runner=body)
        finally:
            ray.shutdown()
    steps: dict[str, list[float]] = {}
    for label, a, b in STEPS:
        s = steps.setdefault(label, [0, a, b, 0.0])
        s[0], s[1], s[2], s[3] = s[0] + 1, min(s[1], a), max(s[2], b), s[3] + b - a
    print(f"{'step':52s} {'calls':>5s} {'first start':>11s} {'last end':>9s} {'total':>7s}")
    for label, (calls, a, b, total) in sorted(steps.items(), key=lambda kv: kv[1][1]):
        print(f"{label:52s} {calls:5d} {a:11.3f} {b:9.3f} {total:7.3f}")
    began = sorted(float(p.read_text()) - START[0] for p in Path(BODIES).iterdir())
    print(f"{'trial bodies (' + str(len(began)) + ')':52s} {'':5s} {began[0]:11.3f} {began[-1]:9.3f}")


if __name__ == "__main__":
    main()
