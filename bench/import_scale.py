"""How fast `ablate import` reads runs ablate did not train: an MLflow experiment of 10,000 runs in a local store,
and a table of 100,000 rows, each against reading the same runs with MLflow's and pandas' own calls.

    .venv/bin/python bench/import_scale.py [--runs 10000] [--rows 100000] [--epochs 3] [--repeats 3] [--baseline C]

Made once, untimed, in a temporary folder: an MLflow experiment at `sqlite:///mlflow.db` of --runs runs (a 4 x 5
grid of `lr` x `depth`, seeds to fill it, --epochs epochs of `val_acc` and `train_loss`, logged with one
`log_batch` per run) and a CSV table of --rows rows (axes `model`, `lr`, a seed and two metrics). Timed, wall clock
around each whole call, sides alternated between repeats, medians of --repeats, CPU seconds beside:

  mlflow floor   `MlflowClient.search_runs` over the experiment, then `get_metric_history` of each metric of each
                 run: what reading the runs with their histories through MLflow's client costs
  mlflow import  `ablate.api.import_runs(experiment=...)` into a fresh store: that read, the mapping and the
                 store's one transaction
  table floor    `pandas.read_csv` of the table
  table import   `ablate.api.import_runs(table)` into a fresh store

Each import is timed in a process of its own, warmed first by an import of a few runs (modules loaded, MLflow's
schema checked), from this checkout and, with --baseline COMMIT, from that commit's tree too (`git archive`):
`... before` beside each import, and the ratios after / before of the same run.

The ratio import / floor says what ablate adds to reading the runs at all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHILD = """
import json, sys, time
from ablate.api import import_runs
source, warm, store, experiment = sys.argv[1:5]
mapping = dict(experiment=experiment, metric="val_acc") if experiment else dict(axes=["model", "lr"], metric="val_acc")
import_runs(warm, store=store + ".warm", **{**mapping, **({"experiment": "warm"} if experiment else {})})
wall, cpu = time.perf_counter(), time.process_time()
import_runs(source, store=store, **mapping)
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""
"""An import timed in a child process whose ablate is the tree it runs in (its working folder comes first on
sys.path): argv source, warm-up source, store, experiment ('' for a table)."""


def make_mlflow(folder: Path, runs: int, epochs: int, name: str = "bench") -> str:
    """An experiment `name` of `runs` finished runs in an SQLite MLflow store; its tracking URI."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment(name)
    cells = list(itertools.product([1e-4, 3e-4, 1e-3, 3e-3], [1, 2, 3, 4, 5]))
    now = int(time.time() * 1000)
    for i in range(runs):
        (lr, depth), seed = cells[i % len(cells)], i // len(cells)
        run = client.create_run(experiment, start_time=now)
        params = [Param("lr", str(lr)), Param("depth", str(depth)), Param("seed", str(seed))]
        metrics = [Metric(name, 0.5 + lr * 10 + e / 100 + seed / 1e4, now, e) for e in range(1, epochs + 1)
                   for name in ("val_acc", "train_loss")]  # fmt: skip
        client.log_batch(run.info.run_id, metrics=metrics, params=params)
        client.set_terminated(run.info.run_id, "FINISHED", end_time=now + 1000)
    return uri


def make_table(folder: Path, rows: int, name: str = "runs.csv") -> Path:
    import numpy as np
    import pandas as pd

    cells = list(itertools.product(["resnet", "vit", "swin", "convnext"], [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]))
    rng = np.random.default_rng(0)
    index = np.arange(rows)
    frame = pd.DataFrame({"model": [cells[i % len(cells)][0] for i in index],
                          "lr": [cells[i % len(cells)][1] for i in index], "seed": index // len(cells),
                          "val_acc": rng.normal(0.8, 0.02, rows), "val_loss": rng.normal(0.5, 0.05, rows)})  # fmt: skip
    path = folder / name
    frame.to_csv(path, index=False)
    return path


def mlflow_floor(uri: str) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("bench").experiment_id
    listed, token = [], None
    while True:
        page = client.search_runs([experiment], max_results=10_000, page_token=token)
        listed += list(page)
        token = page.token
        if not token:
            break
    points = 0
    for r in listed:
        for name in r.data.metrics:
            points += len(client.get_metric_history(r.info.run_id, name))
    return points


def in_child(tree: Path, source: str, warm: str, store: Path, experiment: str = "") -> tuple[float, float]:
    """Wall and CPU seconds of one import in a child process running `tree`'s ablate (`CHILD`)."""
    out = subprocess.run([sys.executable, "-c", CHILD, source, warm, str(store), experiment], cwd=tree, check=True,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})  # fmt: skip
    wall, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(wall), float(cpu)


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", help="a commit whose import to time beside this checkout's (git archive)")
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trees = {"": ROOT}
        if args.baseline:
            trees["before"] = folder / "before"
            trees["before"].mkdir()
            archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(trees["before"])], input=archive.stdout, check=True)
        start = time.perf_counter()
        uri = make_mlflow(folder, args.runs, args.epochs)
        make_mlflow(folder, 20, args.epochs, "warm")
        table, warm = make_table(folder, args.rows), make_table(folder, 100, "warm.csv")
        print(
            f"made {args.runs:,} MLflow runs and {args.rows:,} rows in {time.perf_counter() - start:.0f} s", flush=True
        )
        count = iter(range(1_000_000))

        def fresh() -> Path:
            return folder / f"store{next(count)}.sqlite"

        sides: dict[str, Callable[[], tuple[float, float]]] = {
            "mlflow floor": lambda: timed(lambda: mlflow_floor(uri)),
            "table floor": lambda: timed(lambda: pd.read_csv(table)),
        }
        for label, tree in trees.items():
            sides[f"mlflow import {label}".strip()] = lambda t=tree: in_child(t, uri, uri, fresh(), "bench")
            sides[f"table import {label}".strip()] = lambda t=tree: in_child(t, str(table), str(warm), fresh())
        mlflow_floor(uri)  # warm-up: imports, MLflow's schema check, the page cache
        pd.read_csv(table)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for repeat in range(args.repeats):
            order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
            for name in order:
                results[name].append(sides[name]())
                print(f"  {name}: {results[name][-1][0]:.2f} s wall, {results[name][-1][1]:.2f} s CPU", flush=True)
    median = {n: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for n, r in results.items()}
    print(f"median of {args.repeats}, sides alternated" + (f"; before = {args.baseline}" if args.baseline else ""))
    for name, (wall, cpu) in median.items():
        print(f"{name:20s} {wall:8.2f} s wall {cpu:8.2f} s CPU")
    for what in ("mlflow", "table"):
        (iw, ic), (fw, fc) = median[f"{what} import"], median[f"{what} floor"]
        print(f"{what} import / floor: {iw / fw:.2f}x wall, {ic / fc:.2f}x CPU")
        if args.baseline:
            (bw, bc) = median[f"{what} import before"]
            print(f"{what} import after / before: {iw / bw:.2f} wall, {ic / bc:.2f} CPU (before / floor: "
                  f"{bw / fw:.2f}x wall, {bc / fc:.2f}x CPU)")  # fmt: skip


if __name__ == "__main__":
    main()
