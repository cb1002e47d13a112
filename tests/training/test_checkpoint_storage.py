"""Checkpoints in an object store (`--storage s3://...`) on a real S3-compatible HTTP server (moto in server
mode): published atomically behind a marker, never read partial, stop requests carried, and a trial
interrupted on one machine resumed from the bucket alone."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import chaos
import fsspec
import pytest
import torch
from conftest import TINY, write_sweeps
from gate import Gate, wait_for
from test_launcher import CLI_ENV, launch_cmd

from ablate.config import TrialConfig
from ablate.execution.trial_task import TaskArgs, trial_task
from ablate.planning.plan import plan
from ablate.plugins import Plugins
from ablate.store import Store
from ablate.training.checkpoint_storage import MARKER, SCRATCH, Storage
from ablate.training.checkpoints import FILE, Checkpointer, Progress
from ablate.training.messages import StopRequest, TrialResult

pytestmark = pytest.mark.timeout(300)


def s3() -> fsspec.AbstractFileSystem:
    return fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)


def save(storage: Storage, key: str, epoch: int) -> None:
    """A real checkpoint of a tiny model at `epoch` in the trial's local folder."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Checkpointer(storage.folder(key)).save(model, optimizer, None, Progress(epoch=epoch))


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SCRATCH, str(tmp_path / "scratch"))
    return tmp_path / "scratch"


def test_each_checkpoint_is_published_behind_a_marker_and_fetched_whole(bucket: str, scratch: Path) -> None:
    storage = Storage(bucket)
    with storage.sync("k1"):
        save(storage, "k1", 1)
        first = wait_for(lambda: storage.published("k1"))
        save(storage, "k1", 2)
        second = wait_for(lambda: (m := storage.published("k1")) != first and m)
    objects = [p.rsplit("/", 1)[1] for p in s3().ls(bucket.removeprefix("s3://") + "/k1")]
    assert sorted(objects) == sorted([MARKER, second["object"]])  # the superseded object is gone
    shutil.rmtree(scratch)  # another machine: nothing local
    assert storage.fetch("k1") is None
    state, problem = Checkpointer(storage.folder("k1")).read()
    assert problem is None and state is not None and state["epoch"] == 2


def test_a_partial_or_mismatching_upload_is_never_read(bucket: str, scratch: Path) -> None:
    storage, fs, base = Storage(bucket), s3(), bucket.removeprefix("s3://")
    save(storage, "k2", 3)
    data = (storage.folder("k2") / FILE).read_bytes()
    fs.pipe_file(f"{base}/k2/checkpoint-orphan.pt", data[: len(data) // 2])  # an upload the marker never named
    assert storage.fetch("k2") is None  # no marker: no checkpoint, and the local leftover is not trusted
    assert not (storage.folder("k2") / FILE).exists()
    marker = {"object": "checkpoint-orphan.pt", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    fs.pipe_file(f"{base}/k2/{MARKER}", json.dumps(marker).encode())  # names a truncated object
    problem = storage.fetch("k2")
    assert problem is not None and "does not match its marker" in problem
    assert not (storage.folder("k2") / FILE).exists()


def test_an_upload_cut_short_leaves_nothing_once_the_trial_publishes_again(bucket: str, scratch: Path) -> None:
    """An attempt killed mid-upload leaves an object no marker names (the chaos soak found them); the trial's next
    publish removes it with the superseded one, so its folder holds its marker and one checkpoint."""
    storage, fs, base = Storage(bucket), s3(), bucket.removeprefix("s3://")
    save(storage, "k3", 1)
    with (storage.folder("k3") / FILE).open("rb") as f:
        first = storage.publish("k3", f)
    fs.pipe_file(f"{base}/k3/checkpoint-cut.pt", b"half of an upload")
    save(storage, "k3", 2)
    with (storage.folder("k3") / FILE).open("rb") as f:
        second = storage.publish("k3", f)
    fs.invalidate_cache()
    objects = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{base}/k3"))
    assert second != first and objects == sorted([MARKER, second["object"]])


def test_a_stop_request_reaches_the_trial_through_the_bucket(bucket: str, scratch: Path) -> None:
    storage = Storage(bucket)
    with storage.sync("k3"):
        stop = StopRequest(storage.folder("k3"))
        assert not stop()
        storage.request_stop("k3")  # the launcher, on another machine
        wait_for(stop, timeout=30)
    storage.clear_stop("k3")
    assert not stop() and not storage.stop_requested("k3")


def test_a_stop_request_one_attempt_answered_stops_no_later_attempt(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker keeps the stop request it copied down for an attempt (SIGTERM to the launcher); the launcher, on
    another machine, withdraws the request from the bucket as it submits the trial again: the next attempt on
    that worker is not stopped (it was at its first step, again and again, with the worker's stale copy)."""
    storage, worker = Storage(bucket), tmp_path / "worker"
    monkeypatch.setenv(SCRATCH, str(worker))
    with storage.sync("k5"):
        storage.request_stop("k5")
        wait_for(StopRequest(storage.folder("k5")), timeout=30)
    monkeypatch.setenv(SCRATCH, str(tmp_path / "launcher"))
    storage.clear_stop("k5")  # the launcher submits the trial again
    monkeypatch.setenv(SCRATCH, str(worker))
    with storage.sync("k5"):
        assert not StopRequest(storage.folder("k5"))()


def test_a_done_attempt_leaves_its_last_checkpoint_in_the_bucket(ray_local, bucket: str, scratch: Path) -> None:
    """A trial that ends `done` right after its last save, before the upload thread looked again, still leaves
    that checkpoint in the bucket, the one its result reports (and the store records): a done trial's weights
    outlive the machine that trained them. Before, only a preempted attempt uploaded as it ended."""
    storage = Storage(bucket)

    def runner(cfg: TrialConfig, report: object, folder: Path) -> TrialResult:
        save(storage, "k6", 2)
        return TrialResult("done", 2)

    result = trial_task(TaskArgs(TrialConfig.model_validate(TINY).model_dump(mode="json"), "k6", bucket, runner,
                                 Plugins()))  # fmt: skip
    marker = storage.published("k6")
    assert result.checkpoint is not None and marker is not None and marker["sha256"] == result.checkpoint["sha"]


def run_cli(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("url", ["s3://no-such-bucket-here/x", "nosuchfs://x"])
def test_a_storage_that_cannot_be_written_is_an_error_before_anything_starts(
    tmp_path: Path, s3_server: dict[str, str], url: str
) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    res = run_cli(tmp_path, "launch", str(f), "--db", f"sqlite:///{tmp_path}/r.sqlite", "--no-mlflow", "--storage",
                  url, env={**CLI_ENV, **s3_server})  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"storage {url}" in res.stderr
    assert not (tmp_path / "r.sqlite").exists()


def test_multi_worker_trials_need_a_shared_folder(tmp_path: Path, bucket: str, s3_server: dict[str, str]) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"workers": 2, "cpus": 1}}}})
    res = run_cli(tmp_path, "launch", str(f), "--db", f"sqlite:///{tmp_path}/r.sqlite", "--no-mlflow", "--storage",
                  bucket, env={**CLI_ENV, **s3_server})  # fmt: skip
    assert res.returncode == 2 and "resources.workers > 1" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "r.sqlite").exists()


