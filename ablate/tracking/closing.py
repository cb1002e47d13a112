"""MLflow's view of a launch finished in a process of its own, after the launch has returned.

`ablate launch` hands this the end of its MLflow work: the trials the mirror has not caught up with, then each
sweep's parent run ended with its summary (the sweep's report, plots included, as artifacts), which cost seconds a
person would otherwise wait for once every result is in the store. The store stays the source of truth: a closing cut
short (killed, MLflow down or failing) leaves the trials marked unmirrored and the summaries out of step, and `ablate
sync` (or the next launch of the sweeps) brings MLflow in step. While it runs it holds a lock of its MLflow store
(`waited`), which the next launch and `ablate sync` wait for before they look at what MLflow lacks: two writers of
the same runs at once would each be right in the end, but one run could meanwhile have a copy.

    python -m ablate.tracking.closing < closing.json     # what `Closing.start` runs, detached
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate.store import Store
from ablate.tracking.mirror import sync_trial, yield_to_trials
from ablate.tracking.tracker import Tracker


@dataclass(frozen=True)
class Closing:
    """What the closing process needs: where the store and MLflow are, the launch's sweeps, and the status their
    parent runs end with (FINISHED, or KILLED after Ctrl-C)."""

    store: str
    """The store's database URL."""
    tracking: str
    """MLflow's tracking URI."""
    artifacts: str | None
    """Where a SQLite MLflow store keeps its artifacts (`Tracker.artifact_root`)."""
    sweeps: list[str]
    status: str

    def start(self, tracker: Tracker) -> subprocess.Popen[bytes]:
        """Start the closing process in a session of its own (a Ctrl-C at the prompt does not reach it) holding the
        lock of `tracker`'s MLflow store, taken here (after an earlier closing's) and handed over, so a look that
        waits for it (`waited`) cannot come between; return at once. It reads this from its stdin (a database URL
        may hold a password: not on its command line)."""
        lock = os.open(lock_file(tracker), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, pass_fds=(lock,),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)  # fmt: skip
        finally:
            os.close(lock)  # the process holds the lock until it exits, however it ends
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(asdict(self)).encode())
        proc.stdin.close()
        return proc


def lock_file(tracker: Tracker) -> Path:
    """The lock of a closing of `tracker`'s MLflow store: beside a SQLite store's file, else in the temporary folder
    (named after the tracking URI: launchers on other machines do not share it, nor need to)."""
    if tracker.db is not None:
        return tracker.db.with_name(f"{tracker.db.name}.closing.lock")
    return Path(tempfile.gettempdir()) / f"ablate-closing-{hashlib.sha256(tracker.uri.encode()).hexdigest()[:16]}.lock"


WAIT = 60.0
"""Seconds `waited` waits at most for a closing (one stuck on an MLflow server that answers nothing): after it, the
look goes on beside it (two writers of a run end right, one run may have a copy a moment)."""


def waited(tracker: Tracker, timeout: float = WAIT) -> None:
    """Return once no closing of `tracker`'s MLflow store runs (at once where none does), or after `timeout`."""
    path = lock_file(tracker)
    if not path.exists():
        return
    end = time.monotonic() + timeout
    lock = os.open(path, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > end:
                    return
                time.sleep(0.05)
    finally:
        os.close(lock)


def finish(store: Store, tracker: Tracker, sweeps: list[str], status: str) -> None:
    """Mirror every trial of `sweeps` that MLflow lags behind on, then end each sweep's parent run with `status` and
    its summary (`Tracker.end_sweep`). Errors propagate: what they cut short stays for `ablate sync`."""
    for key in store.unmirrored(sweeps):
        sync_trial(store, tracker, key)
    for sweep in sweeps:
        tracker.end_sweep(store, sweep, status)


def main() -> None:
    yield_to_trials()  # its only thread: the whole process
    closing = Closing(**json.loads(sys.stdin.read()))
    with Store(closing.store) as store:
        finish(store, Tracker(closing.tracking, closing.artifacts, lazy=True), closing.sweeps, closing.status)


if __name__ == "__main__":
    main()
