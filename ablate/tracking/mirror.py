"""MLflow as a best-effort mirror of the store: recording never waits on MLflow, and nothing waits for it.

The store is the source of truth. The recorder writes the store, then only marks the trials it touched as
dirty here; a thread of the mirror's own brings each dirty trial's MLflow run in step with the store: the
run (created or reused), the metric points past the last step mirrored, and, once the trial has ended, its
final result and status. The store keeps per trial what MLflow already has (`mlflow_step`,
`mlflow_state`), so a resumed trial that replays its epoch history never sends a point twice, and a trial
the mirror could not reach MLflow for is still dirty in the store: `ablate sync`, and every later launch,
bring it over (`sync`). When MLflow is down the mirror says so once, backs off (1 s doubling to 30 s) and
tries again; the launch goes on and ends without waiting for it. A sweep whose report cannot be written
(a run is named by its variant's label there) is said to be that, once, never as MLflow failing.

A trial `ablate import` read from an MLflow run in the tracking store the mirror writes to has its run there
already: it is linked to that run (the store keeps its id), never copied into the experiment it came from
(`imported_here`). Imported trials from a table or another tracking store are mirrored as any trial.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from ablate.store import Store, sqlite_file
from ablate.store.faults import StoreUnavailable
from ablate.store.schema import TrialRecord
from ablate.tracking.tracker import Tracker

BACKOFF = (1.0, 30.0)
"""First and longest wait after MLflow failed (seconds); the wait doubles in between."""
SETTLE = 5.0
"""Seconds a running trial's changes (its start, its epochs' points) wait before the mirror sends them: a trial that
ends within them gets its run made and ended in one sync, one that runs on sends its points at most every SETTLE s.
A trial's end is sent at once. Each sync costs the launching process CPU, which trials sharing its cores lose: in a
launch of 8 trials of 2 CPU seconds on 2 cores the mirror thread took 0.31 s of CPU with one sync a trial, and twice
the syncs before (bench/README.md, "The inbox and the mirror")."""


@dataclass(frozen=True)
class Synced:
    """What a `sync` sent to MLflow."""

    trials: int
    points: int
    summaries: int = 0
    """Sweeps whose parent run got a new summary (`Tracker.summarise`)."""


class ReportFailed(RuntimeError):
    """Writing a sweep's report for MLflow failed outside MLflow (a bug in ablate or a plugin, the store, this
    machine's disk). The report names the sweep's trial runs and makes its summary, so those wait; waiting for
    MLflow mends nothing. `errors`: the first error per sweep; from `sync`, `synced` is what did reach MLflow
    and `left` the trials still behind."""

    def __init__(self, errors: dict[str, Exception], synced: Synced | None = None, left: int = 0) -> None:
        self.errors, self.synced, self.left = errors, synced, left
        said = "; ".join(f"{type(e).__name__}: {str(e)[:300]}" for e in errors.values())
        super().__init__(f"writing the report of sweep {', '.join(map(repr, errors))} for MLflow failed ({said})")


def from_mlflow(error: BaseException) -> bool:
    """Whether `error` came out of MLflow's client (raised in, or passed up through, the mlflow package), as
    MLflow down or failing does; not what ablate does between its calls (the store, a sweep's report)."""
    tb = error.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0] == "mlflow":
            return True
        tb = tb.tb_next
    return False


@contextmanager
def _report_of(sweep: str) -> Iterator[None]:
    """Around a tracker call that writes `sweep`'s report: an error neither out of MLflow nor the store's is
    the report's, raised as ReportFailed."""
    try:
        yield
    except Exception as e:
        if from_mlflow(e) or isinstance(e, StoreUnavailable):
            raise
        raise ReportFailed({sweep: e}) from e


def sync_trial(store: Store, tracker: Tracker, key: str) -> int:
    """Bring the trial's MLflow run in step with the store; returns the metric points sent (0: in step)."""
    trial = store.trial(key)
    sweeps = store.sweeps_of(key)
    if trial is None or not sweeps or trial.state == "pending":
        return 0
    rows = store.metric_rows(key, after=trial.mlflow_step or 0)
    if not rows and trial.mlflow_state == trial.state:
        return 0
    if (origin := imported_here(trial, tracker)) is not None:  # its run is there: a copy would be a duplicate
        if trial.mlflow_run_id is None:
            store.keep_mlflow_run(key, origin, None)
        store.set_mirrored(key, max([trial.mlflow_step or 0, *(step for _, step, _, _ in rows)]), trial.state)
        return 0
    home = max(sweeps, key=lambda s: _launched(store, s)) if trial.mlflow_run_id is None else sweeps[0]
    with _report_of(home):  # the run's name is its variant's label in the report
        run = tracker.start_trial(store, home, key, running=False)
    tracker.log_metric_rows(run, [(name, step, value, wall) for name, step, value, wall in rows])
    step = max([trial.mlflow_step or 0, *(step for _, step, _, _ in rows)])
    if shown := _show(store, tracker, run, key, trial.mlflow_state, step):
        store.set_mirrored(key, step, shown)
    return len(rows)


