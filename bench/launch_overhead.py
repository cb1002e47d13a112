"""Launch overhead of ablate vs Ray Tune, and parallel efficiency, in one run.

    .venv/bin/python bench/launch_overhead.py [--trials 64] [--work 2.0]

1. Overhead: 64 trials whose body does almost nothing, through `ablate.launch` (real store, real MLflow,
   real Ray) and through Ray Tune (`Tuner` with a grid over the same 64 configs), both on one running Ray.
   Prints the per-trial overhead of each and the ratio (target: ablate <= 50 ms/trial, <= 1/5 of Tune's).
2. Parallel efficiency: 8 equal CPU-bound trials with 2 workers vs 1 (target >= 0.9).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import ray
import yaml
from rich.console import Console

from ablate.launcher import launch
from ablate.planner import plan
from ablate.progress import Progress
from ablate.store import Store
from ablate.trial import TrialResult
from ablate.tracking import Tracker

BASE = {"data": {"name": "digits"}, "model": {"backbone": "vit", "embed_dim": 16, "depths": [1], "num_heads": [1], "patch_size": 2, "img_size": 8}}


def noop(cfg, report, checkpoint_dir) -> TrialResult:
    report(1, {"val.top1": 1.0})
    return TrialResult("done", 1, {"test.top1": 1.0})


def busy(cfg, report, checkpoint_dir) -> TrialResult:
    """A fixed amount of single-threaded CPU work (`train.lr` seconds' worth on an idle core)."""
    import numpy as np

    a = np.random.default_rng(0).random((200, 200))
    end = time.process_time() + cfg.train.lr
    while time.process_time() < end:
        a = a @ a / a.sum()
    report(1, {"val.top1": 1.0})
    return TrialResult("done", 1, {"test.top1": 1.0})


def sweep_file(folder: Path, n: int, lr: float = 1e-3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "bench.yaml"
    grid = {"train.lr": [lr], "train.weight_decay": [round(0.001 * i, 6) for i in range(n)]}
    f.write_text(yaml.safe_dump({"sweeps": {"bench": {"base": BASE, "grid": grid, "seeds": 1}}}))
    return f


def time_ablate(folder: Path, n: int, runner, mlflow: bool, lr: float = 1e-3) -> float:
    p = plan(sweep_file(folder, n, lr), "bench")
    with Store(f"sqlite:///{folder}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{folder}/m.sqlite", str(folder / "art")) if mlflow else None
        t0 = time.perf_counter()
        res = launch([p], store=store, tracker=tracker, storage=folder / "ck", runner=runner,
                     progress=Progress(live=False, console=Console(quiet=True)), poll=0.05)  # fmt: skip
        seconds = time.perf_counter() - t0
    assert res.counts["done"] == n, res.counts
    return seconds


def time_tune(folder: Path, n: int) -> float:
    from ray import tune

    def trainable(config):
        tune.report({"val_top1": 1.0})

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"weight_decay": tune.grid_search([0.001 * i for i in range(n)])},
        run_config=tune.RunConfig(storage_path=str(folder / "tune"), verbose=0),
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    seconds = time.perf_counter() - t0
    assert len(results) == n and not results.errors
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--work", type=float, default=2.0, help="CPU seconds per trial of the efficiency part")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    n = args.trials
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        time_ablate(root / "warm", 4, noop, mlflow=False)  # warm the worker pool for both
        t_store = time_ablate(root / "a", n, noop, mlflow=False)
        t_full = time_ablate(root / "b", n, noop, mlflow=True)
        t_tune = time_tune(root / "t", n)
        ray.shutdown()
        ms = lambda t: t / n * 1e3  # noqa: E731
        print(f"overhead per trial ({n} trials, 2 CPUs):")
        print(f"  ablate (store)          {ms(t_store):7.1f} ms")
        print(f"  ablate (store + MLflow) {ms(t_full):7.1f} ms")
        print(f"  Ray Tune Tuner          {ms(t_tune):7.1f} ms")
        print(f"  ratio ablate/Tune: {t_store / t_tune:.3f} (store), {t_full / t_tune:.3f} (store + MLflow)")

        times = {}
        for workers in (1, 2):
            ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
            time_ablate(root / f"w{workers}warm", workers, noop, mlflow=False)
            times[workers] = time_ablate(root / f"w{workers}", 8, busy, mlflow=False, lr=args.work)
            ray.shutdown()
        eff = times[1] / (2 * times[2])
        print(f"parallel efficiency, 8 trials x {args.work:.1f} CPU s: 1 worker {times[1]:.1f} s, "
              f"2 workers {times[2]:.1f} s, efficiency {eff:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
