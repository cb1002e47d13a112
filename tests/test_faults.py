"""Database faults are errors, not tracebacks, and lose nothing: a corrupt file, a read-only database, a full
disk (a real file-size limit), and a journal that keeps what the store refused until the next launch."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TINY, write_sweeps

from ablate.journal import journals
from ablate.messages import EpochEnd, Finished, Started
from ablate.recorder import Recorder
from ablate.store import Store
from ablate.store.faults import EXIT_CODE, StoreUnavailable

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


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs where this process may mount one (a real full disk), else None."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    yield mount if made.returncode == 0 else None
    if made.returncode == 0:
        subprocess.run(["umount", str(mount)], check=True)


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
        recorder.finish(Finished("k", "done", result={"test": {"top1": 0.9}}, params=10))
        assert isinstance(recorder.failure, StoreUnavailable) and recorder.journaled == 4
    assert len(journals(storage)) == 1
    with Store(f"sqlite:///{db}") as store:
        assert store.trial("k").state == "pending"  # nothing reached the store
        assert Recorder(store).replay(storage) == 4
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"], row["params"], row["test.top1"]) == ("done", 1, 10, 0.9)
        assert sorted(store.metrics_frame("s")["step"]) == [1, 1, 2, 2]
    assert journals(storage) == []


def test_a_store_that_refuses_writes_raises_without_a_journal(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    Store(f"sqlite:///{db}").close()
    with Store(f"sqlite:///file:{db}?mode=ro&uri=true") as down, pytest.raises(StoreUnavailable, match="read-only"):
        down.upsert_sweep("s")
