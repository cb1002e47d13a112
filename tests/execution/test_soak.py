"""The chaos soak's own parts (tests/chaos.py; the soak itself is bench/soak.py, `make soak`): its schedule is the
seed's and keeps within what leases tolerate, its bucket unplugging really refuses and cuts connections, and its
trial witness really sees two trainings of one key at once and really dies halfway through a checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import chaos
import pytest
from conftest import TINY
from team import Service

from ablate.config import TrialConfig
from ablate.store import Store
from ablate.training.checkpoints import FILE


def test_a_seed_draws_one_schedule_within_what_leases_tolerate() -> None:
    lease = 20.0
    a, b = chaos.schedule(7, 1800, lease), chaos.schedule(7, 1800, lease)
    assert a == b and a != chaos.schedule(8, 1800, lease)  # a seed replays its schedule
    assert set(Counter(f.kind for f in a)) == set(chaos.KINDS)  # a long soak draws every kind
    assert all(0 < f.at < 1800 for f in a) and len(a) < 1800 / 2  # bounded in time and in number
    skews = [f.skew for f in a if f.kind.startswith("launcher")]
    assert max(abs(s) for s in skews) <= 0.2 * lease and len(set(skews)) > 10
    outages = [f.seconds for f in a if f.kind in ("postgres-down", "mlflow-down", "bucket-down")]
    assert max(outages) + 2 * 0.2 * lease <= chaos.tolerated(lease)  # no lease lapses under an outage and skews
    by_resource: dict[str | None, list[chaos.Fault]] = {}
    for f in a:
        by_resource.setdefault(f.resource, []).append(f)
    for resource, faults in by_resource.items():
        if resource is not None:  # one resource's faults never overlap each other
            assert all(x.at + x.seconds < y.at for x, y in pairwise(faults)), resource
    assert chaos.overlapping(a) > 0  # different resources' faults do


def test_overlapping_counts_faults_under_way_together() -> None:
    f = [chaos.Fault(0, "node", 10, 1), chaos.Fault(5, "mlflow-down", 1, 0), chaos.Fault(20, "bucket-down", 1, 0)]
    assert chaos.overlapping(f) == 2


def test_the_proxy_refuses_and_cuts_connections_while_down_and_serves_again_on_its_port() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")],
                             daemon=True).start()  # fmt: skip

    threading.Thread(target=echo, daemon=True).start()
    proxy = chaos.Proxy(port).up()
    try:
        open_ = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        open_.sendall(b"ping")
        assert open_.recv(4) == b"ping"
        proxy.down()
        assert open_.recv(4) == b""  # the open connection is cut
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        proxy.up()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as again:
            again.sendall(b"pong")
            assert again.recv(4) == b"pong"
    finally:
        proxy.down()
        server.close()


def _config() -> TrialConfig:
    return TrialConfig.model_validate({**TINY, "train": {**TINY["train"], "epochs": 1}})


def test_the_witness_logs_a_second_training_of_a_key_at_once(tmp_path: Path) -> None:
    """The lock of a running attempt is held (here by the test): an attempt of the same key logs `concurrent`,
    then trains, and its end says it trained the trial to the end."""
    import fcntl

    (tmp_path / "locks").mkdir()
    with (tmp_path / "locks" / "k1").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = chaos.witnessed(str(tmp_path))(_config(), lambda *a: None, tmp_path / "ckpt" / "k1")
    events = [json.loads(line) for line in (tmp_path / "attempts.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["concurrent", "begin", "end"]
    assert result.outcome == "done" and events[-1]["trained"] is True


@pytest.mark.parametrize("where", [0, 1])
def test_a_claimed_kill_request_kills_the_trial_halfway_through_its_checkpoint(where: int, tmp_path: Path) -> None:
    """A real process runs the witnessed trial with a kill request waiting: it dies by SIGKILL in its first
    checkpoint write (the local file: half of it in its temporary file, no checkpoint; the upload: half an object
    in the bucket folder, no marker), having logged the claim; the request is taken, and a next attempt trains."""
    folder, ckpt = tmp_path / "w", tmp_path / "ckpt"
    chaos.request_kill(folder, 1, where)
    code = f"""
import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})
import chaos
from ablate.config import TrialConfig
from ablate.store import Store
from ablate.training.checkpoint_storage import Storage
cfg = TrialConfig.model_validate({json.dumps({**TINY, "train": {**TINY["train"], "epochs": 1}})})
run = chaos.witnessed({str(folder)!r})
chaos.arm({str(folder)!r})
if {where}:
    (__import__("pathlib").Path({str(tmp_path / "bucket" / "k1")!r})).mkdir(parents=True)
    with open({str(tmp_path / "checkpoint.pt")!r}, "wb") as f:
        f.write(b"x" * 1000)
    with open({str(tmp_path / "checkpoint.pt")!r}, "rb") as f:
        Storage({str(tmp_path / "bucket")!r}).publish("k1", f)
