"""Launch overhead of ablate vs Ray Tune, and parallel efficiency, in one run.

    .venv/bin/python bench/launch_overhead.py [--trials 64] [--work 2.0] [--repeats 3]

1. Overhead: --trials trials with the same body on both sides (`noop`: report one metric, return; it
   imports nothing, so neither side's workers import torch), each asking for 1 CPU, on 2 CPUs.
   - ablate: a whole launch as `ablate launch` runs it: plan the sweep file, open the results store
     (SQLite) and the MLflow Tracker (SQLite MLflow store + artifacts in a temp dir), `ablate.launch` at
     the CLI's poll interval (launch's default, 0.2 s; the CLI passes none), quiet progress, MLflow's closing
     left to a process of its own as the CLI leaves it (`RunConfig.detach`; waited for after the timed part).
   - Ray Tune: a whole Tune run: build a `Tuner` with a grid over the same configs, `fit()`. Tune writes
     its logs (its default JSON/CSV/TensorBoard result loggers and experiment state under its storage
     path in the temp dir; checked after the run) and waits on its own event loop (Tune's default).
   Prints the per-trial wall time of each and the ratio ablate/Tune (target: ablate <= 50 ms/trial,
   <= 1/20 of Tune's, issue 58).
2. Parallel efficiency: 8 equal CPU-bound trials (--work CPU seconds each) launched by ablate (as above)
   on 2 CPUs vs 1 CPU: efficiency = t(1) / (2 t(2)) (issue 58's mark: 0.95). Both sides get the same untimed
   warm-up on their fresh Ray (a launch of one 0.2 s busy trial per CPU, which starts one worker per
   CPU), so the ratio measures scaling rather than worker start-up. Two ways: Ray given 1 or 2 CPUs on the
   machine's cores (with 1 trial slot the launcher's and Ray's own processes run on an idle core, with 2 they take
   turns with the trials: what the launch does beside its trials lowers the figure, and making the 1-slot launch
   faster lowers it too), and `pinned`: this process and the Ray it starts held to 1 or 2 cores
   (`os.sched_setaffinity`), so each side's side work shares its cores, as parallel efficiency defines it.

How, for every ratio: wall clock around the whole unit of work, from outside. Every run starts on a
fresh local Ray (same `ray.init` for both sides, started before and shut down after the timed part); in
part 1 neither side gets a warm-up (no warm worker pool, no pre-imported worker modules: each pays its
own start-up, as a real launch does). The driver imports (mlflow, ray.tune) happen once, at import
time, before any timing. The order of the two sides alternates between repeats (ABAB, BABA, ...) and
the median of --repeats runs of each side is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import mlflow  # noqa: F401  (imported once here, not inside a timed run; a Tracker imports it)
import ray
import yaml
from ray import tune
from rich.console import Console

from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store
from ablate.tracking.tracker import Tracker
from ablate.training.messages import TrialResult

BASE = {"data": {"name": "digits"},
        "model": {"backbone": "vit", "embed_dim": 16, "depths": [1], "num_heads": [1], "patch_size": 2, "img_size": 8},
        "resources": {"cpus": 1}}  # fmt: skip
POLL = RunConfig().poll
"""The poll interval `ablate launch` uses (the CLI does not pass one)."""
AS_THE_CLI = {"detach": True} if "detach" in RunConfig.__dataclass_fields__ else {}
"""`ablate launch` leaves MLflow's closing to a process of its own (`RunConfig.detach`, where the tree has it)."""


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


def fresh_ray(cpus: int) -> None:
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=256 * 2**20)  # fmt: skip


def sweep_file(folder: Path, n: int, lr: float = 1e-3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "bench.yaml"
    grid = {"train.lr": [lr], "train.weight_decay": [round(0.001 * i, 6) for i in range(n)]}
    f.write_text(yaml.safe_dump({"sweeps": {"bench": {"base": BASE, "grid": grid, "seeds": 1}}}))
    return f


def run_ablate(folder: Path, n: int, runner: Callable = noop, lr: float = 1e-3, with_mlflow: bool = True) -> float:
    """What `ablate launch bench.yaml bench --plain` does, with the store and MLflow in `folder` (`with_mlflow=False`:
    `--no-mlflow`)."""
    f = sweep_file(folder, n, lr)
    t0 = time.perf_counter()
    p = plan(f, "bench")
    with Store(f"sqlite:///{folder}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{folder}/m.sqlite", str(folder / "art")) if with_mlflow else None
        res = launch([p], store, tracker, run=RunConfig(folder / "ck", runner=runner, poll=POLL, **AS_THE_CLI),
                     progress=Display(live=False, console=Console(quiet=True)))  # fmt: skip
    seconds = time.perf_counter() - t0
    for closing in getattr(res, "closings", []):  # untimed: MLflow's closing runs after `ablate launch` returns
        closing.wait()
    assert res.counts["done"] == n, res.counts
    return seconds


def run_tune(folder: Path, n: int) -> float:
    """A Tune run over the same grid, the same trial body, 1 CPU per trial, logs under `folder`."""

    def trainable(config):
        noop(None, lambda epoch, metrics: tune.report({"val_top1": metrics["val.top1"]}), None)

    t0 = time.perf_counter()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"weight_decay": tune.grid_search([round(0.001 * i, 6) for i in range(n)])},
        run_config=tune.RunConfig(storage_path=str(folder), name="bench", verbose=0),
    )
    results = tuner.fit()
    seconds = time.perf_counter() - t0
    assert len(results) == n and not results.errors
    logs = list(folder.glob("bench/*/result.json"))
    assert len(logs) == n, f"Tune wrote {len(logs)} result logs for {n} trials"
    return seconds


