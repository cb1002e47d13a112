"""A store filled as if a plan had run, with results chosen by the caller: reports are tested and
benchmarked on stores whose true values and effects are known, through the same write API the launcher uses.

    fill(store, plan, value=lambda t: 70 + 2 * t.axes["attention.tau"] + noise(t.axes["seed"]), epochs=5)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import update

from ablate.planning.keys import Trial
from ablate.planning.plan import Plan
from ablate.store import MetricRow, Owner, Store
from ablate.store.queries import TRIALS

#: Per-epoch metrics a classification trial records (the names `trial.run_trial` reports).
EPOCH_METRICS = ("train.loss", "val.loss", "val.top1", "val.top5", "lr", "samples_per_s", "epoch_s", "peak_mem_mb")
DIAGNOSTICS = ("diag.entropy", "diag.gini", "diag.winner_transfer")
BATCH = 200_000
SWITCHES = {
    "attention.tau": [False, True],
    "attention.mu": [False, True],
    "attention.kappa_priv": [False, True],
    "attention.bounded": [False, True],
    "attention.kappa_pub": ["off", "unit"],
    "model.stack": ["pure", "alternating"],
    "train.lr": [0.001, 0.002],
    "model.mlp_ratio": [2, 4],
}
"""Two-level axes of a tiny CSaN ViT, each at its reference level first: the designs' tests take their grids from
these (`switches`)."""


def switches(k: int) -> dict[str, list[object]]:
    """The first `k` of `SWITCHES`, a grid of k two-level axes."""
    return dict(list(SWITCHES.items())[:k])


def _epoch(name: str, final: float, e: int, epochs: int, seed: int) -> float:
    """A plausible curve that ends at `final` for the metric's validation twin: exponential approach."""
    p = 1 - math.exp(-4 * e / epochs)
    wiggle = 0.02 * math.sin(1.7 * e + seed)
    curves = {
        "train.loss": 2.3 * (1 - p) + 0.3 + wiggle, "val.loss": 2.3 * (1 - p) + 0.4 + wiggle,
        "val.top5": min(100.0, final * p + 20), "lr": 1e-3 * 0.5 * (1 + math.cos(math.pi * e / epochs)),
        "samples_per_s": 900 + 10 * math.sin(e + seed), "epoch_s": 5.5 + 0.1 * math.cos(e), "peak_mem_mb": 512.0,
        "diag.entropy": 3.0 - 1.5 * p, "diag.gini": 0.2 + 0.3 * p, "diag.winner_transfer": 0.5 * (1 - p),
    }  # fmt: skip
    return curves.get(name, final * p + wiggle)


def fill(
    store: Store,
    plan: Plan,
    value: Callable[[Trial], float],
    *,
    state: Callable[[Trial], str] = lambda t: "done",
    cost: Callable[[Trial], tuple[int, int]] = lambda t: (1_000_000, 2_000_000_000),
    epochs: int = 0,
    names: tuple[str, ...] = EPOCH_METRICS,
    device: Callable[[Trial], str] = lambda t: "cpu",
) -> None:
    """Record `plan` in `store`: each trial ends in `state(t)` (done | failed | diverged | running |
    pending) with final `{plan.metric: value(t)}` when done, `cost(t)` = (params, flops), and `epochs`
    epochs of `names` (the metric's validation twin ends at the final value) for trials that started, on
    `device(t)` (the text `ablate.training.devices.describe` writes)."""
    store.upsert_sweep(plan.sweep, spec_path=plan.file, metric=plan.metric, baseline=plan.baseline,
                       description=plan.description, spec=plan.recorded_spec())  # fmt: skip
    store.add_trials(plan.sweep, plan.trials)
    twin = "val." + plan.metric.split(".", 1)[-1]
    rows: list[MetricRow] = []
    for t in plan.trials:
        s = state(t)
        if s == "pending":
            continue
        final = value(t)
        params, flops = cost(t)
        store.mark_running(t.key, host="synthetic", device=device(t))
        ran = epochs if s in ("done", "running") else epochs // 2
        rows += [(t.key, n, e, _epoch(n, final, e, epochs, t.config.seed), None)
                 for e in range(1, ran + 1) for n in dict.fromkeys((*names, twin))]  # fmt: skip
        if s == "done":
            store.finish(t.key, "done", result={plan.metric: final}, params=params, flops=flops)
        elif s == "failed":
            store.finish(t.key, "failed", error="RuntimeError: synthetic failure", params=params, flops=flops)
        elif s == "diverged":
            store.finish(t.key, "diverged", diverged_epoch=ran + 1, diverged_step=3, params=params, flops=flops)
        if len(rows) >= BATCH:
            store.log_metric_rows(rows)
            rows = []
    if rows:
        store.log_metric_rows(rows)


def failed_elsewhere(store: Store, key: str, finished_at: datetime) -> None:
    """Another launcher claims `key`, runs it and records it failed, stamped `finished_at` (its clock)."""
    other = Owner.new(60)
    assert store.claim([key], other) == {key}
    store.mark_running(key)
    store.finish(key, "failed", error="RuntimeError: elsewhere")
    store.release(other)
    with store.engine.begin() as conn:
        conn.execute(update(TRIALS).where(TRIALS.c.key == key).values(finished_at=finished_at))