def test_a_trial_preempted_on_one_machine_resumes_from_the_bucket(
    tmp_path: Path, bucket: str, s3_server: dict[str, str]
) -> None:
    """SIGTERM while a trial provably runs: its stop request goes through the bucket, its mid-epoch checkpoint
    is published there; every local copy is then deleted (a fresh machine) and the next launch resumes the
    trial from the bucket alone."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 3, "batch_size": 32}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}})
    (key,) = [t.key for t in plan(f, "s").trials]
    env = {**CLI_ENV, **s3_server, SCRATCH: str(tmp_path / "machine-a")}
    gate = Gate(tmp_path / "gate", epoch=1)
    proc = subprocess.Popen(launch_cmd(f, tmp_path, gate, storage=bucket), cwd=tmp_path, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    os.environ[SCRATCH] = env[SCRATCH]  # for Storage.folder below: the worker's scratch folder
    try:
        gate.wait(1)
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: (Storage(bucket).folder(key) / "preempt").exists())  # came down from the bucket
        gate.open()
        out, _ = proc.communicate(timeout=120)
    finally:
        os.environ.pop(SCRATCH)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, out
    shutil.rmtree(tmp_path / "machine-a")
    res = subprocess.run(launch_cmd(f, tmp_path, storage=bucket), cwd=tmp_path,
                         env={**env, SCRATCH: str(tmp_path / "machine-b")}, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        t = store.trials_frame("s")
        assert list(t["state"]) == ["done"] and list(t["resumed_from"]) == [1] and list(t["attempts"]) == [2]
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3] and not m.duplicated(["key", "name", "step"]).any()


@pytest.fixture
def unplugged(s3_server: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[chaos.Proxy]:
    """The session's S3 server reached through a proxy the test unplugs (the soak's bucket outage)."""
    from s3fs import S3FileSystem

    proxy = chaos.Proxy(int(s3_server["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])).up()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    S3FileSystem.clear_instance_cache()  # clients made before this test point at the server itself
    yield proxy
    proxy.down()
    S3FileSystem.clear_instance_cache()


def test_a_trial_waits_out_a_bucket_outage_at_its_start_and_at_its_end(
    bucket: str, scratch: Path, unplugged: chaos.Proxy
) -> None:
    """The chaos soak (seed 7) saw a trial fail because the bucket was unreachable for a few seconds as it started:
    the fetch, and the last upload of a done trial, wait for the bucket (up to `PATIENCE`) instead."""
    storage = Storage(bucket)
    with storage.sync("k1"):
        save(storage, "k1", 1)
    shutil.rmtree(scratch)  # another machine
    unplugged.down()
    sync = storage.sync("k1")
    starting = threading.Thread(target=sync.__enter__)
    starting.start()
    wait_for(lambda: sync.waits or not starting.is_alive())
    unplugged.up()
    starting.join(timeout=120)
    state, _ = Checkpointer(storage.folder("k1")).read()
    assert not starting.is_alive() and state is not None and state["epoch"] == 1 and sync.problems == []
    unplugged.down()
    seen = len(sync.waits)
    save(storage, "k1", 2)
    ending = threading.Thread(target=sync.__exit__)
    ending.start()
    wait_for(lambda: len(sync.waits) > seen or not ending.is_alive())
    unplugged.up()
    ending.join(timeout=120)
    shutil.rmtree(scratch)
    assert not ending.is_alive() and sync.problems == [] and storage.fetch("k1") is None
    state, _ = Checkpointer(storage.folder("k1")).read()
    assert state is not None and state["epoch"] == 2
