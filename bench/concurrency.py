"""Launchers sharing one store, and what a dead MLflow costs a sweep, in one run.

    .venv/bin/python bench/concurrency.py [--trials 64] [--launchers 1 2 4] [--cpus 1]

1. N launchers (each a separate process with its own embedded Ray of --cpus CPUs, as N terminals or
   machines would be) start together on one SQLite store and one sweep of --trials short trials (`short`:
   three epochs of reported metrics, 50 ms of sleep each; it imports nothing heavy). Prints, per N: the
   wall time until the last launcher exits, the trials trained (attempts summed over the store: must equal
   --trials, every trial once), the ratio of wall time to N = 1, and the latency of the launchers' store
   transactions (p50 / p99 over every write: claims, heartbeats, metric rows, outcomes).
2. One launcher, --trials trials, recording to MLflow that is up (a local SQLite MLflow store) and to an
   MLflow server that is down (nothing listens on its port): sweep seconds with each and the ratio down / up
   (the mirror must make it about 1).

How: wall clock around each whole launch from outside (process start to exit; the order of the MLflow
sides alternates over --repeats and medians are used); every launch starts on a fresh store and fresh Ray.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from timing import alternate, medians

BASE = {"data": {"name": "digits"},
        "model": {"backbone": "vit", "embed_dim": 16, "depths": [1], "num_heads": [1], "patch_size": 2, "img_size": 8},
        "train": {"epochs": 3}, "resources": {"cpus": 1}}  # fmt: skip


def short(cfg: Any, report: Any, checkpoint_dir: Any) -> Any:
    from ablate.training.messages import TrialResult

    for epoch in (1, 2, 3):
        time.sleep(0.05)
        report(epoch, {"train.loss": 1.0 / epoch, "val.top1": 10.0 * epoch})
    return TrialResult("done", 3, {"test.top1": 30.0})


def child(folder: Path, mlflow: str | None, cpus: int) -> None:
    """One launcher (run as its own process): launch the sweep, write its store write latencies."""
    from ablate.execution.launcher import Cluster, RunConfig, launch
    from ablate.execution.progress import Display
    from ablate.planning.plan import plan
    from ablate.store import Store
    from ablate.tracking.tracker import Tracker

    latencies: list[float] = []

    class TimedStore(Store):
        @contextmanager
        def _write(self) -> Iterator[Any]:
            t0 = time.perf_counter()
            with super()._write() as conn:
                yield conn
            latencies.append(time.perf_counter() - t0)

    with TimedStore(f"sqlite:///{folder / 'r.sqlite'}") as store:
        tracker = Tracker(mlflow) if mlflow else None
        launch([plan(folder / "e.yaml", "s")], store, tracker, cluster=Cluster(num_cpus=cpus),
               run=RunConfig(storage=folder / "ck", runner=short), progress=Display(live=False))  # fmt: skip
    with open(folder / "latencies.jsonl", "a") as f:
        f.write(json.dumps(latencies) + "\n")


def sweep(folder: Path, trials: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "e.yaml").write_text(yaml.safe_dump({"sweeps": {"s": {"base": BASE, "seeds": trials}}}))


def run_launchers(folder: Path, n: int, cpus: int, mlflow: str | None = None) -> float:
    """Seconds from starting `n` launcher processes at once until the last one exits."""
    args = [
        sys.executable,
        __file__,
        "--child",
        str(folder),
        "--cpus",
        str(cpus),
        *(["--mlflow", mlflow] if mlflow else []),
    ]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]
    codes = [p.wait() for p in procs]
    seconds = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"a launcher failed: exit codes {codes}")
    return seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--launchers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", type=Path)
    ap.add_argument("--mlflow")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.mlflow, a.cpus)
        return
    from ablate.store import Store

    root = Path(tempfile.mkdtemp(prefix="ablate-concurrency-"))
    print(f"1. {a.trials} trials, launchers with {a.cpus} CPU(s) each, one SQLite store")
    base = None
    for n in a.launchers:
        folder = root / f"n{n}"
        sweep(folder, a.trials)
        seconds = run_launchers(folder, n, a.cpus)
        with Store(f"sqlite:///{folder / 'r.sqlite'}") as store:
            trained = int(store.trials_frame("s")["attempts"].sum())
        lat = [x for line in (folder / "latencies.jsonl").read_text().splitlines() for x in json.loads(line)]
        base = base or seconds
        print(f"   N={n}: {seconds:6.1f} s ({seconds / base:.2f} x N=1), trained {trained}/{a.trials}, "
              f"store writes p50 {percentile(lat, 0.5) * 1e3:.1f} ms, p99 {percentile(lat, 0.99) * 1e3:.1f} ms "
              f"({len(lat)} writes)")  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the with ends: nothing listens there
    counter = iter(range(1_000_000))

    def side(uri_of: Any) -> Any:
        def go() -> None:
            folder = root / f"mlflow-{next(counter)}"
            sweep(folder, a.trials)
            run_launchers(folder, 1, a.cpus, uri_of(folder))

        return go

    times = medians(alternate({"up": side(lambda f: f"sqlite:///{f / 'm.sqlite'}"), "down": side(lambda f: dead)},
                              a.repeats))  # fmt: skip
    print(
        f"2. {a.trials} trials, one launcher: MLflow up {times['up']:.1f} s, down {times['down']:.1f} s, "
        f"down / up {times['down'] / times['up']:.2f}"
    )


if __name__ == "__main__":
    main()