def imported_here(trial: TrialRecord, tracker: Tracker) -> str | None:
    """The MLflow run `trial` was imported from (`ablate import`), where that run is in the tracking store `tracker`
    writes to: the trial's run then, never copied (a copy would duplicate it in the experiment it came from). None
    for a trial ablate trained, or imported from a table or another tracking store: mirrored as any trial."""
    source = trial.source or {}
    if source.get("kind") != "mlflow" or not source.get("run_id"):
        return None
    return str(source["run_id"]) if _store_of(str(source.get("uri"))) == _store_of(tracker.uri) else None


def _store_of(uri: str) -> str:
    """A tracking URI in one spelling: a SQLite file's resolved path, or the URI without a trailing slash."""
    db = sqlite_file(uri)
    return str(db.resolve()) if db is not None else uri.rstrip("/")


def _show(store: Store, tracker: Tracker, run: str, key: str, shown: str | None, step: int) -> str | None:
    """Set the run's status to the trial's state as the store has it now, then read the state again, and
    again after each change: the launchers sharing a store mirror each other's trials, and a status written
    from a read that another launcher's mirror (or the recorder) has since overtaken (RUNNING over FINISHED)
    is then written over, by the writer that read it stale. Returns the state MLflow shows (`shown`: what the
    store says it showed before, so an unchanged state costs no write; None: not known)."""
    while (now := store.trial(key)) is not None and now.state != shown and now.state != "pending":
        tracker.show(run, now, step)
        shown = now.state
    return shown


def _launched(store: Store, sweep: str) -> str:
    """When the sweep was last planned or launched, as ISO text: a trial several sweeps share gets its run in
    the experiment of the one launched last, the one that runs it."""
    record = store.sweep(sweep)
    return record.updated_at.isoformat() if record is not None else ""


def sync(store: Store, tracker: Tracker, sweeps: Iterable[str] | None = None) -> Synced:
    """Mirror every trial (of `sweeps`, or all) that MLflow lags behind on, then bring each sweep's summary on
    its parent run up to date (`Tracker.summarise`), now, in this thread. A sweep whose report cannot be
    written holds up no other (its own trials wait, untried after the first failure): ReportFailed names it
    at the end. An error out of MLflow or the store stops the sync at once."""
    names = list(sweeps) if sweeps is not None else list(store.sweeps_frame()["name"])
    keys = store.unmirrored(names)
    failed: dict[str, Exception] = {}
    points = left = summaries = 0
    for key in keys:
        if failed and set(store.sweeps_of(key)) <= failed.keys():  # its report would fail again
            left += 1
            continue
        try:
            points += sync_trial(store, tracker, key)
        except ReportFailed as e:
            failed = {**e.errors, **failed}
            left += 1
    for name in (n for n in names if n not in failed):
        try:
            with _report_of(name):
                summaries += tracker.summarise(store, name)
        except ReportFailed as e:
            failed.update(e.errors)
    synced = Synced(len(keys) - left, points, summaries)
    if failed:
        raise ReportFailed(failed, synced, left) from next(iter(failed.values()))
    return synced


