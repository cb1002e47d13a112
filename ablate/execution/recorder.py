"""The one writer: turns trial messages into store rows (and MLflow records, through the mirror).

Trials never touch the SQLite file. Wherever they run, their tasks stream messages to the launching process
(`ablate.execution.streams`), which takes them as they come and hands each batch to `Recorder.record` with the
outcomes of the trials that returned meanwhile, which writes the store (one transaction for all of them, a wave of
trials: their starts, epochs and results commit together or, the store refusing, go to the journal together) and
marks the trials for the MLflow mirror. Every write is idempotent (upserts on trial, metric, step), so a message sent
twice (a resumed trial replays its epoch history) never duplicates a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ablate.execution import journal
from ablate.execution.journal import Record, Stopped
from ablate.store import MetricRow, Store
from ablate.store.faults import StoreUnavailable
from ablate.tracking.mirror import SETTLE, Mirror
from ablate.training.messages import EpochEnd, Finished, Message, Started


@dataclass
class Recorder:
    """Writes what trials report to the store, then tells the MLflow mirror (if any) which trials changed:
    recording never waits on MLflow (see `ablate.tracking.mirror`). With a `journal`, records the store refuses (disk
    full, database server down) go to that file instead, and to the store, first, once it takes writes again; the
    next launch replays what is left when the launch ends without the store (`ablate.execution.journal`)."""

    store: Store
    mirror: Mirror | None = None
    journal: Path | None = None
    failure: StoreUnavailable | None = None
    """The store's error while it refuses writes (records are journaled meanwhile); None once it takes them."""
    _waiting: list[Record] = field(default_factory=list)
    """What the journal holds (kept here too: it is written again whole as the store takes more records)."""

    def handle(self, messages: list[Message]) -> None:
        self.record(messages)

    def record(self, messages: list[Message], outcomes: list[Finished] | None = None) -> None:
        """Trials' messages, then the outcomes of trials whose tasks returned (their messages are among these or
        earlier ones), in one transaction; MLflow follows."""
        self._write([*(m for m in messages if isinstance(m, (Started, EpochEnd))), *(outcomes or [])])

    def interrupt(self, keys: list[str], state: str = "interrupted") -> None:
        """Trials stopped by the launcher mid-run (`interrupted` by Ctrl-C, `preempted` by SIGTERM)."""
        self._write([Stopped(keys, state)])

    def replay(self, storage: Path) -> int:
        """Write every journal under `storage` to the store, then remove it; returns the records replayed.
        Store errors propagate: a launch does not start on a store that refuses its journal."""
        n = 0
        for path in journal.journals(storage):
            records = journal.read(path)
            self._apply(records)
            path.unlink()
            n += len(records)
        return n

    def _write(self, records: list[Record]) -> None:
        """Write `records` after what waits in the journal (while the store refuses writes this is tried at every
        call, with no new records too, so the journal reaches the store as soon as it answers): the store sees
        every record in the order the trials sent them, and a start journaled earlier never reopens the trial its
        later result closed. They are one transaction: what the store refuses, all of them, waits in the journal."""
        pending = self._waiting + records
        if not pending:
            return
        try:
            self._apply(pending)
        except StoreUnavailable as e:
            if self.journal is None:
                raise
            if records:  # else the journal holds exactly these already
                self._waiting = pending
                journal.write(self.journal, self._waiting)
            self.failure = e
            return
        if self._waiting and self.journal is not None:
            self._waiting = []
            self.journal.unlink()
        self.failure = None

    @property
    def journaled(self) -> int:
        """Records waiting in the journal."""
        return len(self._waiting)

    def _apply(self, records: list[Record]) -> None:
        """The store writes of `records`, in order, in one transaction (`Store.batch`: all or none; metric rows of
        consecutive epochs in one statement). A trial done in the store is final: a record of another attempt (a
        journal of a launch that lost the trial to another launcher while the store was down, replayed afterwards)
        is skipped, never reopening or rewriting its result."""
        rows: list[MetricRow] = []
        done = self.store.done_keys({k for r in records for k in _keys(r)})
        with self.store.batch():
            for r in records:
                if not isinstance(r, Stopped) and r.key in done:
                    continue
                if isinstance(r, EpochEnd):
                    rows += [(r.key, name, r.epoch, float(value), r.wall) for name, value in r.metrics.items()]
                    if r.checkpoint is not None:  # the epoch's metrics, then the checkpoint that holds them
                        self.store.log_metric_rows(rows)
                        rows = []
                        self.store.set_checkpoint(r.key, r.checkpoint)
                    continue
                if rows:
                    self.store.log_metric_rows(rows)
                    rows = []
                if isinstance(r, Started):
                    self.store.mark_running(
                        r.key, host=r.host or None, node_id=r.node_id or None, device=r.device or None
                    )
                elif isinstance(r, Finished):
                    self.store.finish(r.key, r.state, **r.fields())
                else:
                    self.store.interrupt(r.keys, r.state)
            if rows:
                self.store.log_metric_rows(rows)
        if self.mirror is not None:
            ended = dict.fromkeys(k for r in records if isinstance(r, (Finished, Stopped)) for k in _keys(r))
            self.mirror.notify(ended)  # in the order recorded: the mirror takes trials due together in that order
            self.mirror.notify([k for r in records for k in _keys(r) if k not in ended], settle=SETTLE)


def _keys(record: Record) -> list[str]:
    """The trials a record is about (a stop names several)."""
    return record.keys if isinstance(record, Stopped) else [record.key]
