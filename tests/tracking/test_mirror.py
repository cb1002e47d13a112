"""MLflow as a best-effort mirror of the store: real MLflow stores and a real `mlflow server` that is down before a
launch or killed in the middle of one; `ablate sync` makes MLflow equal to the store afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import TINY, free_port, write_sweeps
from gate import Gate, wait_for
from procs import MlflowServer

from ablate.config import TrialConfig
from ablate.execution import recorder
from ablate.execution.recorder import Recorder
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.store import Store
from ablate.store.schema import TrialRecord
from ablate.tracking.mirror import NICE, Mirror, Synced, sync, sync_trial, yield_to_trials
from ablate.tracking.tracker import RUN_STATUS, Tracker, params_of
from ablate.training.messages import Finished, Started

pytestmark = pytest.mark.timeout(400)
GATE_SCRIPT = Path(__file__).parents[1] / "gate.py"
CLI_ENV = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
SYNC_ENV = {**CLI_ENV, "MLFLOW_HTTP_REQUEST_TIMEOUT": "120"}
"""`ablate sync` to a server just started: its first writes took over ablate's 10 s HTTP timeout in CI at a load of
two pytest processes (runs/create read timed out); how long the machine makes a server take is not what the tests
of a sync check."""


def trial(seed: int) -> Trial:
    cfg = TrialConfig.model_validate({**TINY, "seed": seed})
    return Trial(trial_key(cfg), variant_key(cfg), cfg, {"seed": seed})


def test_a_resumed_trial_replaying_its_history_sends_each_point_once(tmp_path: Path) -> None:
    """Epochs 1-2, interrupted; the resumed attempt replays epochs 1-2 (new wall times) and adds 3: MLflow's
    history holds steps 1, 2, 3 once each, the run ends FINISHED with the result, and a second sync sends
    nothing."""
    t = trial(0)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        tracker = Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}")
        store.add_trials("s", [t])
        store.mark_running(t.key)
        for step in (1, 2):
            store.log_metrics(t.key, step, {"train.loss": 1.0 / step}, wall_time=1000.0 + step)
        store.interrupt([t.key])
        assert sync(store, tracker).points == 2
        run_id = store.trial(t.key).mlflow_run_id
        assert tracker.client.get_run(run_id).info.status == "KILLED"
        store.mark_running(t.key)
        for step in (1, 2, 3):
            store.log_metrics(t.key, step, {"train.loss": 1.0 / step}, wall_time=2000.0 + step)
        store.finish(t.key, "done", result={"test": {"top1": 0.5}})
        assert sync(store, tracker).points == 1
        history = tracker.client.get_metric_history(run_id, "train.loss")
        assert sorted(m.step for m in history) == [1, 2, 3]
        run = tracker.client.get_run(run_id)
        assert run.info.status == "FINISHED" and run.data.metrics["test.top1"] == 0.5
        assert sync(store, tracker).trials == 0 and store.unmirrored() == []


class Held(Tracker):
    """A tracker whose first write of `hold` waits until the test lets it go: a mirror that read the trial
    before it changed, caught between its read and its write."""

    def __init__(self, uri: str, hold: str) -> None:
        super().__init__(uri)
        self.hold, self.reached, self.go = hold, threading.Event(), threading.Event()

    def show(self, run_id: str, trial: TrialRecord, step: int = 0) -> None:
        if trial.state == self.hold and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(120)
        super().show(run_id, trial, step)


def test_a_mirror_that_read_the_trial_before_it_ended_never_leaves_its_run_running(tmp_path: Path) -> None:
    """Two launchers' mirrors on one trial (the chaos soak's 'MLflow run RUNNING, the store's done'): one read
    it running and is held before writing RUNNING; the trial ends and the other mirror writes FINISHED and marks
    it mirrored; the first then writes its stale RUNNING. It reads the state again after writing, so the run
    ends FINISHED with its result, and the store has nothing left to mirror."""
    t = trial(0)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        uri = f"sqlite:///{tmp_path / 'm.sqlite'}"
        store.add_trials("s", [t])
        store.mark_running(t.key)
        store.log_metrics(t.key, 1, {"train.loss": 1.0}, wall_time=1000.0)
        stale = Held(uri, "running")
        behind = threading.Thread(target=sync_trial, args=(store, stale, t.key))
        behind.start()
        assert stale.reached.wait(120)
        store.finish(t.key, "done", result={"test": {"top1": 0.5}})
        tracker = Tracker(uri)
        sync_trial(store, tracker, t.key)
        assert store.unmirrored() == []
        stale.go.set()
        behind.join(120)
        run = tracker.client.get_run(store.trial(t.key).mlflow_run_id)
        assert (run.info.status, run.data.metrics["test.top1"]) == ("FINISHED", 0.5)
        assert store.unmirrored() == []


def test_a_stale_mark_of_what_mlflow_shows_is_not_kept(tmp_path: Path) -> None:
    """`set_mirrored` of a state the trial has left (a mirror's read overtaken) keeps nothing: the trial stays
    unmirrored for the next sync rather than marked in step with a state MLflow should no longer show."""
    t = trial(0)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", [t])
        store.mark_running(t.key)
        store.finish(t.key, "done", result={"test": {"top1": 0.5}})
        assert not store.set_mirrored(t.key, 0, "running")
        assert store.unmirrored() == [t.key]
        assert store.set_mirrored(t.key, 0, "done") and store.unmirrored() == []


def test_a_running_trials_changes_wait_to_settle_and_an_end_goes_at_once(tmp_path: Path, monkeypatch) -> None:
    """Through the recorder: a trial that started waits `SETTLE` seconds for the mirror (an hour here), one that
    ended goes at once, though it was recorded after; the launch's end (`close`) sends what still waits."""
    monkeypatch.setattr(recorder, "SETTLE", 3600.0)
    running, ended = trial(0), trial(1)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", [running, ended])
        tracker = Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}")
        mirror = Mirror(store, tracker, print).start()
        writes = Recorder(store, mirror)
        writes.record([Started(running.key, "h", "n", "cpu")])
        writes.record([Started(ended.key, "h", "n", "cpu")], [Finished(ended.key, "done", {"test.top1": 0.5})])
        wait_for(lambda: ended.key not in store.unmirrored(), timeout=120)
        assert store.unmirrored() == [running.key]
        assert mirror.close(timeout=120) == 0 and store.unmirrored() == []
        assert tracker.client.get_run(store.trial(running.key).mlflow_run_id).info.status == "RUNNING"
        mirror.stop()


