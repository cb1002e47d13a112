"""Database faults are errors, not tracebacks, and lose nothing: a corrupt file, a read-only database, a full
disk (a real file-size limit), and a journal that keeps what the store refused until the next launch."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import TINY, fresh_database, postgres_binary, write_sweeps
from gate import Gate
from procs import Postgres
from synthetic import failed_elsewhere
from test_launcher import launch_cmd
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution.fanout import Fanout
from ablate.execution.heartbeat import Heartbeat
from ablate.execution.journal import journals
from ablate.execution.launcher import LaunchResult, RunConfig, launch
from ablate.execution.progress import Display
from ablate.execution.recorder import Recorder
from ablate.execution.selection import Select, select
from ablate.planning.plan import plan
from ablate.plugins import Plugins
from ablate.store import Owner, Store
from ablate.store.faults import EXIT_CODE, StoreUnavailable
from ablate.training.messages import EpochEnd, Finished, Started

CLI_ENV = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=cwd, env=CLI_ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_a_corrupt_database_is_an_error_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    db.write_bytes(b"this is not a database, just some bytes " * 100)
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    launch = [
        "launch",
        str(f),
        "--db",
        f"sqlite:///{db}",
        "--no-mlflow",
        "--no-check",
        "--storage",
        str(tmp_path / "ck"),
    ]
    for args in (["status", "--db", f"sqlite:///{db}"], launch):
        res = cli(*args, cwd=tmp_path)
        assert res.returncode == EXIT_CODE, res.stdout + res.stderr
        assert "Traceback" not in res.stderr and "r.sqlite" in res.stderr and "not a readable database" in res.stderr
    assert not (tmp_path / "ck").exists()  # the launch stopped before anything ran


def test_a_read_only_database_is_an_error_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    Store(f"sqlite:///{db}").close()
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"  # SQLite itself refuses every write (root ignores chmod)
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    res = cli("launch", str(f), "--db", read_only, "--no-mlflow", "--no-check", "--storage", str(tmp_path / "ck"),
              cwd=tmp_path)  # fmt: skip
    assert res.returncode == EXIT_CODE, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "is read-only" in res.stderr


FULL_DISK = """
import sys
from ablate.store import Store
from ablate.store.faults import StoreUnavailable
store = Store(sys.argv[1])
store.add_trials("s", [{"key": "k", "config": {}, "axes": {}, "variant": "v"}])
try:
    for step in range(1, 10_000):
        store.log_metrics("k", step, {f"m{i}": float(i) for i in range(200)})
except StoreUnavailable as e:
    print(e)