else:
    run(cfg, lambda *a: None, __import__("pathlib").Path({str(ckpt / "k1")!r}))
"""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    events = [json.loads(line) for line in (folder / "attempts.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "killed" and events[-1]["where"] == ("save", "upload")[where]
    assert not list((folder / "kill").glob("*.save")) and not list((folder / "kill").glob("*.upload"))
    if where:
        from ablate.training.checkpoint_storage import Storage

        assert Storage(tmp_path / "bucket").published("k1") is None
        assert (tmp_path / "bucket" / "k1" / "checkpoint-cut.pt").stat().st_size == 500
    else:
        assert not (ckpt / "k1" / FILE).exists() and list((ckpt / "k1").glob(f"{FILE}.*.tmp"))
        result = chaos.witnessed(str(folder))(_config(), lambda *a: None, ckpt / "k1")  # no request left
        assert result.outcome == "done" and (ckpt / "k1" / FILE).exists()


def test_a_server_that_exits_by_itself_is_started_again_unless_a_fault_holds_it_stopped(tmp_path: Path) -> None:
    """The CI soak of seed 1 waited 240 s for an MLflow server that had exited: it was started while PostgreSQL was
    down, and `mlflow server` exits when its database refuses it. The soak's servers are kept as systemd would."""
    marker = tmp_path / "starts"
    script = f"open({str(marker)!r}, 'a').write('x'); raise SystemExit(3)"
    server = Service([sys.executable, "-c", script], dict(os.environ), tmp_path / "server.log").start()
    assert server.proc is not None and server.proc.wait(timeout=60) == 3
    assert server.keep() is None, "started again sooner than RESTART_AFTER after its start"
    server.RESTART_AFTER = 0.0
    with server.held:
        assert server.keep() is None, "started again while a fault held it stopped"
    assert server.keep() == 3
    assert server.proc.wait(timeout=60) == 3 and marker.read_text() == "xx"
    running = Service([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path / "r.log")
    running.RESTART_AFTER = 0.0
    assert running.start().keep() is None, "a running server started twice"
    running.stop()


class CountedStore(Store):
    """A real store that counts the trials read one by one (`trial`)."""

    reads = 0

    def trial(self, key: str) -> Any:
        self.reads += 1
        return super().trial(key)


def test_the_watch_reads_only_what_ended_since_and_sees_a_result_rewritten_by_a_clock_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Done trials are noted once; a look with nothing ended since reads no trial (it read every done trial each
    second); a done trial finished again by a launcher whose clock is behind by the largest skew is seen to
    change, once; a trial retrained (archived, then done again) is not a change of the old result."""
    from ablate.store import writes

    with CountedStore(f"sqlite:///{tmp_path}/r.sqlite") as store:
        store.add_trials("s", [{"key": f"k{i}", "variant": "v", "config": {}, "axes": {}} for i in range(3)])
        for i in range(3):
            store.mark_running(f"k{i}", host="h")
            store.finish(f"k{i}", "done", result={"test": {"top1": 50.0 + i}})
        watch = chaos.Watch(back=chaos.skew_max(20.0) + 20.0)
        assert watch.look(store) == [] and set(watch.done) == {"k0", "k1", "k2"} and store.reads == 3
        store.reads = 0
        assert watch.look(store) == [] and store.reads == 3  # the last look's window again, not more
        real = writes.now
        monkeypatch.setattr(writes, "now", lambda: real() - timedelta(seconds=chaos.skew_max(20.0)))
        store.finish("k1", "done", result={"test": {"top1": 99.0}})
        store.archive(["k2"], "rerun")
        [line] = watch.look(store)
        assert line.startswith("k1 changed after it was done") and "99.0" in line and watch.changed == ["k1"]
        assert watch.look(store) == [] and watch.changed == ["k1"]


def test_a_trial_done_before_the_window_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A look reads the trials that ended within its window, not every done trial of the store: 50 trials done an
    hour ago are read by the first look only."""
    from ablate.store import writes

    real = writes.now
    monkeypatch.setattr(writes, "now", lambda: real() - timedelta(hours=1))
    with CountedStore(f"sqlite:///{tmp_path}/r.sqlite") as store:
        store.add_trials("s", [{"key": f"k{i}", "variant": "v", "config": {}, "axes": {}} for i in range(50)])
        for i in range(50):
            store.mark_running(f"k{i}", host="h")
            store.finish(f"k{i}", "done", result={"test": {"top1": 1.0}})
        watch = chaos.Watch(back=chaos.skew_max(20.0) + 20.0)
        watch.look(store)
        assert len(watch.done) == store.reads == 50
        watch.look(store)
        assert store.reads == 50