def alternate(
    sides: dict[str, tuple[int, Callable[[Path], float]]], repeats: int, root: Path, pinned: bool = False
) -> dict[str, float]:
    """Median seconds of each side (name: (Ray CPUs, run)) over `repeats`, each run on a fresh Ray, order ABAB/BABA;
    `pinned`: on as many cores as Ray has CPUs (`pin`)."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    cores = os.sched_getaffinity(0)
    for r in range(repeats):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            cpus, run = sides[name]
            if pinned:
                pin(cpus)
            fresh_ray(cpus)
            try:
                times[name].append(run(root / f"{name}-{r}"))
            finally:
                ray.shutdown()
                os.sched_setaffinity(0, cores)
    return {name: statistics.median(ts) for name, ts in times.items()}


def pin(cores: int) -> None:
    """Hold this process, and the Ray it starts next (its processes inherit it), to its first `cores` cores."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])


def scaled(folder: Path, work: float) -> float:
    """The efficiency part's timed launch: 8 trials of `work` CPU seconds, after the untimed warm-up."""
    cpus = int(ray.cluster_resources()["CPU"])
    run_ablate(folder / "warm", cpus, busy, lr=0.2)  # untimed: one worker started per CPU, alike on both sides
    return run_ablate(folder, 8, busy, lr=work)


def relaunch(folder: Path) -> float:
    """Seconds of `ablate launch` (a fresh process, as a person runs it) of the sweep `run_ablate` ran in `folder`:
    nothing to run."""
    cmd = [sys.executable, "-m", "ablate.cli", "launch", str(folder / "bench.yaml"), "bench", "--plain",
           "--db", f"sqlite:///{folder}/r.sqlite", "--mlflow-uri", f"sqlite:///{folder}/m.sqlite",
           "--storage", str(folder / "ck")]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""})
    seconds = time.perf_counter() - t0
    assert out.returncode == 0 and "nothing to run" in out.stdout, out.stdout + out.stderr
    return seconds


def once(what: str, n: int, work: float) -> None:
    """One timed unit on a fresh Ray, its seconds printed alone (what bench/launch_ab.py runs in each tree):
    `noop` (a launch of `n` no-op trials: its wall seconds, the CPU seconds of this process, every thread, in it,
    then `ablate launch` of the finished sweep), `loop` (the same without MLflow, on warm workers: the loop alone),
    `busy1` or `busy2` (the efficiency part on 1 or 2 CPUs), `pinned1` or `pinned2` (the same on 1 or 2 cores)."""
    with tempfile.TemporaryDirectory() as d:
        cpus = 1 if what in ("busy1", "pinned1") else 2
        if what.startswith("pinned"):
            pin(cpus)
        fresh_ray(cpus)
        if what == "loop":  # untimed: a worker per CPU started, as in the efficiency part
            run_ablate(Path(d) / "warm", 2, with_mlflow=False)
        cpu = time.process_time()
        try:
            if what in ("noop", "loop"):
                seconds = run_ablate(Path(d), n, with_mlflow=what == "noop")
            else:
                seconds = scaled(Path(d), work)
        finally:
            ray.shutdown()
        cpu = time.process_time() - cpu
        print(seconds, cpu, relaunch(Path(d)) if what == "noop" else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--work", type=float, default=2.0, help="CPU seconds per trial of the efficiency part")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side; the median is reported")
    units = ("noop", "loop", "busy1", "busy2", "pinned1", "pinned2")
    ap.add_argument("--once", choices=units, help="one unit alone (bench/launch_ab.py)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    n = args.trials
    if args.once:
        once(args.once, n, args.work)
        return
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        t = alternate(
            {"ablate": (2, lambda f: run_ablate(f, n)), "tune": (2, lambda f: run_tune(f, n))}, args.repeats, root
        )
        ms = lambda s: s / n * 1e3  # noqa: E731
        print(
            f"wall time per trial ({n} no-op trials, 2 CPUs, fresh Ray per run, median of {args.repeats}, "
            "order alternated):"
        )
        print(f"  ablate launch (store + MLflow, poll {POLL} s) {ms(t['ablate']):7.1f} ms")
        print(f"  Ray Tune Tuner.fit (with its logs)          {ms(t['tune']):7.1f} ms")
        print(f"  ratio ablate/Tune: {t['ablate'] / t['tune']:.3f} (issue 58's mark: <= 1/20 = 0.05)")

        work = partial(scaled, work=args.work)
        for pinned in (False, True):
            t = alternate({"1": (1, work), "2": (2, work)}, args.repeats, root / f"pinned-{pinned}", pinned)
            where = "1 vs 2 cores (pinned)" if pinned else f"1 vs 2 CPUs of Ray on {os.cpu_count()} cores"
            print(f"parallel efficiency, 8 trials x {args.work:.1f} CPU s, {where}, median of {args.repeats}: "
                  f"{t['1']:.1f} s and {t['2']:.1f} s, efficiency {t['1'] / (2 * t['2']):.2f} (mark 0.95)")  # fmt: skip


if __name__ == "__main__":
    main()