"""


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path | None]:
    """A tmpfs of `size` at `mount` where this process may mount one (a real disk that fills), else None. Unmounted
    lazily: a process of the test may still hold a file there (a launch's Ray workers outlive it a moment), and a
    plain umount then fails "target is busy" and leaves the tmpfs mounted in pytest's folder, which pytest cannot
    remove ("Device or resource busy"); lazily, it leaves the folder at once and goes when the last file closes."""
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    try:
        yield mount if made.returncode == 0 else None
    finally:
        if made.returncode == 0:
            subprocess.run(["umount", "--lazy", str(mount)], check=True)


def test_a_tmpfs_still_in_use_is_unmounted_all_the_same(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as mount:
        if mount is None:
            pytest.skip("needs a tmpfs mount (root in a container that allows mounts)")
        held = (mount / "held").open("w")
    try:
        assert not os.path.ismount(tmp_path / "disk")
        (tmp_path / "disk").rmdir()
    finally:
        held.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path | None]:
    with tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def test_a_full_disk_is_an_error_naming_the_store(tmp_path: Path, small_disk: Path | None) -> None:
    """The database on a 1 MiB tmpfs fills it; where no mount is allowed, a real limit on file size
    (RLIMIT_FSIZE) refuses the writes instead. Either way: one message naming the store and the disk."""
    db = (small_disk or tmp_path) / "r.sqlite"
    Store(f"sqlite:///{db}").close()

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 2**20, 2 * 2**20))

    res = subprocess.run([sys.executable, "-c", textwrap.dedent(FULL_DISK), f"sqlite:///{db}"], capture_output=True,
                         text=True, timeout=300, preexec_fn=None if small_disk else limit)  # fmt: skip
    assert res.returncode == 0, res.stderr
    expected = "is on a full disk" if small_disk else "could not be written to its disk"
    assert expected in res.stdout and str(db) in res.stdout, res.stdout


def test_what_the_store_refuses_is_journaled_and_replayed(tmp_path: Path) -> None:
    """The recorder meets a store that refuses writes (read-only): a trial's start, epochs and result go to the
    journal, nothing raises; the next launch's replay writes them all and removes the journal."""
    db = tmp_path / "r.sqlite"
    with Store(f"sqlite:///{db}") as store:
        store.add_trials("s", [{"key": "k", "config": {}, "axes": {}, "variant": "v"}])
    storage = tmp_path / "ck"
    messages = [Started("k", "host", "node", "cpu"), EpochEnd("k", 1, {"loss": 0.5, "nan": float("nan")}, time.time()),
                EpochEnd("k", 2, {"loss": 0.25, "nan": 1.0}, time.time())]  # fmt: skip
    with Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down:
        recorder = Recorder(down, journal=storage / "journal" / "launcher.jsonl")
        recorder.handle(messages)
        recorder.record([], [Finished("k", "done", result={"test": {"top1": 0.9}}, params=10)])
        assert isinstance(recorder.failure, StoreUnavailable) and recorder.journaled == 4
    assert len(journals(storage)) == 1
    with Store(f"sqlite:///{db}") as store:
        assert store.trial("k").state == "pending"  # nothing reached the store
        assert Recorder(store).replay(storage) == 4
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"], row["params"], row["test.top1"]) == ("done", 1, 10, 0.9)
        assert sorted(store.metrics_frame("s")["step"]) == [1, 1, 2, 2]
    assert journals(storage) == []


def test_the_journal_reaches_the_store_first_once_it_answers_again(tmp_path: Path) -> None:
    """The store refuses a trial's start and first epoch, then answers again (its server restarted): the
    launcher's next poll, with no message, writes the journal, and later records follow it, so the trial ends
    `done` with both epochs and one attempt, and nothing is left to replay. Before, the journal waited for the
    next launch, whose replayed start reopened the finished trial (`running`, no result)."""
    db = tmp_path / "r.sqlite"
    storage = tmp_path / "ck"
    with Store(f"sqlite:///{db}") as store, Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down:
        store.add_trials("s", [{"key": "k", "config": {}, "axes": {}, "variant": "v"}])
        recorder = Recorder(down, journal=storage / "journal" / "launcher.jsonl")
        recorder.handle([Started("k", "host", "node", "cpu"), EpochEnd("k", 1, {"loss": 0.5}, time.time())])
        assert recorder.failure is not None and recorder.journaled == 2 and len(journals(storage)) == 1
        recorder.handle([])  # a poll while the store is still down: the journal stays as it is
        assert recorder.journaled == 2 and store.trial("k").state == "pending"
        recorder.store = store  # the server is back
        recorder.handle([])
        assert recorder.failure is None and journals(storage) == [] and store.trial("k").state == "running"
        recorder.handle([EpochEnd("k", 2, {"loss": 0.25}, time.time())])
        recorder.record([], [Finished("k", "done", result={"test": {"top1": 0.9}})])
        assert Recorder(store).replay(storage) == 0
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"], row["test.top1"]) == ("done", 1, 0.9)
        assert sorted(store.metrics_frame("s")["step"]) == [1, 2]


def test_a_journal_replayed_after_another_launcher_finished_the_trial_leaves_its_result_alone(tmp_path: Path) -> None:
    """Found by the chaos soak (bench/soak.py, seed 1): a launcher's start and first epoch of a trial go to its journal
    (the store is down), the launcher dies; another launcher trains the trial and records it done; a launch in the
    first one's place replays the journal. The replayed start reopened the done trial (`running`, its result
    cleared) and the next launch trained it again; now a done trial's records from another attempt are skipped."""
    db, storage = tmp_path / "r.sqlite", tmp_path / "ck"
    with Store(f"sqlite:///{db}") as store, Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down:
        store.add_trials("s", [{"key": "k", "config": {}, "axes": {}, "variant": "v"}])
        lost = Recorder(down, journal=storage / "journal" / "lost.jsonl")
        lost.handle([Started("k", "a", "node-a", "cpu"), EpochEnd("k", 1, {"loss": 9.0}, time.time())])
        assert lost.journaled == 2
        other = Recorder(store)
        other.handle([Started("k", "b", "node-b", "cpu"), EpochEnd("k", 1, {"loss": 0.5}, time.time())])
        other.record([], [Finished("k", "done", result={"test": {"top1": 0.9}})])
        before = store.trial("k")
        assert Recorder(store).replay(storage) == 2 and journals(storage) == []
        after = store.trial("k")
        assert (after.state, after.result, after.finished_at, after.attempts) == (
            "done", before.result, before.finished_at, 1)  # fmt: skip
        assert list(store.metrics_frame("s")["value"]) == [0.5]


def test_reads_of_a_store_that_went_away_are_store_errors(tmp_path: Path) -> None:
    """A read that meets a store gone away mid-launch raises StoreUnavailable, as a write does: the launch loop
    goes on without the store and journals what it refuses. Before, a read (`states`, which the loop calls
    whenever a trial ends) raised the driver's error and ended the launch with a traceback while PostgreSQL
    restarted."""
    db = tmp_path / "gone" / "r.sqlite"
    with Store(f"sqlite:///{db}") as store:
        store.add_trials("s", [{"key": "k", "config": {}, "axes": {}, "variant": "v"}])
        shutil.rmtree(db.parent)
        store.engine.dispose()  # its next connection opens the file again
        for read in (store.states, store.holders, store.checkpoints, store.unmirrored, store.trials_frame):
            with pytest.raises(StoreUnavailable, match="cannot be opened"):
                read(["k"])


def test_a_store_that_refuses_writes_raises_without_a_journal(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    Store(f"sqlite:///{db}").close()
    with Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down, pytest.raises(StoreUnavailable, match="read-only"):
        down.upsert_sweep("s")


def test_a_disk_that_fills_mid_launch_loses_no_result(ray_local, tmp_path: Path) -> None:
    """The store's disk fills while a trial provably runs: the launch goes on, the trial finishes, its later
    epochs and result go to the journal, the launch exits 3 naming the store; once there is room again the next
    launch (in this process, on the session's Ray were there anything to train) writes them, and the trial is done
    without training again."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 2}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}})
    with tmpfs(tmp_path / "disk", "8m") as disk:
        if disk is None:
            pytest.skip("needs a tmpfs mount (root in a container that allows mounts)")
        db = f"sqlite:///{disk}/r.sqlite"
        gate = Gate(tmp_path / "gate", epoch=1)
        proc = subprocess.Popen(launch_cmd(f, tmp_path, gate, db=db), cwd=tmp_path, env=CLI_ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            gate.wait(1)
            with (disk / "filler").open("wb") as filler, suppress(OSError):
                while True:
                    filler.write(b"\0" * 2**16)
                    filler.flush()
            gate.open()
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == EXIT_CODE, out
        assert "r.sqlite" in out and "journal" in out and "Traceback" not in out
        (disk / "filler").unlink()
        res = CliRunner().invoke(app, launch_cmd(f, tmp_path, db=db)[3:])  # in this process: nothing to train
        assert res.exit_code == 0, res.output
        assert "records an earlier launch journaled" in res.stdout
        with Store(db) as store:
            row = store.trials_frame("s").iloc[0]
            assert row["state"] == "done" and row["attempts"] == 1 and 0 <= row["test.top1"] <= 100
            assert sorted(set(store.metrics_frame("s")["step"])) == [1, 2]


def test_a_look_that_meets_an_outage_looks_again_from_the_same_moment_and_a_missed_failure_is_not_retrained(
    ray_local, tmp_path: Path
) -> None:
    """A launch's looks at what finished elsewhere (`Fanout.finished_elsewhere`) with the store's folder moved
    away for one look (this launcher cannot reach it; another still can). During it, another launcher fails one
    trial, stamped by a clock just under a lease behind (the start of this launcher's next window), and fails
    another stamped by a clock far behind (before any window). The look that meets the outage changes nothing;
    the next one, back from the same moment, forgets the first. The second, which every window misses, the
    claim refuses (it failed after the launch chose it), so it is not trained again; the whole-queue look then
    forgets it too."""
    p = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "seeds": 2}}), "s")
    near, far = (t.key for t in p.trials)
    folder, away = tmp_path / "store", tmp_path / "away"
    with Store(f"sqlite:///{folder}/r.sqlite") as store:
        store.add_trials("s", p.trials)
        chosen, owner = select([p], store, Select()), Owner.new(600)
        fan = Fanout(chosen.run, store, owner, Heartbeat(store, owner), Recorder(store), Display(live=False),
                     LaunchResult(), RunConfig(), Plugins(), str(tmp_path / "ck"), dict.fromkeys(chosen.run, 0.0),
                     chosen)  # fmt: skip
        fan.finished_elsewhere(whole=False)
        window = fan.seen - timedelta(seconds=owner.seconds)  # where the next look reaches back to
        folder.rename(away)
        store.engine.dispose()  # its next connection opens the file again: there is none
        with Store(f"sqlite:///{away}/r.sqlite") as elsewhere:
            for key, stamp in ((near, window), (far, window - timedelta(seconds=owner.seconds))):
                failed_elsewhere(elsewhere, key, stamp)
        fan.finished_elsewhere(whole=False)
        assert isinstance(fan.recorder.failure, StoreUnavailable) and fan.queue == [near, far]
        away.rename(folder)
        store.engine.dispose()
        fan.finished_elsewhere(whole=False)
        assert fan.queue == [far] and fan.result.counts == {"failed": 1}
        fan.fill()
        assert not fan.pending and fan.queue == [far] and store.trial(far).attempts == 1
        fan.finished_elsewhere(whole=True)
        assert fan.queue == [] and fan.result.counts == {"failed": 2}


class RestartedStore(Store):
    """A real PostgreSQL store whose server is stopped as the launch first writes its sweep (its set-up, after Ray
    started) and started again once the store says it waits."""

    def __init__(self, url: str, server: Postgres) -> None:
        super().__init__(url, patience=120)
        self.server, self.waited, self.restarted = server, threading.Event(), False

    def upsert_sweep(self, *args, **kwargs):
        if not self.restarted:
            self.restarted = True
            self.server.stop()
            threading.Thread(target=lambda: self.waited.wait(120) and self.server.start(), daemon=True).start()
        return super().upsert_sweep(*args, **kwargs)

    def _waiting(self, error: Exception, pause: float) -> None:
        super()._waiting(error, pause)
        self.waited.set()


def test_a_database_restart_during_the_launchs_set_up_is_waited_out(ray_local, tmp_path: Path, postgres: str) -> None:
    """PostgreSQL stopped as the launch records its sweep, between Ray's start and its loop: the write waits (as the
    launch's first look at the store does) instead of the launch exiting 3 at once, and once the server is back the
    trial runs to the end."""
    url = fresh_database(postgres)
    server = Postgres.of(postgres, str(postgres_binary("pg_ctl")))
    p = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "train": {**TINY["train"], "epochs": 1}}}}), "s")
    try:
        with RestartedStore(url, server) as store:
            res = launch([p], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=Display(live=False))
            assert store.waited.is_set() and res.counts == {"done": 1}, res
            assert store.done_keys() == {p.trials[0].key}
    finally:
        if server.down:
            server.start()


def test_a_launch_waits_for_a_database_server_that_is_restarting(tmp_path: Path, postgres: str) -> None:
    """The session's PostgreSQL stopped, a launch that starts meanwhile says it waits (instead of exit 3), and once
    the server is back it runs its trial to the end; a host name that does not resolve is not waited on."""
    url = fresh_database(postgres)
    server = Postgres.of(postgres, str(postgres_binary("pg_ctl")))
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    server.stop()
    try:
        proc = subprocess.Popen([*launch_cmd(f, tmp_path, db=url), "--no-check"], stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path)  # fmt: skip
        assert proc.stderr is not None
        said = next((line for line in iter(proc.stderr.readline, "") if "Trying again" in line), "")  # until it waits
        assert "does not answer" in said, "the launch did not wait for the database"
        server.start()
        out = proc.communicate(timeout=300)[1]
        assert proc.returncode == 0, out
    finally:
        if server.down:
            server.start()
    with Store(url) as store:
        assert len(store.done_keys()) == 1
    with pytest.raises(StoreUnavailable, match="does not resolve") as raised:
        Store("postgresql+psycopg://postgres@no-such-host.invalid/x", patience=60)
    assert not raised.value.restarting