def nice_of(thread: threading.Thread) -> int:
    """The nice value Linux gives one thread of this process (field 19 of its stat line)."""
    stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_the_closing_yields_and_the_mirrors_stop_never_waits_on_its_imports(tmp_path: Path, monkeypatch) -> None:
    """`yield_to_trials` puts its own thread at `NICE` and no other (the closing process calls it, its only thread);
    the mirror's thread keeps the launcher's priority. A launch that ends while the thread still imports the
    report's modules (`prepare`, held here until the test lets it go) returns at once: the thread has sent MLflow
    nothing, and ends once its imports are done."""
    own = nice_of(threading.current_thread())
    yielded = threading.Thread(target=lambda: (yield_to_trials(), go.wait(30)))
    importing, go = threading.Event(), threading.Event()
    monkeypatch.setattr("ablate.tracking.mirror.prepare", lambda: (importing.set(), go.wait(30)))
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        mirror = Mirror(store, Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}"), print).start(trials=True)
        yielded.start()
        assert importing.wait(60)
        wait_for(lambda: nice_of(yielded) == max(NICE, own))
        assert own < NICE and nice_of(mirror._thread) == own == nice_of(threading.current_thread())
        assert mirror.stop() and mirror._thread.is_alive()  # returned while the imports go on
        go.set()
        mirror._thread.join(60)
        yielded.join(60)
        assert not mirror._thread.is_alive()


def test_the_mirror_warns_once_and_never_holds_the_launch_while_mlflow_is_down(tmp_path: Path) -> None:
    t = trial(1)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_trials("s", [t])
        store.mark_running(t.key)
        heard: list[str] = []
        mirror = Mirror(store, Tracker(f"http://127.0.0.1:{free_port()}"), heard.append).start([t.key])
        wait_for(lambda: mirror.down)
        mirror.notify([t.key])
        assert mirror.close(timeout=300) == 1  # returns at once: nothing waits on a server that is down
        assert len(heard) == 1 and "ablate sync" in heard[0]
        assert store.unmirrored() == [t.key]  # the store still knows what MLflow lacks


def test_a_shared_trial_runs_in_the_experiment_of_the_sweep_that_ran_it_and_sync_summarises(tmp_path: Path) -> None:
    """'alpha' planned the trial, 'zeta' (launched later) ran it: its run is in zeta's experiment and nested
    under zeta's parent run; sync then puts zeta's summary on that parent and gives alpha an experiment whose
    parent run links the run."""
    t = trial(2)
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        tracker = Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}")
        store.add_trials("alpha", [t])
        store.upsert_sweep("zeta", spec={"axes": ["seed"]})
        store.add_trials("zeta", [t])
        store.mark_running(t.key)
        store.finish(t.key, "done", result={"test": {"top1": 0.5}})
        done = sync(store, tracker)
        assert (done.trials, done.summaries) == (1, 2)
        run = tracker.client.get_run(store.trial(t.key).mlflow_run_id)
        zeta, alpha = store.sweep("zeta"), store.sweep("alpha")
        assert run.info.experiment_id == zeta.mlflow_experiment_id
        assert run.data.tags["mlflow.parentRunId"] == zeta.mlflow_run_id
        parent = tracker.client.get_run(zeta.mlflow_run_id)
        assert [v for k, v in parent.data.metrics.items() if k.startswith("test.top1/mean/")] == [0.5]
        assert run.data.tags["sweep.alpha"] == alpha.mlflow_run_id
        assert tracker.client.get_run(alpha.mlflow_run_id).info.status == "FINISHED"
        assert sync(store, tracker) == Synced(0, 0, 0)  # in step: nothing sent again


