"""The recorder writes a wave of trials (their starts, epochs and results) in one transaction: a launcher killed
(SIGKILL, a real process) inside that transaction leaves none of the wave half-written, one killed after it keeps
every result of the wave, and a store that refuses the wave journals all of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gate import wait_for

from ablate.execution.journal import journals
from ablate.execution.recorder import Recorder
from ablate.store import Store
from ablate.store.faults import StoreUnavailable
from ablate.training.messages import EpochEnd, Finished, Started

KEYS = ("k1", "k2")

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sqlalchemy import event
    from ablate.execution.recorder import Recorder
    from ablate.store import Store
    from ablate.training.messages import EpochEnd, Finished, Started

    db, marker, when = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    store = Store(db)
    finishes = []

    def pause_at_second_finish(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("UPDATE trials") and not executemany and "done" in tuple(parameters):
            finishes.append(statement)
            if len(finishes) == 2 and when == "inside":  # k1's result written, k2's too, nothing committed
                marker.write_text("inside")
                time.sleep(300)

    event.listen(store.engine, "after_cursor_execute", pause_at_second_finish)
    messages = [m for k in ("k1", "k2") for m in (Started(k, "h", "n", "cpu"), EpochEnd(k, 1, {"loss": 0.5}, 1.0))]
    Recorder(store).record(messages, [Finished(k, "done", result={"test": {"top1": 0.9}}) for k in ("k1", "k2")])
    marker.write_text("after")
    time.sleep(300)
    """
)


def killed(db: Path, tmp_path: Path, when: str) -> None:
    """Run a real process that records the wave of KEYS and SIGKILL it `when` ("inside" the transaction, or "after"
    the recorder returned), at a point it marks itself."""
    marker = tmp_path / f"{when}.marker"
    child = subprocess.Popen([sys.executable, "-c", CHILD, f"sqlite:///{db}", str(marker), when])
    try:
        wait_for(lambda: (marker.exists() and marker.read_text() == when) or child.poll() is not None, timeout=120)
        assert child.poll() is None, "the recording process ended before it was killed"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)


def fresh(db: Path) -> None:
    with Store(f"sqlite:///{db}") as store:
        store.add_trials("s", [{"key": k, "config": {}, "axes": {}, "variant": k} for k in KEYS])


def test_a_launcher_killed_inside_a_waves_transaction_leaves_none_of_it_half_written(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    fresh(db)
    killed(db, tmp_path, "inside")
    with Store(f"sqlite:///{db}") as store:
        assert store.states() == dict.fromkeys(KEYS, "pending")  # no start, no result: the next launch trains both
        assert store.metrics_frame("s").empty


def test_a_launcher_killed_after_a_wave_was_recorded_keeps_every_result_of_it(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    fresh(db)
    killed(db, tmp_path, "after")
    with Store(f"sqlite:///{db}") as store:
        rows = store.trials_frame("s").set_index("key")
        assert list(rows["state"]) == ["done", "done"] and list(rows["test.top1"]) == [0.9, 0.9]
        assert list(rows["attempts"]) == [1, 1] and store.holders() == {}
        assert len(store.metrics_frame("s")) == 2


def test_a_wave_the_store_refuses_is_journaled_whole(tmp_path: Path) -> None:
    """The store refuses the wave (read-only): every record of it waits in the journal, none is lost or written
    twice, and the replay writes them all."""
    db, storage = tmp_path / "r.sqlite", tmp_path / "ck"
    fresh(db)
    messages = [Started("k1", "h", "n", "cpu"), EpochEnd("k1", 1, {"loss": 0.5}, time.time())]
    with Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down:
        recorder = Recorder(down, journal=storage / "journal" / "launcher.jsonl")
        recorder.record(messages, [Finished("k1", "done", result={"test": {"top1": 0.9}})])
        assert isinstance(recorder.failure, StoreUnavailable) and recorder.journaled == 3
    assert len(journals(storage)) == 1
    with Store(f"sqlite:///{db}") as store:
        assert Recorder(store).replay(storage) == 3
        assert store.trial("k1").state == "done" and len(store.metrics_frame("s")) == 1
