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

from ablate.messages import EpochEnd, Finished, Message, Started
from ablate.store import MetricRow, Store
from ablate.tracking import Tracker


class Inbox:
    """Where trials drop messages; the launcher drains it. Calls from one trial arrive in order."""

    def __init__(self) -> None:
        self.items: list[Message] = []

    def put(self, item: Message) -> None:
        self.items.append(item)

    def drain(self) -> list[Message]:
        items, self.items = self.items, []
        return items


def start_inbox() -> Any:
    """An Inbox actor for one launch, on the launcher's own node (a worker node that dies, say a reclaimed spot
    instance, must not take undrained messages with it); restarted by Ray if its worker dies, calls retried."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    actor: Any = ray.remote(Inbox)
    return actor.options(num_cpus=0, max_restarts=-1, max_task_retries=-1, scheduling_strategy=here).remote()


@dataclass
class Recorder:
    """Writes what trials report. `sweep_of` says which sweep's MLflow experiment a trial's run lives in."""

    store: Store
    tracker: Tracker | None
    sweep_of: dict[str, str]
    runs: dict[str, str] = field(default_factory=dict)
    latest: dict[str, int] = field(default_factory=dict)
    """Last epoch per trial: the step of its MLflow run's final metrics."""

    def handle(self, messages: list[Message]) -> None:
        rows: list[MetricRow] = []
        for m in messages:
            if isinstance(m, Started):
                self.store.mark_running(m.key, host=m.host, node_id=m.node_id, device=m.device)
                if self.tracker is not None and m.key not in self.runs:
                    self.runs[m.key] = self.tracker.start_trial(self.store, self.sweep_of[m.key], m.key)
            elif isinstance(m, EpochEnd):
                rows += [(m.key, name, m.epoch, float(value), m.wall) for name, value in m.metrics.items()]
                self.latest[m.key] = max(m.epoch, self.latest.get(m.key, 0))
        if rows:
            self.store.log_metric_rows(rows)
            if self.tracker is not None:
                by_run: dict[str, list[tuple[str, int, float, float | None]]] = {}
                for key, name, step, value, wall in rows:
                    if key in self.runs:
                        by_run.setdefault(self.runs[key], []).append((name, step, value, wall))
                for run_id, run_rows in by_run.items():
                    self.tracker.log_metric_rows(run_id, run_rows)

    def finish(self, done: Finished) -> None:
        """A trial's outcome: store first (the source of truth), then its MLflow run."""
        self.store.finish(done.key, done.state, **done.fields())
        run = self.runs.pop(done.key, None)
        if self.tracker is not None and run is not None:
            self.tracker.end_trial(run, done.state, result=done.result, error=done.traceback,
                                   step=self.latest.get(done.key, 0))  # fmt: skip

    def interrupt(self, keys: list[str], state: str = "interrupted") -> None:
        """Trials stopped by the launcher mid-run (`interrupted` by Ctrl-C, `preempted` by SIGTERM)."""
        self.store.interrupt(keys, state)
        for key in keys:
            run = self.runs.pop(key, None)
            if self.tracker is not None and run is not None:
                self.tracker.end_trial(run, state)
