"""The one writer: turns trial messages into store rows and MLflow records.

Trials never touch the SQLite file. Wherever they run, they send messages to an `Inbox` actor; the
launching process drains it and hands each batch to `Recorder.handle`, which writes the store (one
transaction for all metric rows of a batch) and then MLflow. Every write is idempotent (upserts on trial,
metric, step), so a message sent twice (a resumed trial replays its epoch history) never duplicates a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from ablate.store import Store
from ablate.tracking import Tracker


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Inbox:
    """Where trials drop messages; the launcher drains it. Calls from one trial arrive in order."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def put(self, item: tuple) -> None:
        self.items.append(item)

    def drain(self) -> list[tuple]:
        items, self.items = self.items, []
        return items


@dataclass
class Recorder:
    """Writes what trials report. `sweep_of` says which sweep's MLflow experiment a trial's run lives in."""

    store: Store
    tracker: Tracker | None
    sweep_of: dict[str, str]
    runs: dict[str, str] = field(default_factory=dict)
    latest: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    """Last epoch and metrics per trial, for progress displays."""

    def handle(self, messages: list[tuple]) -> None:
        rows: list[tuple[str, str, int, float, float | None]] = []
        for kind, key, *body in messages:
            if kind == "start":
                info = body[0]
                self.store.mark_running(key, host=info.get("host"), node_id=info.get("node_id"), device=info.get("device"))
                if self.tracker is not None and key not in self.runs:
                    self.runs[key] = self.tracker.start_trial(self.store, self.sweep_of[key], key)
            elif kind == "epoch":
                epoch, metrics, wall = body
                rows += [(key, name, epoch, float(value), wall) for name, value in metrics.items()]
                if epoch >= self.latest.get(key, (0, {}))[0]:
                    self.latest[key] = (epoch, metrics)
            elif kind == "info":
                self.store.record(key, **body[0])
        if rows:
            self.store.log_metric_rows(rows)
            if self.tracker is not None:
                by_run: dict[str, list] = {}
                for key, name, step, value, wall in rows:
                    if key in self.runs:
                        by_run.setdefault(self.runs[key], []).append((name, step, value, wall))
                for run_id, run_rows in by_run.items():
                    self.tracker.log_metric_rows(run_id, run_rows)

    def finish(self, key: str, state: str, **fields: Any) -> None:
        """A trial's outcome: store first (the source of truth), then its MLflow run."""
        self.store.finish(key, state, **fields)
        run = self.runs.pop(key, None)
        if self.tracker is not None and run is not None:
            step = self.latest.get(key, (0, {}))[0]
            self.tracker.end_trial(run, state, result=fields.get("result"), error=fields.get("traceback"), step=step)

    def interrupt(self, keys: list[str]) -> None:
        self.store.interrupt(keys)
        for key in keys:
            run = self.runs.pop(key, None)
            if self.tracker is not None and run is not None:
                self.tracker.client.set_terminated(run, "KILLED")