class Mirror:
    """The background mirror of one launch (see the module docstring). `warn` hears, once, that MLflow is
    unreachable."""

    def __init__(self, store: Store, tracker: Tracker, warn: Callable[[str], None]) -> None:
        self.store, self.tracker, self.warn = store, tracker, warn
        self.dirty: dict[str, float] = {}
        """Trials to sync, each with when it is due (`time.monotonic()`; `SETTLE`)."""
        self.down: str | None = None
        """Why MLflow failed last, while it is failing."""
        self.warned = False
        self.unreported: set[str] = set()
        """Trials whose sweep's report failed (ReportFailed): said once, left to `ablate sync`."""
        self._wake = threading.Condition()
        self._closing = False
        self._busy = False
        self._preparing = False
        """The thread has the report's modules to import (`prepare`), or imports them: no call of MLflow's to finish."""
        self._flushing = False
        """Every dirty trial is due now (`close`: catching up at the launch's end)."""
        self._thread = threading.Thread(target=self._run, name="ablate-mlflow-mirror", daemon=True)

    def start(self, backlog: Iterable[str] = (), trials: bool = False) -> Mirror:
        """Start the thread, with `backlog`: trials an earlier launch left unmirrored. `trials`: the launch has
        trials to run, whose runs MLflow names by the sweep's report (`Tracker.run_name`): the thread imports the
        report's modules first, while Ray's workers start, rather than once the first trial has ended (1.8 s of the
        launching process, which the launch's end then waited on)."""
        self._preparing = trials
        self.notify(backlog)
        self._thread.start()
        return self

    def notify(self, keys: Iterable[str], settle: float = 0.0) -> None:
        """These trials changed in the store, to be synced within `settle` seconds (`SETTLE` for a trial that runs
        on; an earlier due time stands); returns at once."""
        with self._wake:
            due = time.monotonic() + settle
            for key in keys:
                self.dirty[key] = min(self.dirty.get(key, due), due)
            self._wake.notify()

    def close(self, timeout: float) -> int:
        """Give the mirror up to `timeout` seconds to catch up (none while MLflow is down); return how many
        trials are still unmirrored (they stay dirty in the store for `ablate sync`)."""
        end = time.monotonic() + timeout
        with self._wake:
            self._flushing = True
            self._wake.notify()
            while (self.dirty or self._busy) and self.down is None and time.monotonic() < end:
                self._wake.wait(min(0.1, max(0.0, end - time.monotonic())))
            self._closing = True
            self._wake.notify()
            left = len(self.unreported.union(self.dirty)) + self._busy
        return left

    def stop(self) -> bool:
        """Stop the thread once the trial it is mirroring is in MLflow (or MLflow failed it), without catching up
        with the rest, which stays unmirrored in the store; returns whether MLflow answered its last call (False
        while it is down or failing)."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
            preparing = self._preparing  # it returns once its imports are done, having sent nothing
        if self._thread.is_alive() and not preparing:
            self._thread.join()
        return self.down is None

    def _run(self) -> None:
        if self._preparing:
            prepare()
            with self._wake:
                self._preparing = False
        wait = BACKOFF[0]
        while True:
            with self._wake:
                while not self._closing and (key := self._due()) is None:
                    self._wake.wait(min(self.dirty.values()) - time.monotonic() if self.dirty else None)
                if self._closing or key is None:
                    return
                del self.dirty[key]
                self._busy = True  # a change during the sync marks it dirty again
            try:
                sync_trial(self.store, self.tracker, key)
            except ReportFailed as e:  # not MLflow: retrying mends nothing; the store keeps the trial dirty
                with self._wake:
                    if not self.unreported:
                        self.warn(f"{e}; MLflow is not at fault: the sweep goes on, the store keeps everything, "
                                  f"`ablate report {next(iter(e.errors))}` shows the error and `ablate sync` "
                                  "updates MLflow once it is mended")  # fmt: skip
                    self.unreported.add(key)
                    self._busy = False
                    self._wake.notify_all()
                continue
            except Exception as e:  # MLflow unreachable or failing: the store keeps the trial dirty
                with self._wake:
                    self.dirty[key] = min(self.dirty.get(key, 0.0), 0.0)  # first in line once MLflow answers
                    self._failed(f"{type(e).__name__}: {e}")
                    self._busy = False
                    self._wake.notify_all()
                with self._wake:  # a close (`stop`) ends the wait
                    self._wake.wait_for(lambda: self._closing, wait)
                wait = min(wait * 2, BACKOFF[1])
                continue
            wait, self.down = BACKOFF[0], None
            with self._wake:
                self.unreported.discard(key)
                self._busy = False
                self._wake.notify_all()

    def _due(self) -> str | None:
        """The dirty trial due first, if it is due (all are while `_flushing`); called holding `_wake`."""
        if not self.dirty:
            return None
        key = min(self.dirty, key=self.dirty.__getitem__)
        return key if self._flushing or self.dirty[key] <= time.monotonic() else None

    def _failed(self, why: str) -> None:
        self.down = why
        if not self.warned:
            self.warned = True
            first = why.splitlines()[0][:200]
            self.warn(f"MLflow at {self.tracker.uri} is failing ({first}); the sweep goes on, the store keeps "
                      "everything, and `ablate sync` (or the next launch) updates MLflow")  # fmt: skip


NICE = 10
"""The nice value of the closing process: MLflow's catching up after `ablate launch` has returned runs on what the
next trials (a launcher's beside it, the user's next) leave idle. The mirror's thread, while its own launch runs,
keeps the launcher's priority: at nice 10 it left more to the closing process, and the trials gained nothing
measurable (bench/README.md, 2026-12-03: parallel efficiency 0.91 either way)."""


def yield_to_trials() -> None:
    """Lower this thread's CPU priority (Linux: each thread has its own nice value) to `NICE`. Elsewhere, or where it
    is refused, nothing changes."""
    if sys.platform == "linux":
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)


def prepare() -> None:
    """Import what naming a trial's run needs (`ablate.reporting.labels`, `Tracker.run_name`), ahead of the first."""
    import ablate.reporting  # noqa: F401
