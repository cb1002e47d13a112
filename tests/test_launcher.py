"""Launch on real Ray, record in a real SQLite store and a real MLflow store: resume, retry, no lost results."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ablate.launcher import launch
from ablate.planner import plan
from ablate.progress import Progress
from ablate.store import Store
from ablate.tracking import Tracker
from conftest import TINY, write_sweeps

pytestmark = pytest.mark.timeout(300)


def wait_for(what, timeout: float = 120, every: float = 0.2):
    """Poll `what()` until truthy; every wait in these tests is bounded."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = what()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {getattr(what, '__name__', what)}")


def quiet() -> Progress:
    return Progress(live=False)


def test_launch_records_everything_and_never_reruns(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 1}})
    p = plan(f, "s")
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{tmp_path}/m.sqlite", str(tmp_path / "art"))
        res = launch([p], store=store, tracker=tracker, storage=tmp_path / "ck", progress=quiet())
        assert res.counts == {"done": 2} and res.skipped == 0
        trials = store.trials_frame("s")
        assert set(trials["state"]) == {"done"}
        assert (trials["params"] > 0).all() and trials["node_id"].notna().all()
        m = store.metrics_frame("s")
        assert set(m["step"]) == {1, 2}
        assert not m.duplicated(["key", "name", "step"]).any()
        runs = tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")
        assert {r.data.tags["trial_key"] for r in runs} == set(trials["key"])
        assert all(r.info.status == "FINISHED" and "val.top1" in r.data.metrics for r in runs)

        again = launch([p], store=store, tracker=tracker, storage=tmp_path / "ck", progress=quiet())
        assert again.counts == {} and again.skipped == 2
        assert set(store.trials_frame("s")["attempts"]) == {1}
        assert len(tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")) == 2


def test_extended_grid_runs_only_new_cells(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax"]}}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        launch([plan(f, "s")], store=store, storage=tmp_path / "ck", progress=quiet())
        write_sweeps(f, {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "sparsemax"]}}})
        res = launch([plan(f, "s")], store=store, storage=tmp_path / "ck", progress=quiet())
        assert res.counts == {"done": 1} and res.skipped == 1


def test_failure_and_divergence_are_recorded(ray_local, tmp_path: Path) -> None:
    broken = {**TINY, "task": "mil", "data": {"name": "mil_csv", "path": str(tmp_path / "missing.csv")}, "model": {"size": "synpool"}}
    nan = {**TINY, "train": {**TINY["train"], "lr": 1e30, "weight_decay": 0.0}}
    f = write_sweeps(tmp_path / "e.yaml", {"broken": {"base": broken}, "nan": {"base": nan}, "ok": {"base": TINY}})
    plans = plan(f)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launch(plans, store=store, storage=tmp_path / "ck", progress=quiet())
        assert res.counts == {"failed": 1, "diverged": 1, "done": 1}
        t = store.trials_frame().set_index("sweep")
        assert "missing.csv" in t.loc["broken", "error"]
        trace = store.trial(t.loc["broken", "key"]).traceback
        assert 'File "' in trace and "build_data" in trace and "\x1b[" not in trace
        assert t.loc["nan", "state"] == "diverged" and t.loc["nan", "diverged_epoch"] == 1


def slow_runner(cfg, report, checkpoint_dir):
    """The real trial, with each epoch stretched so a test can kill the worker mid-trial."""
    from ablate.trial import run_trial

    def slow_report(epoch, metrics):
        report(epoch, metrics)
        time.sleep(1.5)

    return run_trial(cfg, slow_report, checkpoint_dir)


def test_killed_worker_is_retried_and_resumes_from_its_checkpoint(ray_local, tmp_path: Path) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 4}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}})
    p = plan(f, "s")
    key = p.trials[0].key
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        box: dict = {}
        th = threading.Thread(target=lambda: box.update(res=launch([p], store=store, storage=tmp_path / "ck",
                                                                   runner=slow_runner, progress=quiet())))  # fmt: skip
        th.start()
        ckpt = tmp_path / "ck" / key / "checkpoint.pt"
        wait_for(lambda: ckpt.exists())
        pid = int(wait_for(lambda: subprocess.run(["pgrep", "-f", f"ray::trial-{key[:10]}"], capture_output=True, text=True).stdout.split() or None)[0])
        os.kill(pid, signal.SIGKILL)
        th.join(timeout=240)
        assert box["res"].counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert row["state"] == "done" and row["attempts"] == 2
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3, 4]
        assert not m.duplicated(["key", "name", "step"]).any()
        per_step = m.groupby("step")["name"].nunique()
        assert per_step.nunique() == 1  # every epoch has the same metric names: nothing lost


def burst_runner(cfg, report, checkpoint_dir):
    """A trial body that reports 40 epochs x 10 metrics at once (what many trials ending together send)."""
    from ablate.trial import TrialResult

    for epoch in range(1, 41):
        report(epoch, {f"m{i}": epoch + i / 10 for i in range(10)})
    return TrialResult("done", 40, {"test.top1": 1.0})


def test_many_trials_finishing_at_once_lose_nothing(ray_local, tmp_path: Path) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 0.1}}, "seeds": 24}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{tmp_path}/m.sqlite", str(tmp_path / "art"))
        res = launch([plan(f, "s")], store=store, tracker=tracker, storage=tmp_path / "ck", runner=burst_runner, progress=quiet())
        assert res.counts == {"done": 24}
        assert len(store.metrics_frame("s")) == 24 * 40 * 10


def test_killed_launcher_is_finished_by_the_next_launch(tmp_path: Path) -> None:
    """SIGKILL the launching process (and the embedded Ray it started) mid-sweep; a new launch finishes."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 3}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg, "grid": {"attention.kind": ["softmax", "sparsemax", "entmax15"]}}})
    db = f"sqlite:///{tmp_path}/r.sqlite"
    cmd = [sys.executable, "-m", "ablate.cli", "launch", str(f), "--db", db, "--no-mlflow", "--plain", "--storage", str(tmp_path / "ck")]
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Store(db) as store:
            wait_for(lambda: "done" in store.states().values() and "running" in store.states().values(), timeout=180)
            done_before = store.done_keys()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with Store(db) as store:
        res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert res.returncode == 0, res.stderr
        states = store.states()
        assert set(states.values()) == {"done"} and len(states) == 3
        t = store.trials_frame("s").set_index("key")
        assert (t.loc[list(done_before), "attempts"] == 1).all()  # completed trials were not re-run
        assert not store.metrics_frame("s").duplicated(["key", "name", "step"]).any()


def test_ctrl_c_marks_running_trials_interrupted_and_the_next_launch_resumes(tmp_path: Path) -> None:
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 30}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg, "seeds": 2}})
    db = f"sqlite:///{tmp_path}/r.sqlite"
    cmd = [sys.executable, "-m", "ablate.cli", "launch", str(f), "--db", db, "--no-mlflow", "--plain", "--storage", str(tmp_path / "ck")]
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with Store(db) as store:
            wait_for(lambda: len(store.metrics_frame("s")) > 0, timeout=180)
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    with Store(db) as store:
        assert "interrupted" in set(store.states().values())
        assert "running" not in set(store.states().values())
        res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        assert set(store.states().values()) == {"done"}
        assert set(store.trials_frame("s")["attempts"]) <= {1, 2}