def assert_mlflow_equals_the_store(store: Store, uri: str, sweep: str) -> None:
    """One run per trial, with the trial's status and params, and per metric exactly the store's steps."""
    tracker = Tracker(uri)
    trials = store.trials_frame(sweep)
    assert len(trials) and store.unmirrored() == []
    exp = tracker.client.get_experiment_by_name(sweep).experiment_id
    parent = tracker.client.get_run(store.sweep(sweep).mlflow_run_id)  # with the sweep's summary
    assert any(k.startswith(f"{parent.data.tags['report.metric']}/mean/") for k in parent.data.metrics)
    for row in trials.itertuples():
        runs = tracker.client.search_runs([exp], f"tags.trial_key = '{row.key}'")
        assert len(runs) == 1, row.key
        run, record = runs[0], store.trial(row.key)
        assert run.info.status == RUN_STATUS[row.state]
        assert run.data.params == params_of(record.config, store.membership(sweep, row.key).axes)
        rows = store.metric_rows(row.key)
        for name in {n for n, *_ in rows}:
            steps = sorted(m.step for m in tracker.client.get_metric_history(run.info.run_id, name))
            assert steps == sorted(s for n, s, *_ in rows if n == name), (row.key, name)


def launch_args(f: Path, tmp_path: Path, uri: str) -> list[str]:
    return ["launch", str(f), "--db", f"sqlite:///{tmp_path}/r.sqlite", "--mlflow-uri", uri, "--plain",
            "--no-check", "--storage", str(tmp_path / "ck"), "--lease", "4"]  # fmt: skip


def run_cli(*args: str, cwd: Path, env: dict[str, str] = CLI_ENV) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_mlflow_down_before_the_launch_then_synced(tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "train": {**TINY["train"], "epochs": 2}},
                                                 "seeds": 2}})  # fmt: skip
    server = MlflowServer(tmp_path / "mlflow", free_port())
    res = run_cli(*launch_args(f, tmp_path, server.uri), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("is failing") == 1 and "ablate sync" in res.stdout
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        assert set(store.trials_frame("s")["state"]) == {"done"} and len(store.unmirrored()) == 2
        server.folder.mkdir()
        try:
            server.start()
            synced = run_cli("sync", "--db", f"sqlite:///{tmp_path}/r.sqlite", "--mlflow-uri", server.uri, cwd=tmp_path,
                             env=SYNC_ENV)  # fmt: skip
            assert synced.returncode == 0, synced.stdout + synced.stderr
            assert "2 trials synced" in synced.stdout
            assert_mlflow_equals_the_store(store, server.uri, "s")
        finally:
            server.kill()


def test_mlflow_killed_mid_sweep_then_synced(tmp_path: Path) -> None:
    """The server dies while both trials are provably mid-run: the sweep finishes as if MLflow were not there;
    the server comes back on the same database and `ablate sync` fills in what it missed."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "train": {**TINY["train"], "epochs": 3}},
                                                 "seeds": 2}})  # fmt: skip
    (tmp_path / "mlflow").mkdir()
    server = MlflowServer(tmp_path / "mlflow", free_port()).start()
    gate = Gate(tmp_path / "gate", epoch=1)
    cmd = [sys.executable, str(GATE_SCRIPT), str(gate.folder), "1", "--", *launch_args(f, tmp_path, server.uri)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        gate.wait(2)
        server.kill()
        gate.open()
        out, _ = proc.communicate(timeout=300)
    finally:
        server.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        assert set(store.trials_frame("s")["state"]) == {"done"} and store.unmirrored()
        try:
            server.start()
            synced = run_cli("sync", "--db", f"sqlite:///{tmp_path}/r.sqlite", "--mlflow-uri", server.uri, cwd=tmp_path,
                             env=SYNC_ENV)  # fmt: skip
            assert synced.returncode == 0, synced.stdout + synced.stderr
            assert_mlflow_equals_the_store(store, server.uri, "s")
        finally:
            server.kill()
