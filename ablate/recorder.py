"""The one writer: turns trial messages into store rows (and MLflow records, through the mirror).

Trials never touch the SQLite file. Wherever they run, they send messages to an `Inbox` actor; the
launching process drains it and hands each batch to `Recorder.handle`, which writes the store (one
transaction for all metric rows of a batch) and marks the trials for the MLflow mirror. Every write is
idempotent (upserts on trial, metric, step), so a message sent twice (a resumed trial replays its epoch
history) never duplicates a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from ablate.messages import EpochEnd, Finished, Message, Started
from ablate.mirror import Mirror
from ablate.store import MetricRow, Store


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
    """Writes what trials report to the store, then tells the MLflow mirror (if any) which trials changed:
    recording never waits on MLflow (see `ablate.mirror`)."""

    store: Store
    mirror: Mirror | None = None

    def handle(self, messages: list[Message]) -> None:
        rows: list[MetricRow] = []
        for m in messages:
            if isinstance(m, Started):
                self.store.mark_running(m.key, host=m.host, node_id=m.node_id, device=m.device)
            elif isinstance(m, EpochEnd):
                rows += [(m.key, name, m.epoch, float(value), m.wall) for name, value in m.metrics.items()]
        if rows:
            self.store.log_metric_rows(rows)
        self._changed([m.key for m in messages])

    def finish(self, done: Finished) -> None:
        """A trial's outcome, in the store (the source of truth); MLflow follows."""
        self.store.finish(done.key, done.state, **done.fields())
        self._changed([done.key])

    def interrupt(self, keys: list[str], state: str = "interrupted") -> None:
        """Trials stopped by the launcher mid-run (`interrupted` by Ctrl-C, `preempted` by SIGTERM)."""
        self.store.interrupt(keys, state)
        self._changed(keys)

    def _changed(self, keys: list[str]) -> None:
        if self.mirror is not None and keys:
            self.mirror.notify(keys)
